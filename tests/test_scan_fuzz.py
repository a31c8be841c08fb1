"""Differential fuzz of the dataset scan against hostile Parquet and Arrow files (issue 20).

Each example writes a directory of shards (Parquet with row groups of any size, zero included;
Arrow IPC files and streams; empty shards) whose two columns, `a` and `b`, each get, shard by
shard, an Arrow type drawn from every type a column can have: every integer width, signed and
unsigned, float16/32/64, bool, dictionary-encoded (a null as an index or as a value), list,
large_list, fixed_size_list, lists of lists, and the types the scan does not read (string,
binary, struct, map, timestamp, duration, date32 past Python's range, decimal, the null type,
list_view, extension types: one whose values unpickle, registered as Ray Data registers its own,
and one over plain int64). Values include nulls, NaN, infinities,
signed zeros, float64 values float32 would round, and every type's extremes; an Arrow shard may
have damaged list offsets.

The scan (on the torch or the C backend) must:
- return a report, never raise, and leave `unchecked` empty (no internal error);
- never unpickle (the payload would create a marker file);
- refuse each column of a type it does not read with `unsupported_type` for that shard and field;
- report every other row as checking that row alone with `tc.check` gives (the test builds the
  row's tensor from its own Python values, float64 as float64), with its global row;
- report a null as `null`, a row whose inner lists differ as `not_a_tensor` and a uint64 value past
  int64 as `past_int64` (the first that holds, per field), with global rows;
- record a shard it cannot read (damaged offsets) as `unreadable` and go on:
  the findings in it are a subset of the truth, every other shard's are exact.

CI runs a bounded, derandomized search (100 examples, 10-20 s). A longer run with a fresh seed
(printed, and added to a failure; `-n 0` keeps pytest-xdist from hiding it; 6000 examples took
7.3 minutes on 2 cores), and one seed replayed:

    TRITONCHECK_SCAN_FUZZ_EXAMPLES=6000 TRITONCHECK_FUZZ_SEED=random python -m pytest -q -s -n 0 tests/test_scan_fuzz.py
    TRITONCHECK_SCAN_FUZZ_EXAMPLES=6000 TRITONCHECK_FUZZ_SEED=698789434 python -m pytest -q -n 0 tests/test_scan_fuzz.py
"""

from __future__ import annotations

import math
import os
import pickle
import random
import sys
import tempfile
from decimal import Decimal
from unittest import mock
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow", reason="scans read Parquet and Arrow: pip install pyarrow (in the test extra)")
pq = pytest.importorskip("pyarrow.parquet", reason="scans read Parquet: pip install pyarrow (in the test extra)")

from hostile_payload import Payload  # noqa: E402
import tritoncheck as tc  # noqa: E402
import tritoncheck.scanning.engine as scan_module  # noqa: E402

EXAMPLES = int(os.environ.get("TRITONCHECK_SCAN_FUZZ_EXAMPLES", "100"))
_SEED_ENV = os.environ.get("TRITONCHECK_FUZZ_SEED")
SEED = None if _SEED_ENV is None else random.randrange(2**32) if _SEED_ENV == "random" else int(_SEED_ENV)
if SEED is not None:
    print(f"scan fuzz: TRITONCHECK_FUZZ_SEED={SEED}", file=sys.stderr)

