"""Runners: the torch reference, the compiled C (built and cached) and Triton backends, deferred mode."""

# What `backend=` takes; here, where no runner is imported, so a command's parser names them without torch.
BACKENDS = ("auto", "torch", "c", "triton")
