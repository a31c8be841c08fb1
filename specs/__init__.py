"""Built-in batch contracts, installed as package data of tritoncheck."""
