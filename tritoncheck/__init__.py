"""tritoncheck: declare the contract of a training batch once, check every batch against it.

    import tritoncheck as tc
    spec = tc.load_spec("layoutlmv3-token-classification", config=model.config)
    batch = tc.validate(batch, spec)      # raises tc.BatchValidationError naming field, sample, value
"""

from importlib import import_module
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time every name loads on first use (_LAZY)
    from . import strategies as strategies
    from ._api import check as check
    from ._api import validate as validate
    from ._api import warmup as warmup
    from ._data import IndexedDataset as IndexedDataset
    from ._data import ValidatingCollate as ValidatingCollate
    from ._derive import spec_for as spec_for
    from ._guard import checked as checked
    from ._guard import guard as guard
    from ._report import VIOLATION_CODES as VIOLATION_CODES
    from ._report import BatchValidationError as BatchValidationError
    from ._report import Report as Report
    from ._report import Violation as Violation
    from ._scan import scan as scan
    from ._spec import BatchSpec as BatchSpec
    from ._spec import FieldSpec as FieldSpec
    from ._spec import RuleSpec as RuleSpec
    from ._spec import SpecError as SpecError
    from ._spec import builtin_spec_names as builtin_spec_names
    from ._spec import load_spec as load_spec
    from ._triton.deferred import wait as wait

# Loaded on first use: `import tritoncheck` (and `tritoncheck.__version__`) imports nothing else, not even torch
# (1.5 s of CPU); the core names load torch, pydantic and the checker when first used, and neither hypothesis,
# triton nor transformers (a DataLoader worker on a CPU-only machine needs none of them) until their names are.
_LAZY = {
    "check": ("tritoncheck._api", "check"),
    "validate": ("tritoncheck._api", "validate"),
    "warmup": ("tritoncheck._api", "warmup"),
    "VIOLATION_CODES": ("tritoncheck._report", "VIOLATION_CODES"),
    "BatchValidationError": ("tritoncheck._report", "BatchValidationError"),
    "Report": ("tritoncheck._report", "Report"),
    "Violation": ("tritoncheck._report", "Violation"),
    "BatchSpec": ("tritoncheck._spec", "BatchSpec"),
    "FieldSpec": ("tritoncheck._spec", "FieldSpec"),
    "RuleSpec": ("tritoncheck._spec", "RuleSpec"),
    "SpecError": ("tritoncheck._spec", "SpecError"),
    "builtin_spec_names": ("tritoncheck._spec", "builtin_spec_names"),
    "load_spec": ("tritoncheck._spec", "load_spec"),
    "strategies": ("tritoncheck.strategies", None),
    "spec_for": ("tritoncheck._derive", "spec_for"),
    "ValidatingCollate": ("tritoncheck._data", "ValidatingCollate"),
    "IndexedDataset": ("tritoncheck._data", "IndexedDataset"),
    "guard": ("tritoncheck._guard", "guard"),
    "checked": ("tritoncheck._guard", "checked"),
    "scan": ("tritoncheck._scan", "scan"),
    "wait": ("tritoncheck._triton.deferred", "wait"),
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
