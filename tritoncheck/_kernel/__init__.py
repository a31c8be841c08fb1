"""The kernel IR and the backends generated from it (C for CPU; Triton to follow)."""
