"""Check kinds, each registered once with every part a backend, the strategies and the report need."""
