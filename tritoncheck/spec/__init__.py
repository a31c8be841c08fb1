"""The contract: the Pydantic schema of a batch, YAML reading and `extends:`."""
