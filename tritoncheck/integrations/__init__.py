"""Hooks into training frameworks. Each submodule imports its framework only when imported itself:

- `tritoncheck.integrations.hf.ValidatingDataCollator`: wraps a Hugging Face Trainer data collator.
- `tritoncheck.integrations.lightning.TritoncheckCallback`: validates train, validation and test batches
  before the step, raising or dropping the bad samples in place.
"""
