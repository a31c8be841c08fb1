"""Batch contracts as Pydantic models, their YAML form, and parameter filling.

A `BatchSpec` is what a user writes; `tritoncheck.plan.lower.compile_plan` lowers it to checks.
Everything a spec file says is validated here, before any batch is seen: dtype names, shapes,
bounds and rule expressions (parsed, never evaluated), and that every name a rule uses is a
field, a parameter or a dim.
"""

from __future__ import annotations

import difflib
import keyword
import math
import re
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from tritoncheck import expr as _expr
from tritoncheck.checks import VIOLATION_CODES, Severity, field_codes
from tritoncheck.checks import options as check_options
from tritoncheck.dtypes import (
    DTYPE_NAMES,
    GROUPS,
    TORCH_ALIASES,
    all_integer_names,
    dtype_name,
    expand_names,
    is_dtype_name,
    is_torch_dtype,
    number_problem,
)

ParamValue = int | float | bool | str | None
# metadata codes a field may make a warning: a wrong rank the model broadcasts or ignores (GPT-2 views a [B]
# mask as [B, 1]); its checks are then listed as not checked, never run on a layout they were not written for
FIELD_META_SEVERITY: tuple[str, ...] = ("rank",)
Bound = int | float | str
UNIT_TAIL = "1?"  # a last shape entry: an axis of size 1 that the batch may leave out
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # \Z: `$` would let "x\n" through
MISSING_PYYAML_MESSAGE = "reading or writing YAML specs needs PyYAML: pip install pyyaml"


class SpecError(ValueError):
    """A contract that cannot be used: a bad spec file, a missing or unknown parameter."""


SpecError.__module__ = "tritoncheck"


class _SpecMeta(type(BaseModel)):  # type: ignore[misc]
    """A spec part built in Python (`tc.BatchSpec(...)`) reports its mistakes as a file's are: `SpecError`.

    On the class call, not in `__init__`: pydantic routes nested validation through a custom `__init__`,
    which would wrap a field's SpecError into the spec's ValidationError again.
    """

    def __call__(cls, *args: Any, **data: Any) -> Any:
        try:
            return super().__call__(*args, **data)
        except ValidationError as exc:
            raise spec_error(_source(cls, data), exc, cls) from None


class _SpecModel(BaseModel, metaclass=_SpecMeta):
    """`model_validate` (and its `_json` and `_strings` forms) raise SpecError too;
    `context={"source": path}` names the file in its message."""

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Any:
        return _validated(cls, super().model_validate, obj, *args, **kwargs)

    @classmethod
    def model_validate_json(cls, json_data: Any, *args: Any, **kwargs: Any) -> Any:
        return _validated(cls, super().model_validate_json, json_data, *args, **kwargs)

    @classmethod
    def model_validate_strings(cls, obj: Any, *args: Any, **kwargs: Any) -> Any:
        return _validated(cls, super().model_validate_strings, obj, *args, **kwargs)


def _validated(cls: type, validate: Any, obj: Any, *args: Any, **kwargs: Any) -> Any:
    """`validate(obj)` with pydantic's ValidationError turned into a SpecError."""
    try:
        return validate(obj, *args, **kwargs)
    except ValidationError as exc:
        source = (kwargs.get("context") or {}).get("source") or _source(cls, obj)
        raise spec_error(source, exc, cls) from None


def _source(cls: type, data: Any) -> str:
    """What a spec built in Python is called in its errors: its name, else the class."""
    name = data.get("name") if isinstance(data, Mapping) else None
    return name if isinstance(name, str) else cls.__name__


