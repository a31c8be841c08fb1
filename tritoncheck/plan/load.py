"""`load_spec`: a spec read, its parameters filled, and lowered once, so that a spec mistake is an
error when the spec loads rather than at the first batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tritoncheck.plan.lower import compile_plan
from tritoncheck.spec.extends import read_spec, spec_path
from tritoncheck.spec.schema import ParamValue, SpecError


def load_spec(name_or_path: str | Path, config: Any = None, **params: ParamValue) -> BatchSpec:
    """Load a built-in spec by name or a YAML file, and fill its parameters.

    Args:
        name_or_path: a built-in name (`tritoncheck specs` lists them) or a path to a YAML spec.
        config: a model config (object or dict) to take parameters from; unrelated fields are ignored.
        **params: parameters by keyword; they override the config. Unknown names are an error.
    """
    spec = read_spec(name_or_path)
    try:
        spec = spec.with_params(config, **params)
        missing = spec.missing_params()
        if missing and config is not None:
            raise SpecError(f"{spec.name}: missing parameter(s) {', '.join(missing)}, which the config does not have; "
                            f"pass them as keywords ({missing[0]}=...)")
        compile_plan(spec)  # raises SpecError now (missing parameter, bad size) rather than at the first batch
    except SpecError as exc:
        raise SpecError(f"{spec_path(name_or_path)}: {exc}") from None
    return spec
