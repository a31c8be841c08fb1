"""One printer per device: C and Triton source from the kernel IR (and the buffer and escaping they share)."""
