"""Arrow columns as tensors, read from their buffers only: the scan's one way into a data file.

A data file is untrusted. An Arrow column may have an extension type whose conversion to Python
runs code (Ray Data's pickled-object type unpickles each value in `to_pylist`, `to_pandas` and
`to_numpy`), so the scan reads only types it knows, by their buffers: booleans, integers and
floats of every width, dictionary-encoded ones, and lists of them (list, large_list,
fixed_size_list, nested). Every other type, extension types first, is refused by `refusal` before
anything of the column is read; nothing here converts a column to Python objects.

A column becomes one flat tensor of its leaf values and, per row, where its values start and its
shape (`sizes`, one entry per list level): ragged rows are never padded here. `take` pads only
the rows asked for, so memory follows the rows checked together, not a chunk's longest row.
A row that holds a null (anywhere in it) or whose inner lists differ in length (not a tensor)
is marked, and the scan reports it rather than checks it.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any

READABLE = "bools, integers and floats (any width), dictionary-encoded ones, and lists of them"
INT64_MAX = 2**63 - 1


def refusal(kind: Any) -> str | None:
    """Why the scan does not read a column of Arrow type `kind`, or None when it does."""
    import pyarrow as pa
    from pyarrow import types

    t = kind
    while True:
        if isinstance(t, pa.BaseExtensionType):  # its conversions are its own code (Ray's unpickles)
            return f"Arrow type {kind} is an extension type ({t.extension_name}); the scan reads only {READABLE}"
        if types.is_list(t) or types.is_large_list(t) or types.is_fixed_size_list(t):
            t = t.value_type
            continue
        if types.is_dictionary(t):
            t = t.value_type
            if not (types.is_boolean(t) or types.is_integer(t) or types.is_floating(t)):
                break
        if types.is_boolean(t) or types.is_integer(t) or types.is_floating(t):
            return None
        break
    return f"Arrow type {kind} is not read by the scan, which reads only {READABLE}"


class Scratch:
    """Memory that padded batches reuse, one batch after another: a fresh tensor of tens of MB costs its page faults on
    every chunk, here as much as filling it. What it gives for a key is valid until that key is asked for again.
    `memo` keeps what the chunks of one shard derive alike (a spec made for a column, a rule's verdict per length)."""

    def __init__(self) -> None:
        self.held: dict[Any, Any] = {}
        self.memo: dict[Any, Any] = {}

    def __call__(self, key: Any, shape: tuple[int, ...], dtype: Any) -> Any:
        import math

        import torch

        numel = math.prod(shape)
        buffer = self.held.get(key)
        if buffer is None or buffer.dtype != dtype or buffer.numel() < numel:
            buffer = self.held[key] = torch.empty(numel, dtype=dtype)
        return buffer[:numel].view(shape)


def _wide(values: Any, scratch: Scratch | None = None, key: Any = None) -> Any:
    """`values` as a batch holds them: a signed integer narrower than int64 widened to it (a copy, into `scratch`'s
    memory under `key` where given), others as they are."""
    import torch

    if values.dtype not in (torch.int8, torch.int16, torch.int32):
        return values
    return values.long() if scratch is None else scratch(("wide", key), tuple(values.shape), torch.int64).copy_(values)


@dataclass
class Column:
    """A column's leaf values, flat, and per row where they start, its shape, and what is wrong with it."""

    values: Any  # tensor [elements]: signed integers in their own width (int64 in every batch `take` and `whole`
    #   make, as a collator's torch.tensor makes them), unsigned ones as int64, floats and bools in their own dtype
    starts: Any  # tensor [n] int64; None for a column of scalars (row r is value r)
    sizes: Any  # tensor [n, depth] int64: each row's shape (depth = the number of list levels)
    nulls: Any  # tensor [n] bool: a null somewhere in the row
    jagged: Any  # tensor [n] bool: inner lists of different lengths (not a tensor)
    past_int64: Any  # tensor [n] bool: a uint64 value past int64 (a torch batch's widest integer) in the row
    flawed: bool = True  # some row has one of those marks (False: every mark is all False)

    def __len__(self) -> int:
        return len(self.nulls)

    def uniform(self) -> bool:
        """Every row of the same shape, stored one after another: `take` of them all copies nothing."""
        if not len(self) or not self.sizes.shape[1]:  # (a column of scalars: row r is value r)
            return True
        n, count = len(self), int(self.sizes[0].prod())
        import torch

        return bool((self.sizes == self.sizes[:1]).all()) and bool(
            (self.starts == self.starts[0] + torch.arange(n) * count).all())

    def whole(self, pad: float, scratch: Scratch | None = None, key: Any = None) -> Any:
        """Every row as one tensor [n, *shape], where `uniform` holds: a view of the values (a copy only where a
        narrow integer is widened to int64, into `scratch`'s memory under `key` where given)."""
        import torch

        if not self.sizes.shape[1]:
            return _wide(self.values, scratch, key)
        return self.take(torch.arange(len(self)), pad, scratch, key)

    def take(self, rows: Any, pad: float, scratch: Scratch | None = None, key: Any = None) -> Any:
        """Rows `rows` (a long tensor) as one tensor [len(rows), *longest], each padded with `pad`; built in
        `scratch`'s memory (held under `key`, a column's name) where given."""
        import torch

        if not self.sizes.shape[1]:  # a column of scalars: row r is value r
            return _wide(self.values.index_select(0, rows))
        sizes = self.sizes.index_select(0, rows)
        starts = self.starts.index_select(0, rows)
        longest = sizes.max(dim=0).values.tolist() if len(rows) else [0] * sizes.shape[1]
        if len(rows) and bool((sizes == sizes[:1]).all()):
            count = int(sizes[0].prod())
            if bool((starts == starts[0] + torch.arange(len(rows)) * count).all()):  # one slice: a view
                first = int(starts[0])
                return _wide(self.values[first:first + count * len(rows)].view(len(rows), *longest), scratch, key)
        m, depth = len(rows), len(longest)
        counts = sizes.prod(dim=1)
        inside = (scratch(("mask",), (m, *longest), torch.bool).fill_(True) if scratch is not None else
                  torch.ones((m, *longest), dtype=torch.bool))
        for d, size in enumerate(longest):  # inside row r along axis d: position < sizes[r, d]
            shape = [m] + [1] * depth
            shape[d + 1] = size
            inside &= (torch.arange(size).view(1, size) < sizes[:, d:d + 1]).view(shape)
        dtype = _wide(self.values[:0]).dtype
        out = (scratch(key, (m, *longest), dtype).fill_(pad) if scratch is not None else
               torch.full((m, *longest), pad, dtype=dtype))
        total = int(counts.sum())
        if not total:
            return out
        if bool((starts[1:] == starts[:-1] + counts[:-1]).all()):  # rows one after another: one slice
            first = int(starts[0])
            real = self.values[first:first + total]
        else:  # the rows' values one row after another: each element's row start, less where its row begins
            begins = torch.cumsum(counts, 0) - counts
            real = self.values[torch.repeat_interleave(starts - begins, counts) + torch.arange(total)]
        # (row-major order inside the padded row is the row's own order)
        return out.masked_scatter_(inside, _wide(real))


def read_column(array: Any) -> Column:
    """A column (Array or ChunkedArray) of a type `refusal` accepts, read from its buffers.

    Raises `ValueError` (pyarrow's `ArrowInvalid`) for damaged data: offsets out of order or past
    their values, buffers too short.
    """
    import numpy as np
    import pyarrow as pa
    import torch
    from pyarrow import types

    if isinstance(array, pa.ChunkedArray):
        if array.num_chunks != 1 and _plain(array.type) != array.type:
            # dictionaries decoded chunk by chunk: pyarrow's combining of float16 dictionaries reads their values as
            # uint16 bits (-3.0 became 49664.0)
            for chunk in array.chunks:
                chunk.validate(full=True)  # (before the cast reads it)
            array = pa.chunked_array([chunk.cast(_plain(array.type)) for chunk in array.chunks], _plain(array.type))
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    array.validate(full=True)  # offsets, buffer sizes, dictionary indices: before any buffer is read
    n = len(array)
    if not (types.is_list(array.type) or types.is_large_list(array.type) or types.is_fixed_size_list(array.type)):
        # a column of scalars: its values as they are (no copy of a signed integer or float column), row r is value r
        leaf = array.dictionary_decode() if types.is_dictionary(array.type) else array
        nulls = _nulls(leaf)  # (decoded: a dictionary may hold a null as a value, not only as an index)
        past = _past_int64(leaf)
        none, shape = _scalar_rows(n)
        return Column(_leaf_tensor(leaf), None, shape, none if nulls is None else torch.from_numpy(nulls), none,
                      none if past is None else torch.from_numpy(past), nulls is not None or past is not None)
    lo, hi = np.arange(n, dtype=np.int64), np.arange(1, n + 1, dtype=np.int64)  # each row's span in `level`
    nulls, jagged, sizes = np.zeros(n, bool), np.zeros(n, bool), []
    level = array
    while types.is_list(level.type) or types.is_large_list(level.type) or types.is_fixed_size_list(level.type):
        nulls |= _any_in(_nulls(level), lo, hi)
        fixed = types.is_fixed_size_list(level.type)
        if fixed:
            offsets = (np.arange(len(level) + 1, dtype=np.int64) + level.offset) * level.type.list_size
        else:
            offsets = _values(level.offsets)  # (int32 or int64: as int64)
        lengths, has = np.diff(offsets), hi > lo
        if fixed or not len(lengths):
            first = np.full(n, level.type.list_size if fixed else -1, np.int64)
        else:  # the row's size on this axis: its first element's length, the same for all its elements
            at = np.minimum(lo, len(lengths) - 1)
            first = np.where(has, lengths[at], -1)
            changes = np.concatenate([[0], np.cumsum(lengths[1:] != lengths[:-1])])
            jagged |= has & (changes[np.maximum(hi - 1, 0)] != changes[at])
        sizes.append(first)
        lo, hi = offsets[lo], offsets[hi]
        base = int(lo[0]) if n else 0
        level = level.values.slice(base, (int(hi[-1]) if n else 0) - base)  # only the values of these rows
        lo, hi = lo - base, hi - base
    leaf = level.dictionary_decode() if types.is_dictionary(level.type) else level
    nulls |= _any_in(_nulls(leaf), lo, hi)  # (decoded: a dictionary may hold a null as a value, not only as an index)
    past = _any_in(_past_int64(leaf), lo, hi)
    shape = _shapes(sizes, n)
    return Column(_leaf_tensor(leaf), torch.from_numpy(lo), shape, torch.from_numpy(nulls), torch.from_numpy(jagged),
                  torch.from_numpy(past), bool(nulls.any() or jagged.any() or past.any()))


@functools.lru_cache(maxsize=8)
def _scalar_rows(n: int) -> tuple[Any, Any]:
    """For n rows of scalars: all-False marks (a view of one value: no memory, nothing written per row) and their
    shapes [n, 0]; made once per chunk size and shared by a chunk's columns (nothing writes to either)."""
    import torch

    return torch.zeros(1, dtype=torch.bool).expand(n), torch.zeros((n, 0), dtype=torch.long)


def _plain(kind: Any) -> Any:
    """Arrow type `kind` with each dictionary replaced by its value type (for a type `refusal` accepts)."""
    import pyarrow as pa
    from pyarrow import types

    if types.is_dictionary(kind):
        return kind.value_type
    if types.is_fixed_size_list(kind):
        return pa.list_(kind.value_field.with_type(_plain(kind.value_type)), kind.list_size)
    if types.is_large_list(kind):
        return pa.large_list(kind.value_field.with_type(_plain(kind.value_type)))
    if types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_plain(kind.value_type)))
    return kind