SETTINGS = settings(max_examples=EXAMPLES, derandomize=SEED is None, database=None, deadline=None,
                    phases=(Phase.explicit, Phase.reuse, Phase.generate),  # the failing example is printed whole
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

INT64_MAX = 2**63 - 1
INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
FLOATS = [pa.float16(), pa.float32(), pa.float64()]
LEAVES = [*INTS, *FLOATS, pa.bool_()]


class PickledType(pa.ExtensionType):
    """Values that unpickle on conversion, as Ray Data's `arrow_pickled_object` (registered like it: by name, so
    that reading a file rebuilds the type), or, over other storage, any extension type."""

    def __init__(self, storage=None, name="tritoncheck.fuzz.pickled"):
        super().__init__(storage or pa.large_binary(), name)

    def __arrow_ext_serialize__(self):
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        return cls(storage_type, "tritoncheck.fuzz.pickled" if storage_type == pa.large_binary() else
                   "tritoncheck.fuzz.numbers")

    def __arrow_ext_scalar_class__(self):
        return PickledScalar


class PickledScalar(pa.ExtensionScalar):
    def as_py(self, **kwargs):
        return None if self.value is None else pickle.loads(self.value.as_py())


@pytest.fixture(scope="module", autouse=True)
def _registered():
    pa.register_extension_type(PickledType())
    pa.register_extension_type(PickledType(pa.int64(), "tritoncheck.fuzz.numbers"))
    yield
    pa.unregister_extension_type("tritoncheck.fuzz.pickled")
    pa.unregister_extension_type("tritoncheck.fuzz.numbers")


# --- drawing ---------------------------------------------------------------------------------------------------


def _range(kind):
    if pa.types.is_boolean(kind) or pa.types.is_floating(kind):
        return None
    bits = kind.bit_width
    return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if pa.types.is_signed_integer(kind) else (0, 2**bits - 1)


def leaf_values(kind):
    """One value of leaf type `kind`: near the bounds, the type's extremes, and for floats NaN, infinities, signed
    zeros and float64 values that float32 rounds (1.00000001 past 1 is the same float32 as 1.0)."""
    if pa.types.is_boolean(kind):
        return st.booleans()
    if pa.types.is_floating(kind):
        some = [-3.0, -2.0, -0.0, 0.0, 0.5, 5.0, 6.0, math.nan, math.inf, -math.inf]
        if kind == pa.float64():
            some += [5.000000001, -2.0000000001, 3.5e38, 1e300, 5e-324]
        return st.sampled_from(some)
    lo, hi = _range(kind)
    return st.sampled_from(sorted({max(lo, min(hi, v)) for v in (-3, -2, 0, 1, 5, 6, 100)} | {lo, hi}))


@st.composite
def rows_of(draw, depth, kind, fixed, n, null_rate):
    """`n` rows of `depth` list levels over leaves of `kind`; `fixed`: the innermost list has 2 elements."""
    def value(level, width=None):
        if draw(st.floats(0, 1)) < null_rate:
            return None
        if level == depth:
            return draw(leaf_values(kind))
        size = 2 if fixed and level == depth - 1 else width if width is not None else draw(st.integers(0, 4))
        inner = draw(st.integers(0, 3)) if draw(st.floats(0, 1)) < 0.8 else None  # most rows rectangular
        return [value(level + 1, inner) for _ in range(size)]

    return [value(0) for _ in range(n)]


def list_type(depth, leaf, fixed, large):
    kind = leaf
    for level in range(depth):  # innermost first
        kind = pa.list_(kind, 2) if fixed and level == 0 else pa.large_list(kind) if large[level] else pa.list_(kind)
    return kind


@st.composite
def readable_column(draw, depth, n):
    """(Arrow type, or "dictionary" of the leaf type; Python rows; leaf type) of a type the scan reads."""
    leaf = draw(st.sampled_from(LEAVES))
    fixed = depth > 0 and draw(st.booleans())
    null_rate = draw(st.sampled_from([0.0, 0.0, 0.05, 0.3]))
    rows = draw(rows_of(depth, leaf, fixed, n, null_rate))
    if depth == 0 and draw(st.booleans()):
        return "dictionary", rows, leaf
    return list_type(depth, leaf, fixed, [draw(st.booleans()) for _ in range(depth)]), rows, leaf


def refused_column(name, n, marker, parquet):
    """Arrow arrays of `n` rows of each type the scan must refuse (by a name drawn from these)."""
    if name == "pickled":  # Ray Data's kind: its values unpickle on conversion
        storage = pa.array([pickle.dumps(Payload(marker))] * n, pa.large_binary())
        return pa.ExtensionArray.from_storage(PickledType(), storage)
    if name == "numbers_extension":
        return pa.ExtensionArray.from_storage(PickledType(pa.int64(), "tritoncheck.fuzz.numbers"),
                                              pa.array(range(n), pa.int64()))
    if name == "date32_past_python":
        return pa.array([2**31 - 1, -(2**31)] * n, pa.int32()).slice(0, n).view(pa.date32())
    if name == "list_view" and parquet:
        name = "string"  # (Parquet has no list view)
    make = {
        "string": lambda: pa.array(["1", None] * n, pa.string()).slice(0, n),
        "large_string": lambda: pa.array(["x"] * n, pa.large_string()),
        "binary": lambda: pa.array([b"\x01"] * n, pa.binary()),
        "struct": lambda: pa.array([{"v": 1}] * n, pa.struct([("v", pa.int8())])),
        "map": lambda: pa.array([[(1, 2)]] * n, pa.map_(pa.int8(), pa.int8())),
        "timestamp": lambda: pa.array([0] * n, pa.timestamp("ms")),
        "decimal": lambda: pa.array([Decimal("1.25")] * n, pa.decimal128(5, 2)),
        "null": lambda: pa.nulls(n),
        "list_of_string": lambda: pa.array([["a"]] * n, pa.list_(pa.string())),
        "dictionary_of_string": lambda: pa.array(["a"] * n).dictionary_encode(),
        "duration": lambda: pa.array([1] * n, pa.duration("s")),
        "list_view": lambda: pa.array([[1]] * n, pa.list_view(pa.int8())),
    }
    return make[name]()


REFUSED = ["pickled", "numbers_extension", "date32_past_python", "string", "large_string", "binary", "struct",
           "map", "timestamp", "decimal", "null", "list_of_string", "dictionary_of_string", "duration", "list_view"]


def damaged(array):
    """`array` (a list array with rows) with one offset past its values: what a corrupt file holds."""
    import numpy as np

    width = 8 if pa.types.is_large_list(array.type) else 4
    offsets = np.frombuffer(array.buffers()[1], f"<i{width}", count=len(array) + 1, offset=array.offset * width)
    bad = offsets.copy()
    bad[len(bad) // 2] = 2**20
    return pa.Array.from_buffers(array.type, len(array), [array.buffers()[0], pa.py_buffer(bad.tobytes())],
                                 children=[array.values])


@st.composite
def datasets(draw):
    """A spec's two fields' depths, and the shards: per shard its format, row groups, columns and the truth."""
    depths = {"a": draw(st.integers(0, 2)), "b": draw(st.integers(0, 2))}
    shards = []
    for index in range(draw(st.integers(1, 4))):
        fmt = draw(st.sampled_from(["parquet", "arrow", "stream"]))
        n = draw(st.sampled_from([0, 1, 3, 7, 12]))
        columns, truth = {}, {}  # (columns: plain values, so that a failing example prints without reading them)
        for name, depth in depths.items():
            if draw(st.floats(0, 1)) < 0.15:
                columns[name], truth[name] = draw(st.sampled_from(REFUSED)), None
            else:
                columns[name], rows, leaf = draw(readable_column(depth, n))
                if columns[name] == "dictionary" and fmt != "parquet" and draw(st.booleans()):
                    columns[name] = "dictionary_null_values"  # (Parquet cannot hold one)
                truth[name] = (rows, leaf)
        hurt = None
        lists = [k for k, t in truth.items() if t is not None and depths[k] > 0 and not
                 pa.types.is_fixed_size_list(columns[k])]
        if fmt == "arrow" and n > 1 and lists and draw(st.floats(0, 1)) < 0.2:
            hurt = draw(st.sampled_from(lists))
        # row groups (record batches), empty ones too; a damaged column is written whole (slicing it reads its offsets)
        cuts = [] if hurt is not None else sorted(draw(st.lists(st.integers(0, n), max_size=3)))
        shards.append({"name": f"{index:02d}-{fmt}.{'parquet' if fmt == 'parquet' else 'arrow'}", "fmt": fmt,
                       "rows": n, "columns": columns, "truth": truth, "cuts": [0, *cuts, n], "damaged": hurt})
    return depths, shards


def column(shard, name, marker):
    """The Arrow array of a drawn column."""
    kind, truth = shard["columns"][name], shard["truth"][name]
    if truth is None:
        return refused_column(kind, shard["rows"], marker, shard["fmt"] == "parquet")
    rows, leaf = truth
    if kind == "dictionary_null_values":  # a null as a value of the dictionary (indices all valid)
        indices = pa.array([len(rows) if v is None else r for r, v in enumerate(rows)], pa.int32())
        return pa.DictionaryArray.from_arrays(indices, pa.array([*rows, None], leaf))
    array = pa.array(rows, leaf).dictionary_encode() if kind == "dictionary" else pa.array(rows, kind)
    return damaged(array) if shard["damaged"] == name else array


def write(shard, folder, marker):
    table = pa.table({name: column(shard, name, marker) for name in shard["columns"]})
    pieces = [table.slice(a, b - a) for a, b in zip(shard["cuts"], shard["cuts"][1:])]
    path = folder / shard["name"]
    if shard["fmt"] == "parquet":
        with pq.ParquetWriter(path, table.schema) as w:
            for piece in pieces:
                w.write_table(piece)
    else:
        opener = pa.ipc.new_file if shard["fmt"] == "arrow" else pa.ipc.new_stream
        with opener(path, table.schema) as w:
            for piece in pieces:
                w.write_table(piece)
    return path


# --- the truth ---------------------------------------------------------------------------------------------------


def spec_for(depths, low):
    """Each field in [low, 5] and finite; `low` 1 forbids 0, the value ragged rows are padded with."""
    fields = {}
    for name, depth in depths.items():
        shape = ["B", *(f"{name.upper()}{k}" for k in range(depth))]
        fields[name] = {"dtype": ["int", "float", "bool"], "shape": shape, "min": low, "max": 5, "finite": True}
    return tc.BatchSpec.model_validate({"name": "fuzz", "fields": fields})


def flaw(row):
    """(holds a null, inner lists differ in length) of a Python row."""
    if row is None:
        return True, False
    if not isinstance(row, list):
        return False, False
    marks = [flaw(v) for v in row]
    inner = {len(v) if isinstance(v, list) else -1 for v in row if v is not None}
    return any(m for m, _ in marks), any(j for _, j in marks) or len(inner) > 1


def tensor(row, leaf, depth):
    """The row as one sample of a batch, from its Python values: every integer as int64 (as a collator makes
    them), floats and bools in their own dtype."""
    dtype = torch.bool if pa.types.is_boolean(leaf) else torch.int64 if pa.types.is_integer(leaf) else {
        16: torch.float16, 32: torch.float32, 64: torch.float64}[leaf.bit_width]
    t = torch.tensor(row, dtype=dtype)
    if t.dim() < depth:  # an empty list: its empty inner axes
        t = t.reshape((0,) * depth)
    return t.unsqueeze(0)


def key(sample, field, code, value):
    """A finding as compared: a non-finite value as the JSON report writes it ("nan", "inf", "-inf")."""
    return sample, field, code, str(value) if isinstance(value, float) and not math.isfinite(value) else value


def expected(depths, low, shards, folder):
    """Per shard: (entries of a whole shard and field as (field, code), row findings as `key`s)."""
    out, offset = [], 0
    for shard in shards:
        whole, found = set(), set()
        readable = {k: t for k, t in shard["truth"].items() if t is not None}
        whole |= {(k, "unsupported_type") for k in shard["truth"] if k not in readable}
        if shard["damaged"] is not None:
            whole.add((None, "unreadable"))
        spec = spec_for(depths, low)
        fields = {k: f.model_copy(update={"optional": True}) if k not in readable else f
                  for k, f in spec.fields.items()}
        spec = spec.model_copy(update={"fields": fields})
        for r in range(shard["rows"] if readable else 0):
            marks = {k: (*flaw(rows[r]), any(isinstance(v, int) and v > INT64_MAX for v in _leaves([rows[r]])))
                     for k, (rows, _) in readable.items()}
            for k, (null, jagged, past) in marks.items():
                if null:
                    found.add(key(offset + r, k, "null", None))
                elif jagged:
                    found.add(key(offset + r, k, "not_a_tensor", None))
                elif past:
                    found.add(key(offset + r, k, "past_int64", None))
            if any(any(m) for m in marks.values()):
                continue  # (not checked further)
            batch = {k: tensor(rows[r], leaf, depths[k]) for k, (rows, leaf) in readable.items()}
            for v in tc.check(batch, spec, backend="torch").violations:
                found.add(key(offset + r, v.field, v.code, v.value))
        out.append((str(folder / shard["name"]), whole, found))
        offset += shard["rows"]
    return out


def _leaves(rows):
    for row in rows:
        if isinstance(row, list):
            yield from _leaves(row)
        else:
            yield row


@seed(SEED if SEED is not None else 0)
@SETTINGS
@given(st.data())
def test_scan_of_hostile_shards_is_each_row_checked_alone(data):
    with tempfile.TemporaryDirectory() as tmp:
        folder, marker = Path(tmp) / "data", Path(tmp) / "marker"
        folder.mkdir()
        depths, shards = data.draw(datasets())
        low = data.draw(st.sampled_from([-2, 1]))
        for shard in shards:
            write(shard, folder, marker)
        # (element checks read ragged values in blocks: small ones here, so that blocks and the last one meet rows;
        # and chunks by bytes of a few rows, so that row groups are cut in even parts and small ones joined)
        block = data.draw(st.sampled_from([1, 2, 3, 5, 1024]))
        chunk = data.draw(st.sampled_from([16 << 20, 40, 100, 300]))
        with mock.patch.object(scan_module, "ELEMENT_BLOCK", block), mock.patch.object(scan_module, "CHUNK_BYTES", chunk):
            report = tc.scan(spec_for(depths, low), folder, backend=data.draw(st.sampled_from(["torch", "c"])))
        assert not marker.exists(), "a pickled value was loaded"
        assert report["unchecked"] == []
        for source, whole, found in expected(depths, low, shards, folder):
            mine = [e for e in report["violations"] if e["source"] == source]
            got_whole = {(e["field"], e["code"]) for e in mine if e["sample"] is None}
            got = {key(e["sample"], e["field"], e["code"], e["value"] if e["code"] not in ("null", "not_a_tensor",
                       "past_int64") else None) for e in mine if e["sample"] is not None}
            if (None, "unreadable") in whole:  # the rows read before the damage are exact; the rest not checked
                assert got_whole == whole, (source, got_whole)
                assert got <= found, (source, got - found)
                continue
            assert got_whole == whole, (source, got_whole)
            assert got == found, (source, sorted(got - found, key=str), sorted(found - got, key=str))
        for e in report["violations"]:
            if e["code"] == "unsupported_type":
                assert "is not read by the scan" in e["message"] or "extension type" in e["message"], e["message"]
