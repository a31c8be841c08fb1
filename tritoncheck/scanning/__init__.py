"""Dataset scans: Arrow readers (buffers only, never pickle) and the local and Ray engines."""