def _shapes(per_level: list[Any], n: int) -> Any:
    """Per row, its size on each axis; an axis under an empty one (no element to measure) gets the
    column's longest, so that the empty row pads like the others instead of standing out."""
    import numpy as np
    import torch

    for k, sizes in enumerate(per_level):
        if k and (sizes < 0).any():
            per_level[k] = np.where(sizes < 0, max(int(sizes.max()), 0), sizes)
    return torch.from_numpy(np.stack(per_level, axis=1) if per_level else np.zeros((n, 0), np.int64))


def _nulls(array: Any) -> Any:
    """Per entry of `array`: is it null (numpy bools), or None where none is."""
    valid = _valid(array)
    return None if valid is None else ~valid


def _valid(array: Any) -> Any:
    """Per entry of `array`: does it hold a value (its validity bitmap as numpy bools), or None where every entry
    does. Decoded here: pyarrow's compute functions (`is_null`, `fill_null`) import pandas on their first call, 0.2 s
    of CPU for a scan's first null."""
    import numpy as np

    if not array.null_count:
        return None
    bits = np.frombuffer(array.buffers()[0], np.uint8)  # least significant bit first, from the array's own offset
    return np.unpackbits(bits, bitorder="little")[array.offset:array.offset + len(array)].astype(np.bool_)


