"""tritoncheck: declare the contract of a training batch once, check every batch against it.

    import tritoncheck as tc
    spec = tc.load_spec("layoutlmv3-token-classification", config=model.config)
    batch = tc.validate(batch, spec)      # raises tc.BatchValidationError naming field, sample, value
"""

from importlib import import_module
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time every name loads on first use (_LAZY)
    from tritoncheck import strategies as strategies
    from tritoncheck.api import check as check
    from tritoncheck.api import failure_cases as failure_cases
    from tritoncheck.api import validate as validate
    from tritoncheck.api import warmup as warmup
    from tritoncheck.integrations.data import IndexedDataset as IndexedDataset
    from tritoncheck.integrations.data import ValidatingCollate as ValidatingCollate
    from tritoncheck.derive import spec_for as spec_for
    from tritoncheck.integrations.guard import checked as checked
    from tritoncheck.integrations.guard import guard as guard
    from tritoncheck.checks import VIOLATION_CODES as VIOLATION_CODES
    from tritoncheck.report import BatchValidationError as BatchValidationError
    from tritoncheck.report import Report as Report
    from tritoncheck.report import Violation as Violation
    from tritoncheck.scanning.engine import scan as scan
    from tritoncheck.spec.schema import BatchSpec as BatchSpec
    from tritoncheck.spec.schema import FieldSpec as FieldSpec
    from tritoncheck.spec.schema import RuleSpec as RuleSpec
    from tritoncheck.spec.schema import SpecError as SpecError
    from tritoncheck.spec.schema import builtin_spec_names as builtin_spec_names
    from tritoncheck.plan.load import load_spec as load_spec
    from tritoncheck.plan.lower import UncheckableBatchError as UncheckableBatchError
    from tritoncheck.api.deferred import wait as wait

# Loaded on first use: `import tritoncheck` (and `tritoncheck.__version__`) imports nothing else, not even torch
# (1.5 s of CPU); the spec names (BatchSpec, SpecError, VIOLATION_CODES, ...) load pydantic but not torch, the
# checker's names (check, load_spec, ...) load torch when first used, and neither hypothesis, triton nor
# transformers (a DataLoader worker on a CPU-only machine needs none of them) until their names are.
_LAZY = {
    "check": ("tritoncheck.api", "check"),
    "failure_cases": ("tritoncheck.api", "failure_cases"),
    "validate": ("tritoncheck.api", "validate"),
    "warmup": ("tritoncheck.api", "warmup"),
    "VIOLATION_CODES": ("tritoncheck.checks", "VIOLATION_CODES"),
    "BatchValidationError": ("tritoncheck.report", "BatchValidationError"),
    "Report": ("tritoncheck.report", "Report"),
    "Violation": ("tritoncheck.report", "Violation"),
    "BatchSpec": ("tritoncheck.spec.schema", "BatchSpec"),
    "FieldSpec": ("tritoncheck.spec.schema", "FieldSpec"),
    "RuleSpec": ("tritoncheck.spec.schema", "RuleSpec"),
    "SpecError": ("tritoncheck.spec.schema", "SpecError"),
    "builtin_spec_names": ("tritoncheck.spec.schema", "builtin_spec_names"),
    "load_spec": ("tritoncheck.plan.load", "load_spec"),
    "UncheckableBatchError": ("tritoncheck.plan.lower", "UncheckableBatchError"),
    "strategies": ("tritoncheck.strategies", None),
    "spec_for": ("tritoncheck.derive", "spec_for"),
    "ValidatingCollate": ("tritoncheck.integrations.data", "ValidatingCollate"),
    "IndexedDataset": ("tritoncheck.integrations.data", "IndexedDataset"),
    "guard": ("tritoncheck.integrations.guard", "guard"),
    "checked": ("tritoncheck.integrations.guard", "checked"),
    "scan": ("tritoncheck.scanning.engine", "scan"),
    "wait": ("tritoncheck.api.deferred", "wait"),
}


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = import_module(module)
        value = globals()[name] = mod if attr is None else getattr(mod, attr)  # (later uses skip this function)
        return value
    raise AttributeError(f"module 'tritoncheck' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
