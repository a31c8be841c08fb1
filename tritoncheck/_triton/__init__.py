"""The fused Triton backend: code generation (`codegen`), launch and read-back (`backend`), and
deferred verdicts (`deferred`). Importing this package does not import Triton itself."""