def _any_in(mask: Any, lo: Any, hi: Any) -> Any:
    """Per span [lo, hi): does `mask` (None: all False) hold anywhere in it?"""
    import numpy as np

    if mask is None:
        return np.zeros(len(lo), bool)
    total = np.concatenate([[0], np.cumsum(mask)])
    return total[hi] > total[lo]


def _past_int64(leaf: Any) -> Any:
    """Per value of a uint64 leaf, whether it is past int64 (the widest integer of a torch batch): None where none
    is (any other type). Such a value cannot be checked as it is: its row is reported (`past_int64`), not checked,
    and the value is read as 0 (`_values`)."""
    import numpy as np
    from pyarrow import types

    if not types.is_uint64(leaf.type) or not len(leaf) or leaf.buffers()[1] is None:
        return None
    raw = np.frombuffer(leaf.buffers()[1], np.dtype("<u8"), count=len(leaf), offset=leaf.offset * 8)
    past = raw > np.uint64(INT64_MAX)
    valid = _valid(leaf)
    if valid is not None:
        past &= valid
    return past if past.any() else None


def _leaf_tensor(leaf: Any) -> Any:
    """`_values(leaf)` as a tensor over the same memory."""
    import torch

    values = _values(leaf)
    if values.flags.writeable:
        return torch.from_numpy(values)
    with warnings.catch_warnings():  # a read-only buffer of the file's (a mapped Arrow file): nothing writes to it
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(values)


