"""Runners: the torch reference, the compiled C (built and cached) and Triton backends, deferred mode."""
