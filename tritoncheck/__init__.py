"""tritoncheck: declare the contract of a training batch once, check every batch against it.

    import tritoncheck as tc
    spec = tc.load_spec("layoutlmv3-token-classification", config=model.config)
    batch = tc.validate(batch, spec)      # raises tc.BatchValidationError naming field, sample, value
"""

from importlib import import_module
from typing import TYPE_CHECKING

from ._api import check as check
from ._api import validate as validate
from ._api import warmup as warmup
from ._report import VIOLATION_CODES as VIOLATION_CODES
from ._report import BatchValidationError as BatchValidationError
from ._report import Report as Report
from ._report import Violation as Violation
from ._spec import BatchSpec as BatchSpec
from ._spec import FieldSpec as FieldSpec
from ._spec import RuleSpec as RuleSpec
from ._spec import SpecError as SpecError
from ._spec import builtin_spec_names as builtin_spec_names
from ._spec import load_spec as load_spec

__version__ = "0.1.0"

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time these load on first use (_LAZY)
    from . import strategies as strategies
    from ._data import IndexedDataset as IndexedDataset
    from ._data import ValidatingCollate as ValidatingCollate
    from ._derive import spec_for as spec_for
    from ._guard import checked as checked
    from ._guard import guard as guard
    from ._scan import scan as scan
    from ._triton.deferred import wait as wait

# Loaded on first use, so that `import tritoncheck` pulls in neither hypothesis, triton nor
# transformers (a DataLoader worker on a CPU-only machine needs none of them).
_LAZY = {
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
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module 'tritoncheck' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
