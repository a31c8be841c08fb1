"""The spec lowered once: host checks on sizes and data checks on values."""