class FieldSpec(_SpecModel):
    """The contract of one tensor in the batch."""

    model_config = ConfigDict(extra="forbid")

    dtype: list[str] = Field(
        description="Accepted dtypes: names (int64, bfloat16, bool), groups (int, float), or a parameter whose "
                    "value is one, such as the model's compute dtype (`dtype: [dtype]` with `params: {dtype: float32}`)."
    )
    shape: list[int | str] = Field(
        description="One entry per axis: an int, a parameter expression, or a dim name bound across fields; "
                    "a last entry '1?' is an axis of size 1 the batch may leave out (labels [B] or [B, 1])."
    )
    optional: bool = Field(False, description="The batch may leave this field out.")
    min: Bound | None = Field(None, description="Smallest allowed value (inclusive); may use parameters and dims.")
    max: Bound | None = Field(None, description="Largest allowed value (inclusive); may use parameters and dims.")
    allow: list[int | float] = Field(
        default_factory=list,
        description="Sentinel values exempt from every value check of the field (min, max, values, ...), such as -100.",
    )
    values: list[int | float] | None = Field(None, description="The only values allowed, such as [0, 1] for a mask.")
    finite: bool = Field(False, description="Reject NaN and +-Inf.")
    hints: dict[str, str] = Field(
        default_factory=dict, description="A likely cause to print, per violation code (above_max: '...')."
    )
    severity: dict[str, Severity] = Field(
        default_factory=dict,
        description="Per violation code of this field's options (above_max: warning), or `rank` (a field with "
                    "the wrong number of axes that the model runs through): 'warning' for a data bug the model "
                    "runs through; every other check is an 'error'.",
    )
    description: str | None = None

    @field_validator("dtype", mode="before")
    @classmethod
    def _one_dtype(cls, v: Any) -> Any:
        v = [v] if isinstance(v, str) or is_torch_dtype(v) else v
        return [dtype_name(d) if is_torch_dtype(d) else d for d in v] if isinstance(v, list) else v

    @field_validator("dtype")
    @classmethod
    def _known_dtypes(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one dtype is required")
        for name in v:  # a parameter name is resolved (and checked) once the parameters are known
            if not is_dtype_name(name) and not _IDENT.match(name):
                known = [*DTYPE_NAMES, *GROUPS]
                raise ValueError(f"unknown dtype {name!r}{_dtype_meant(name, known)}; known: {', '.join(known)}")
        return v

    @field_validator("shape")
    @classmethod
    def _shape_entries(cls, v: list[int | str]) -> list[int | str]:
        for i, entry in enumerate(v):
            if isinstance(entry, int) and entry < 0:
                raise ValueError(f"a fixed size must be >= 0, got {entry}")
            if entry == UNIT_TAIL:
                if i != len(v) - 1 or i == 0:
                    raise ValueError(f"{UNIT_TAIL!r} (an axis of size 1 that may be left out) must be the last of several axes")
            elif isinstance(entry, str):
                _expr.parse(entry)
        return v

    @field_validator("min", "max")
    @classmethod
    def _bound_parses(cls, v: Bound | None) -> Bound | None:
        if isinstance(v, str):
            _expr.parse(v)
        return v

    @field_validator("severity")
    @classmethod
    def _severity_codes(cls, v: dict[str, str]) -> dict[str, str]:
        known = (*field_codes(), *FIELD_META_SEVERITY)
        for code in v:
            if code not in known:
                raise ValueError(f"severity: {code!r} is not a code this field's options report"
                                 f"{closest(code, known)}; "
                                 f"known: {', '.join(known)} (a rule sets its own severity)")
        return v

    @field_validator("hints")
    @classmethod
    def _hint_codes(cls, v: dict[str, str]) -> dict[str, str]:
        for code in v:
            if code not in VIOLATION_CODES:
                raise ValueError(f"unknown violation code {code!r} in hints{closest(code, VIOLATION_CODES)}; "
                                 f"known: {', '.join(VIOLATION_CODES)}")
        return v


def _with_check_options(base: type[BaseModel]) -> type[BaseModel]:
    """`base` plus one optional key per field option a registered check kind declares
    (`monotonic: L`), so a new kind needs no edit here; keys stay forbidden otherwise."""
    extra = {o.name: (_checked(o.annotation, o.check), Field(None, description=o.description))
             for o in check_options().values() if o.name not in base.model_fields}
    if not extra:
        return base
    return create_model(base.__name__, __base__=base, __module__=base.__module__, __doc__=base.__doc__, **extra)


def _checked(annotation: Any, check: Any) -> Any:
    """`annotation`, with the option's own `check` run first on every value but null (as written)."""
    if check is None:
        return annotation
    return Annotated[annotation, BeforeValidator(lambda v: v if v is None else check(v))]


FieldSpec = _with_check_options(FieldSpec)


class RuleSpec(_SpecModel):
    """A rule over one or more fields, such as `bbox[..., 0] <= bbox[..., 2]`."""

    model_config = ConfigDict(extra="forbid")

    rule: str = Field(description="A boolean expression; `X where C` checks X only where C holds.")
    code: str = Field("rule_failed", description="The violation code reported when the rule fails.")
    field: str | None = Field(None, description="The field to report; by default the first field the rule names.")
    hint: str | None = Field(None, description="A likely cause to print when the rule fails.")
    severity: Severity = Field(
        "error", description="'error' (the model crashes or its loss is garbage) or 'warning' (a data bug the step runs through)."
    )

    @field_validator("rule")
    @classmethod
    def _rule_parses(cls, v: str) -> str:
        for part in split_where(v):
            _expr.parse(part)
        return v

    @field_validator("code")
    @classmethod
    def _code_is_identifier(cls, v: str) -> str:
        if not _IDENT.match(v):
            raise ValueError(f"a code must be an identifier, got {v!r}")
        return v


def number_error(where: str, field: str, value: int | float, integers: bool) -> str | None:
    """`fields.labels.allow.0: 0.5 is not an integer, but labels holds integers`, or None if `value` fits."""
    problem = number_problem(value, integers)
    if problem is None:
        return None
    return f"{where}: {problem}, but {field} holds integers" if integers else f"{where}: {problem}"


def split_where(text: str) -> tuple[str, ...]:
    """`labels == -100 where attention_mask == 0` -> ('labels == -100', 'attention_mask == 0')."""
    parts = re.split(r"\s+where\s+", text.strip())
    if len(parts) > 2:
        raise ValueError("a rule may have at most one 'where'")
    return tuple(parts)


class BatchSpec(_SpecModel):
    """The contract of a whole batch: its fields, the rules across them, and their parameters."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Shown in reports.")
    description: str = ""
    batch_dim: str = Field("B", description="The dim that counts samples; violations report positions along it.")
    params: dict[str, ParamValue] = Field(
        default_factory=dict, description="Parameters and their defaults; null means required."
    )
    fields: dict[str, FieldSpec]
    rules: list[RuleSpec] = Field(default_factory=list)
    unexpected_fields: Literal["error", "ignore"] = Field(
        "error", description="Report fields the spec does not name ('error') or let them through ('ignore')."
    )
    options: list[str] = Field(
        default_factory=list, description="Batch keys the model takes that are not tensors (flags such as CLIP's "
        "return_loss): a batch may carry them, and they are not checked; any other key is an unexpected field."
    )

    _plan: Any = PrivateAttr(default=None)

    @field_validator("rules", mode="before")
    @classmethod
    def _rule_strings(cls, v: Any) -> Any:
        return [{"rule": r} if isinstance(r, str) else r for r in v] if isinstance(v, list) else v

    @model_validator(mode="wrap")
    @classmethod
    def _every_mistake(cls, data: Any, handler: Any) -> BatchSpec:
        """Report every mistake of a spec in one SpecError, as pydantic does for its parts.

        Pydantic runs no whole-spec check once a part fails, so an unknown function in one rule would
        hide an unknown name in a bound until it was fixed: when a part fails, the whole-spec checks
        run on a stand-in spec made of the valid parts (see `_stand_in`)."""
        try:
            spec = handler(data)
        except ValidationError as exc:
            stand_in = _stand_in(data)
            found = stand_in._mistakes(names_known=_names_known(data)) if stand_in is not None else []
            if not found:
                raise
            errors = [*_details(exc), *map(_value_error, found)]
            raise ValidationError.from_exception_data(cls.__name__, errors) from None
        found = spec._mistakes()
        if found:
            raise ValidationError.from_exception_data(cls.__name__, [_value_error(m) for m in found])
        return spec

    def _mistakes(self, names_known: bool = True) -> list[str]:
        """The whole-spec mistakes (names that do not resolve, clashes, numbers a field cannot hold), each
        naming its key path. A part pydantic refused is blank in a stand-in spec, so it adds none here; where
        it may have defined a name (`names_known` False), no name is called unknown."""
        if not self.fields:
            return ["a spec needs at least one field"]  # every other check is about fields
        out = []
        for kind, group in (("field", self.fields), ("parameter", self.params)):
            for n in group:
                if not _IDENT.match(n) or keyword.iskeyword(n):
                    out.append(f"{kind} name {n!r} is not an identifier")
        clash = set(self.fields) & set(self.params)
        if clash:
            out.append(f"{sorted(clash)} named both a field and a parameter")
        clash = set(self.fields) & set(self.options)
        if clash:
            out.append(f"{sorted(clash)} named both a field and an option (a key that is not a tensor)")
        dims = self.dim_names()
        clash = dims & (set(self.fields) | set(self.params))
        if clash:
            out.append(f"{sorted(clash)} named both a dim and a field or parameter")
        if names_known and self.batch_dim is not None and self.batch_dim not in dims:
            out.append(f"batch_dim {self.batch_dim!r} does not appear in any field's shape"
                       f"{closest(self.batch_dim, sorted(dims))}")
        for name, f in self.fields.items():
            named = [e for e in f.shape if isinstance(e, str) and e in dims]
            if len(set(named)) != len(named):
                out.append(f"fields.{name}.shape repeats a dim; each axis needs its own name")
        for name, f in self.fields.items():
            for entry in f.dtype:
                if not is_dtype_name(entry) and entry not in self.params:
                    known = [*DTYPE_NAMES, *GROUPS]
                    out.append(f"fields.{name}.dtype: unknown dtype {entry!r}, and no parameter of that name"
                               f"{_dtype_meant(entry, [*known, *self.params])}; known: {', '.join(known)}")
            names = self.field_dtype_names(name, strict=False)
            integers = names is not None and names != () and all_integer_names(names)  # a stand-in has no dtype
            entries = [(k, getattr(f, k)) for k in ("min", "max") if not isinstance(getattr(f, k), (str, type(None)))]
            entries += [(f"allow.{i}", v) for i, v in enumerate(f.allow)]
            entries += [(f"values.{i}", v) for i, v in enumerate(f.values or ())]
            for key, value in entries:
                problem = number_error(f"fields.{name}.{key}", name, value, integers)
                if problem:
                    out.append(problem)
        known = set(self.fields) | set(self.params) | dims
        for name, f in self.fields.items() if names_known else ():
            for key in ("min", "max"):
                bound = getattr(f, key)
                if isinstance(bound, str):
                    unknown = _expr.names(_expr.parse(bound)) - set(self.params) - dims
                    if unknown:
                        out.append(f"fields.{name}.{key}: unknown name(s) {sorted(unknown)}"
                                   f"{closest(min(unknown), [*self.params, *dims])}; a bound may use "
                                   f"parameters ({', '.join(self.params) or 'none'}) and dims")
        for i, r in enumerate(self.rules if names_known else ()):
            used = _rule_names(r.rule)
            unknown = used - known if used is not None else set()
            if unknown:
                out.append(f"rules.{i}: unknown name(s) {sorted(unknown)} in {r.rule!r}{closest(min(unknown), known)}")
            if r.field is not None and r.field not in self.fields:
                out.append(f"rules.{i}: field {r.field!r} is not in the spec{closest(r.field, self.fields)}")
        return out

    def __eq__(self, other: object) -> bool:
        # the contract, not the cached plan: a spec that has checked a batch equals a fresh one
        if not isinstance(other, BatchSpec):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = None  # mutable model, like pydantic's default

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> BatchSpec:
        """A copy; with `update`, checked as a spec built anew (pydantic's model_copy checks nothing)."""
        out = super().model_copy(deep=deep)
        if update:
            data = {name: getattr(out, name) for name in type(self).model_fields}
            private = out.__pydantic_private__  # a subclass's own state (DerivedSpec's origins) goes along
            out = type(self).model_validate({**data, **update}, context={"source": self.name})
            out.__pydantic_private__ = dict(private or {})
        out._plan = None  # a plan compiled for the original must not serve the changed copy
        return out

    def field_dtype_names(self, name: str, *, strict: bool = True) -> tuple[str, ...] | None:
        """The dtype names field `name` accepts, groups expanded, its parameter entries resolved from `params`.

        A parameter that is not yet filled (or, with `strict=False`, holds no dtype name) gives None;
        with `strict`, a value that is not a dtype name or group is a SpecError.
        """
        names = []
        for entry in self.fields[name].dtype:
            if is_dtype_name(entry):
                names.append(entry)
                continue
            value = self.params.get(entry)
            if value is None or not (isinstance(value, str) and is_dtype_name(value)):
                if value is None or not strict:
                    return None
                raise SpecError(f"{self.name}: fields.{name}.dtype names parameter {entry}, whose value {value!r} "
                                f"is not a dtype name or group (float32, bfloat16, float, ...)")
            names.append(value)
        return expand_names(names)

    def cached_plan(self) -> Any:
        """The plan compiled for this spec, or None.

        Read from pydantic's private-value dict directly: `self._plan` goes through pydantic's
        `__getattr__` (3.5 us), a tenth of a small batch's whole check.
        """
        return self.__pydantic_private__["_plan"]

    def dim_names(self) -> set[str]:
        """Names in shapes that are not parameters: sizes bound from the batch."""
        out = set()
        for f in self.fields.values():
            for entry in f.shape:
                if isinstance(entry, str) and entry != UNIT_TAIL:
                    out |= _expr.names(_expr.parse(entry)) - set(self.params)
        return out

    def missing_params(self) -> list[str]:
        return [k for k, v in self.params.items() if v is None]

    def with_params(self, config: Any = None, **params: ParamValue) -> BatchSpec:
        """A copy with parameters filled from `config` (object or dict, extra fields ignored) and keywords.

        Keywords win over the config; an unknown keyword is an error, so a typo cannot pass silently.
        """
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            raise SpecError(f"{self.name}: unknown parameter(s) {unknown}{closest(unknown[0], self.params)}; "
                            f"this spec takes {sorted(self.params) or 'none'}")
        if isinstance(config, (str, PurePath)):  # load_spec(name, config="config.json")
            raise SpecError(f"{self.name}: config is a path ({str(config)!r}), not a config; pass the config itself: "
                            "model.config, transformers.AutoConfig.from_pretrained(model_dir), or the dict "
                            "json.load(open(path)) gives")
        filled = dict(self.params)
        if config is not None:
            for name in self.params:
                value = _config_value(config, name)
                if value is not None:
                    filled[name] = value
        filled.update({k: dtype_name(v) if is_torch_dtype(v) else v for k, v in params.items()})
        for name, value in filled.items():
            if value is not None and not isinstance(value, (int, float, bool, str)):
                raise SpecError(f"{self.name}: parameter {name} must be a number or string, got {type(value).__name__}")
            if isinstance(value, float) and not math.isfinite(value):
                raise SpecError(f"{self.name}: parameter {name} must be a finite number, got {value}")
        return self.model_copy(update={"params": filled})

    def require_params(self) -> None:
        missing = self.missing_params()
        if missing:
            raise SpecError(
                f"{self.name}: missing parameter(s) {', '.join(missing)}; "
                f"pass them as keywords ({missing[0]}=...) or give config=model.config"
            )

    def to_yaml(self) -> str:
        """The YAML form; `load_spec` on it gives back an equal spec."""
        yaml = import_yaml()
        data = self.model_dump(mode="json", exclude_defaults=True)
        data["name"] = self.name  # always written, so the file says what it is
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def close_match(name: str, choices: Any) -> str | None:
    """The choice nearest to a misspelled `name`, if any is near (one that differs only in case first)."""
    choices = [str(c) for c in choices]
    same = [c for c in choices if c.lower() == str(name).lower()]
    match = same or difflib.get_close_matches(str(name), choices, n=1, cutoff=0.6)
    return match[0] if match else None


def closest(name: str, choices: Any) -> str:
    """` (did you mean 'x'?)` for the choice nearest to a misspelled `name`, or nothing."""
    match = close_match(name, choices)
    return f" (did you mean {match!r}?)" if match else ""


_DTYPE_SHORT = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64"}


def _dtype_meant(entry: str, names: Any) -> str:
    """` (did you mean 'int64'?)` for a dtype alias users write (`long`, `torch.half`, `np.float32`,
    `fp16`), else for the nearest of `names`; difflib alone finds no alias near its name."""
    name = re.sub(r"^(torch|numpy|np)\.", "", entry)
    name = _DTYPE_SHORT.get(name, name)
    name = TORCH_ALIASES.get(name, name)
    return f" (did you mean {name!r}?)" if is_dtype_name(name) else closest(entry, names)


def _config_value(config: Any, name: str) -> Any:
    if name == "dtype":  # the model's compute dtype: `dtype` (transformers 5) or `torch_dtype` (4.x)
        has_dtype = "dtype" in config if isinstance(config, Mapping) else hasattr(config, "dtype")
        value = _config_entry(config, "dtype" if has_dtype else "torch_dtype")  # (torch_dtype warns in 5.x)
        return dtype_name(value) if is_torch_dtype(value) else value
    value = _config_entry(config, name)
    if value is None and name == "num_labels" and isinstance(config, Mapping) and isinstance(config.get("id2label"), Mapping):
        return len(config["id2label"])  # a Hugging Face config.json stores labels, not their count
    return value


def _config_entry(config: Any, name: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(name)
    try:
        return getattr(config, name, None)
    except Exception:  # a config property may raise for an unset field; treat as absent
        return None


def import_yaml():
    try:
        import yaml
    except ImportError as exc:
        raise ImportError(MISSING_PYYAML_MESSAGE) from exc
    return yaml


def spec_from_dict(data: Any, source: str) -> BatchSpec:
    """Validate a spec mapping, reporting every mistake with `source` and its key path."""
    if not isinstance(data, Mapping):
        raise SpecError(f"{source}: a spec must be a mapping with 'name' and 'fields', got {type(data).__name__}")
    return BatchSpec.model_validate(data, context={"source": source})  # a mistake: SpecError naming `source`


def spec_error(source: str, exc: ValidationError, model: type[BaseModel]) -> SpecError:
    """pydantic's errors as a SpecError: one line per mistake with its key path, and for a misspelled
    key (`dtpye`, `optinal`) the key that was meant."""
    lines = []
    for err in exc.errors():
        loc = err["loc"]
        path = ".".join(str(p) for p in loc)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            part = _model_at(model, loc[:-1])
            keys = list(part.model_fields)
            meant = [*keys, "extends"] if part is BatchSpec else keys  # a spec file's `extends:` is read before
            msg = f"unknown key{closest(str(loc[-1]), meant)}; known: {', '.join(keys)}"
        lines.append(f"  {path}: {msg}" if path else f"  {msg}")  # whole-spec checks name their own path
    return SpecError(f"{source}: {len(lines)} error(s) in spec\n" + "\n".join(lines))


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel]:
    """The spec part at a key path: `()` the spec itself, `('fields', 'x')` a field, `('rules', 0)` a rule."""
    if model is BatchSpec and len(loc) == 2:
        return {"fields": FieldSpec, "rules": RuleSpec}.get(str(loc[0]), model)
    return model


def _stand_in(data: Any) -> BatchSpec | None:
    """The spec as far as pydantic accepts it, for the whole-spec checks when a part fails: each field keeps its
    name, its valid keys and the dims its shape names, each rule its valid keys (a refused one stays blank:
    no dtype, no rule text, nothing to check twice); None when there are no fields to check against."""
    if not isinstance(data, Mapping) or not isinstance(data.get("fields"), Mapping):
        return None
    fields = {name: _valid_keys(FieldSpec, f, dtype=[], shape=_parsing_entries(f))
              for name, f in data["fields"].items() if isinstance(name, str)}
    rules = data.get("rules", [])
    rules = [_valid_keys(RuleSpec, {"rule": r} if isinstance(r, str) else r, rule="")
             for r in (rules if isinstance(rules, list) else [])]
    params = data.get("params", {})
    params = {k: v if isinstance(v, (int, float, bool, str)) else None
              for k, v in (params.items() if isinstance(params, Mapping) else ()) if isinstance(k, str)}
    batch_dim = data.get("batch_dim", "B")
    return BatchSpec.model_construct(name="", fields=fields, params=params, rules=rules,
                                     batch_dim=batch_dim if isinstance(batch_dim, str) else None)


def _names_known(data: Mapping[str, Any]) -> bool:
    """Whether a refused spec still shows every name it defines: its parameters a mapping of names, each
    field a mapping under a name, with a shape of sizes and expressions that parse."""
    params, fields = data.get("params", {}), data["fields"]

    def shown(name: Any, f: Any) -> bool:
        return (isinstance(name, str) and isinstance(f, Mapping) and isinstance(f.get("shape"), list)
                and all(e == UNIT_TAIL or e in _parsing_entries(f) for e in f["shape"]))

    return (isinstance(params, Mapping) and all(isinstance(k, str) for k in params)
            and all(shown(name, f) for name, f in fields.items()))


def _valid_keys(model: type[BaseModel], raw: Any, **blank: Any) -> Any:
    """A `model` from `blank` with each key of `raw` that validates on its own set (pydantic reports the rest)."""
    part = model.model_construct(**blank)
    if isinstance(raw, Mapping):
        for key, value in raw.items():
            if key in model.model_fields:
                try:
                    model.__pydantic_validator__.validate_assignment(part, key, value)
                except ValidationError:
                    pass
    return part


def _parsing_entries(raw: Any) -> list[int | str]:
    """The entries of a field's shape that are sizes or parse, so a refused shape still names its dims."""
    shape = raw.get("shape") if isinstance(raw, Mapping) else None
    if not isinstance(shape, list):
        return []
    return [e for e in shape if (isinstance(e, int) and not isinstance(e, bool)) or _parses(e)]


def _parses(text: Any) -> bool:
    try:
        _expr.parse(text)
    except _expr.ExprError:
        return False
    return True


def _rule_names(text: str) -> set[str] | None:
    """The names a rule uses, or None for a rule that does not parse (pydantic reports it)."""
    try:
        return set().union(*(_expr.names(_expr.parse(p)) for p in split_where(text)))
    except ValueError:  # ExprError, or two `where`s
        return None


def _details(exc: ValidationError) -> list[Any]:
    """pydantic's errors, to raise again together with more."""
    return [{k: e[k] for k in ("type", "loc", "input", "ctx") if k in e} for e in exc.errors()]


def _value_error(message: str) -> Any:
    """A whole-spec mistake as a pydantic error; its message names its own key path."""
    return {"type": "value_error", "loc": (), "input": None, "ctx": {"error": ValueError(message)}}


def builtin_spec_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.yaml"))


def builtin_dir() -> Path:
    from importlib.resources import files

    return Path(str(files("tritoncheck.specs")))