def _values(leaf: Any) -> Any:
    """A leaf array's values as numpy: unsigned integers as int64 (torch has few uint ops), signed ones, floats and
    bools as they are (float64 checked as float64: no bound or finiteness verdict on a rounded value); nulls
    as zeros (their rows are reported, not checked). Read from the Arrow buffer itself: no copy of a float or
    signed integer column, and no conversion that could import pandas or run a type's own code."""
    import numpy as np
    from pyarrow import types

    kind, valid = leaf.type, _valid(leaf)
    n, buffer = len(leaf), leaf.buffers()[1]  # a primitive type (refusal checked it): its values' buffer, viewed
    if types.is_boolean(kind):  # bit-packed, least significant bit first
        bits = np.frombuffer(buffer, np.uint8) if buffer is not None else np.zeros(0, np.uint8)
        values = np.unpackbits(bits, bitorder="little")[leaf.offset:leaf.offset + n].astype(np.bool_)
        return values if valid is None else values & valid
    if types.is_floating(kind):
        dtype = np.dtype(f"<f{kind.bit_width // 8}")
    else:
        dtype = np.dtype(f"<{'i' if types.is_signed_integer(kind) else 'u'}{kind.bit_width // 8}")
    raw = np.frombuffer(buffer, dtype, count=n, offset=leaf.offset * dtype.itemsize) if n else np.zeros(0, dtype)
    if valid is not None:  # (whatever a null's slot holds: 0)
        raw = np.where(valid, raw, dtype.type(0))
    if types.is_unsigned_integer(kind):
        if types.is_uint64(kind) and len(raw) and int(raw.max()) > INT64_MAX:  # (their rows: `_past_int64`)
            raw = np.where(raw > np.uint64(INT64_MAX), np.uint64(0), raw)
        return raw.astype(np.int64)
    return raw  # (signed integers in their own width: a batch widens what it takes, see `_wide`)
