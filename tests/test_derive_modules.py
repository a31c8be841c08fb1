"""tc.spec_for on modules no list knows (issue 19): the contract comes from a trace of the forward.

Five plain modules (a Conv1d audio classifier, an EmbeddingBag recommender, an LSTM tagger, a model
gathering from a table, a small CNN built by hand). Every case runs the real module first: the model
is the judge. A batch it runs cleanly gets no error; one it raises on (or turns into NaN) gets an
error on the named field with the named code.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

import tritoncheck as tc
from tritoncheck.derive import cache
B = 3


class AudioClassifier(nn.Module):
    """Raw waveforms [B, 1, N] through two strided convolutions: N >= 72 (16 + 8 * (8 - 1))."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv1d(1, 8, 16, stride=8), nn.ReLU(), nn.Conv1d(8, 16, 8, stride=4))
        self.head = nn.Linear(16, 5)

    def forward(self, waveform):
        return self.head(self.features(waveform).mean(dim=-1))


class Recommender(nn.Module):
    """One user id per sample, a bag of item ids per sample."""

    def __init__(self):
        super().__init__()
        self.users = nn.Embedding(10, 4)
        self.items = nn.EmbeddingBag(20, 4, mode="mean")

    def forward(self, user_ids, item_ids):
        return (self.users(user_ids) * self.items(item_ids)).sum(-1)


class Tagger(nn.Module):
    """An LSTM tagger that computes its own loss when given tags (ignore_index -100, as the default)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 8)
        self.lstm = nn.LSTM(8, 8, batch_first=True)
        self.out = nn.Linear(8, 5)
        self.forwards = 0

    def forward(self, tokens, tags=None):
        self.forwards += 1
        hidden, _ = self.lstm(self.emb(tokens))
        logits = self.out(hidden)
        return logits if tags is None else F.cross_entropy(logits.reshape(-1, 5), tags.reshape(-1))


class Gatherer(nn.Module):
    """Reads 12 learned slots with `gather`: slot ids in [0, 11]."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(1, 12))

    def forward(self, slots):
        return self.table.expand(slots.shape[0], -1).gather(1, slots).sum(1)


def small_cnn():
    """A torchvision-like CNN by hand: two 3x3 convolutions around a 2x2 pool need H, W >= 8."""
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(16, 10))


def _ids(high, *shape, seed=0):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


def _with(batch, name, value):
    return {**batch, name: value}


def _set(batch, name, index, value):
    t = batch[name].clone()
    t[index] = value
    return {**batch, name: t}


def runs(model, batch, loss_outside=False):
    """The truth: 'runs' (finite), 'raises' or 'nan'. A loss outside the model (labels) is cross-entropy."""
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    try:
        with torch.no_grad():
            out = model(**inputs) if not isinstance(model, nn.Sequential) else model(inputs["input"])
            if loss_outside and "labels" in batch:
                out = F.cross_entropy(out, batch["labels"])
    except Exception:  # the oracle: any error the model raises counts
        return "raises"
    return "runs" if bool(torch.isfinite(out).all()) else "nan"


audio = {"waveform": torch.randn(B, 1, 72), "labels": torch.tensor([0, 4, 2])}
rec = {"user_ids": torch.tensor([0, 9, 3]), "item_ids": _ids(20, B, 5)}
tags = _ids(5, B, 6, seed=1)
tags[0, 0] = -100
tagger = {"tokens": _ids(30, B, 6), "tags": tags}
gather = {"slots": _ids(12, B, 4)}
image = {"input": torch.randn(B, 3, 8, 8), "labels": torch.tensor([0, 9, 1])}

# (model factory, valid batch, loss outside the model, [(name, batch, expected error or None)])
MODULES = {
    "audio": (AudioClassifier, audio, True, [
        ("shortest clip", _with(audio, "waveform", torch.randn(B, 1, 72)), None),
        ("clip one sample too short", _with(audio, "waveform", torch.randn(B, 1, 71)), ("waveform", "dim_bound")),
        ("stereo", _with(audio, "waveform", torch.randn(B, 2, 80)), ("waveform", "shape")),
        ("no channel axis", _with(audio, "waveform", torch.randn(B, 80)), ("waveform", "rank")),
        ("float64 samples", _with(audio, "waveform", torch.randn(B, 1, 80).double()), ("waveform", "dtype")),
        ("NaN sample", _set(audio, "waveform", (1, 0, 5), float("nan")), ("waveform", "non_finite")),
        ("label == classes", _set(audio, "labels", 1, 5), ("labels", "above_max")),
    ]),
    "recommender": (Recommender, rec, False, [
        ("user past the table", _set(rec, "user_ids", 0, 10), ("user_ids", "above_max")),
        ("negative item", _set(rec, "item_ids", (1, 2), -1), ("item_ids", "below_min")),
        ("item past the bag's table", _set(rec, "item_ids", (2, 0), 20), ("item_ids", "above_max")),
        ("float item ids", _with(rec, "item_ids", rec["item_ids"].float()), ("item_ids", "dtype")),
        ("int32 ids", {k: v.int() for k, v in rec.items()}, None),
        ("longer bags", _with(rec, "item_ids", _ids(20, B, 9)), None),
    ]),
    "tagger": (Tagger, tagger, False, [
        ("no tags", {"tokens": tagger["tokens"]}, None),
        ("tag == classes", _set(tagger, "tags", (1, 1), 5), ("tags", "above_max")),
        ("tag -1", _set(tagger, "tags", (1, 1), -1), ("tags", "below_min")),
        ("every tag ignored", _with(tagger, "tags", torch.full((B, 6), -100)), ("tags", "all_ignored")),
        ("token past the vocabulary", _set(tagger, "tokens", (2, 3), 30), ("tokens", "above_max")),
        ("tags longer than the tokens", _with(tagger, "tags", _ids(5, B, 7)), ("tags", "dim_mismatch")),
        ("int32 tags", _with(tagger, "tags", tagger["tags"].int()), ("tags", "dtype")),
        ("longer rows", {"tokens": _ids(30, B, 40), "tags": _ids(5, B, 40)}, None),
    ]),
    "gather": (Gatherer, gather, False, [
        ("slot past the table", _set(gather, "slots", (0, 1), 12), ("slots", "above_max")),
        ("negative slot", _set(gather, "slots", (0, 1), -1), ("slots", "below_min")),
        ("int32 slots (this torch's gather takes them: the dtype is probed)", _with(gather, "slots", gather["slots"].int()),
         None),
        ("float slots", _with(gather, "slots", gather["slots"].float()), ("slots", "dtype")),
        ("more slots a row", _with(gather, "slots", _ids(12, B, 12)), None),
    ]),
    "cnn": (small_cnn, image, True, [
        ("smallest image", _with(image, "input", torch.randn(B, 3, 8, 8)), None),
        ("image 7 high", _with(image, "input", torch.randn(B, 3, 7, 12)), ("input", "dim_bound")),
        ("image 7 wide", _with(image, "input", torch.randn(B, 3, 12, 7)), ("input", "dim_bound")),
        ("grey image", _with(image, "input", torch.randn(B, 1, 8, 8)), ("input", "shape")),
        ("fp16 image", _with(image, "input", torch.randn(B, 3, 8, 8).half()), ("input", "dtype")),
        ("label == classes", _set(image, "labels", 0, 10), ("labels", "above_max")),
        ("larger image", _with(image, "input", torch.randn(B, 3, 17, 23)), None),
    ]),
}
CASES = [(m, "valid batch", None) for m in MODULES] + [(m, n, e) for m, v in MODULES.items() for n, _, e in v[3]]


def _batch(module, name):
    _, valid, _, cases = MODULES[module]
    return valid if name == "valid batch" else next(b for n, b, _ in cases if n == name)


@pytest.mark.parametrize(("module", "name", "expected"), CASES, ids=[f"{m}-{n}" for m, n, _ in CASES])
def test_contract_agrees_with_the_forward(module, name, expected):
    make, _, outside, _ = MODULES[module]
    torch.manual_seed(0)
    model = make().eval()
    batch = _batch(module, name)
    truth = runs(model, batch, outside)
    assert (truth == "runs") == (expected is None), f"the model's behaviour changed: {truth}"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing these modules feed is left unchecked
        spec = tc.spec_for(model)
    report = tc.check(batch, spec, backend="torch")
    errors = {(v.field, v.code) for v in report.errors}
    if expected is None:
        assert not errors, report
    else:
        assert expected in errors, report


def test_bounds_are_the_modules_own():
    """The derived numbers, and where each came from, as the YAML prints them."""
    spec = tc.spec_for(Recommender())
    assert (spec.fields["user_ids"].max, spec.fields["item_ids"].max) == (9, 19)
    assert spec.fields["user_ids"].shape == ["B"] and spec.fields["item_ids"].shape == ["B", "L"]
    text = spec.to_yaml()
    assert "# in [0, 9]: users (embedding)" in text and "# in [0, 19]: items (embedding_bag)" in text
    assert text.startswith("# derived by tc.spec_for from a trace of Recommender.forward")
    spec = tc.spec_for(Tagger())
    assert "labels" not in spec.fields  # the tagger's loss reads `tags`: no guessed labels from the final Linear
    assert spec.fields["tags"].allow == [-100] and spec.fields["tags"].max == 4
    assert "# a class in [0, 4], ignore_index -100: forward (cross_entropy)" in spec.to_yaml()
    cnn = tc.spec_for(small_cnn())
    assert {r.rule for r in cnn.rules} >= {"H >= 8", "W >= 8"}
    assert "# probe forwards: H = 8 runs, H = 7 raises" in cnn.to_yaml()


def test_yaml_round_trips(tmp_path):
    spec = tc.spec_for(Tagger())
    path = tmp_path / "tagger.yaml"
    path.write_text(spec.to_yaml())
    assert tc.load_spec(path) == spec


def test_derivation_is_cached_per_class_and_config():
    cache.clear()
    model = Tagger()
    first = tc.spec_for(model)
    traced = model.forwards
    assert traced == 0  # the trace and probes ran on a copy: the model itself never ran
    again = Tagger()  # another instance of the same class and sizes: the same contract, no forward at all
    assert tc.spec_for(again) == first and again.forwards == 0
    bigger = Tagger()
    bigger.emb = nn.Embedding(40, 8)  # other sizes: derived anew
    assert tc.spec_for(bigger).fields["tokens"].max == 39


class TakesAMapping(nn.Module):
    """A forward over one dict: no batch built from the signature fits, so the lists' derivation is used."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 4)

    def forward(self, batch):
        return self.emb(batch["input_ids"]).sum()


def test_the_fallback_says_so():
    spec = tc.spec_for(TakesAMapping())
    assert spec.name.endswith("(derived by fallback)")
    assert spec.to_yaml().startswith("# derived by fallback: the per-family lists only")
    assert "Derived by fallback" in spec.description
    report = tc.check({"batch": torch.randint(0, 60, (2, 3))}, spec, backend="torch")
    assert "(derived by fallback)" in str(report).splitlines()[0]


def test_guard_binds_a_plain_modules_call_by_forwards_names():
    """The field is forward's own parameter name, so tc.guard(model) checks `model(x)` (it bound nothing before)."""
    model = small_cnn()
    handle = tc.guard(model)
    try:
        model(torch.randn(2, 3, 9, 9))
        with pytest.raises(tc.BatchValidationError, match="dim_bound"):
            model(torch.randn(2, 3, 7, 9))
    finally:
        handle.remove()


def test_a_model_on_the_device_is_traced_there(device):
    """The trace follows the very tensors it feeds: a model on CUDA gets the same bounds as on the CPU."""
    cache.clear()
    cpu = tc.spec_for(Recommender())
    model = Recommender().to(device)
    spec = tc.spec_for(model)
    assert spec.to_yaml() == cpu.to_yaml()
    batch = {k: v.to(device) for k, v in _set(rec, "user_ids", 0, 10).items()}
    assert {(v.field, v.code) for v in tc.check(batch, spec).errors} == {("user_ids", "above_max")}



class _Tokens(nn.Module):
    """Token ids through a table and a Linear, each token scaled by a per-token factor when one is given."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.out = nn.Linear(4, 3)

    def head(self, ids, scale):
        h = self.emb(ids)
        return self.out(h if scale is None else h * scale[..., None]).mean()


class Lengths(_Tokens):
    """An optional per-sample length: `lengths[:, None]` also broadcasts a [B, L] tensor (XLM's does)."""

    def forward(self, ids, lengths=None):
        return self.head(ids, None if lengths is None else torch.arange(ids.shape[1]) < lengths[:, None])


class Weighted(_Tokens):
    """An optional float weight per token (softplus takes no int), NaNs zeroed and cast by promotion."""

    def forward(self, ids, weights=None):
        return self.head(ids, None if weights is None else torch.nan_to_num(F.softplus(weights), nan=0.0))

def test_a_per_sample_input_keeps_the_fewest_axes_the_forward_takes():
    spec = tc.spec_for(Lengths())
    assert spec.fields["lengths"].shape == ["B"]
    ids = torch.randint(0, 10, (B, 6))
    batch = {"ids": ids, "lengths": torch.tensor([6, 3, 1])}
    Lengths()(**batch)  # the model takes it
    assert tc.check(batch, spec, backend="torch").ok


def test_an_optional_float_input_gets_its_dtypes_and_nan_severity_from_probes():
    spec = tc.spec_for(Weighted())
    f = spec.fields["weights"]
    assert f.dtype == ["float32", "float16"]  # fp64 meets the fp32 Linear and raises
    assert f.severity == {"non_finite": "warning"}
    weights = torch.ones(B, 6, dtype=torch.float16)
    weights[0, 0] = float("nan")
    batch = {"ids": torch.randint(0, 10, (B, 6)), "weights": weights}
    assert torch.isfinite(Weighted()(**batch))  # the model runs: a warning, not an error
    report = tc.check(batch, spec, backend="torch")
    assert report.ok and [(v.field, v.code) for v in report.violations] == [("weights", "non_finite")]


class Positioned(_Tokens):
    """Learned positions: a table of 12 rows indexed by `arange(L)`, or by the given (float-castable) position_ids."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(12, 4)

    def forward(self, ids, position_ids=None):
        positions = torch.arange(ids.shape[1]) if position_ids is None else position_ids.long()
        return self.out(self.emb(ids) + self.pos(positions)).mean()


def test_a_length_limit_is_probed_from_the_table_positions_index():
    """No list names this table: the trace sees it indexed by positions, probe forwards find the longest row."""
    spec = tc.spec_for(Positioned())
    assert "# probe forwards: L = 12 runs, L = 13 raises (probed up to the 12 rows of pos (embedding))" in spec.to_yaml()
    model = Positioned()
    for length in (12, 13):
        batch = {"ids": torch.randint(0, 10, (B, length))}
        errors = {(v.field, v.code) for v in tc.check(batch, spec, backend="torch").errors}
        assert (runs(model, batch) == "runs") == (length == 12) == (not errors), errors
        assert errors <= {("ids", "sequence_too_long")}
    long_with_positions = {"ids": torch.randint(0, 10, (B, 20)), "position_ids": torch.arange(20).remainder(12).expand(B, 20)}
    for batch in (long_with_positions, {**long_with_positions, "position_ids": long_with_positions["position_ids"].float()}):
        assert runs(model, batch) == "runs"  # given positions replace arange(L); the model casts float ones
        assert tc.check(batch, spec, backend="torch").ok


class Counted(Lengths):
    """A per-sample length the forward asserts against the sequence length (XLM's does)."""

    def forward(self, ids, lengths=None):
        assert lengths is None or int(lengths.max()) <= ids.shape[1], "lengths past the sequence"
        return super().forward(ids, lengths)


def test_a_count_bounded_by_a_dim_is_probed():
    spec = tc.spec_for(Counted())
    assert "# probe forwards: lengths = L runs, L + 1 raises" in spec.to_yaml()
    ids = torch.randint(0, 10, (B, 6))
    for top in (6, 7):
        batch = {"ids": ids, "lengths": torch.tensor([1, top, 2])}
        errors = {(v.field, v.code) for v in tc.check(batch, spec, backend="torch").errors}
        assert (runs(Counted(), batch) == "runs") == (top == 6) == (not errors)
        assert errors <= {("lengths", "above_max")}


class Broadcast(_Tokens):
    """A required mask the forward views as [B, -1, 1]: a [B] one broadcasts over the tokens and runs."""

    def forward(self, ids, mask):
        return self.out(self.emb(ids) * mask.view(ids.shape[0], -1, 1)).mean()


def test_a_rank_the_forward_broadcasts_is_named_in_the_origins():
    spec = tc.spec_for(Broadcast())
    assert spec.fields["mask"].shape == ["B", "L"]
    batch = {"ids": torch.randint(0, 10, (B, 6)), "mask": torch.tensor([1, 0, 1])}
    assert runs(Broadcast(), batch) == "runs"
    assert any(o.startswith("rank: the forward also runs with the last axis dropped ([2]") for o in spec.origins["fields.mask"])
    assert not any(o.startswith("rank:") for o in spec.origins["fields.ids"])
    # the wrong rank the forward runs through is a warning: the step runs
    assert spec.fields["mask"].severity.get("rank") == "warning" and "rank" not in spec.fields["ids"].severity
    report = tc.check(batch, spec, backend="torch")
    assert report.ok and [(v.field, v.code, v.severity) for v in report.violations] == [("mask", "rank", "warning")]
    with pytest.raises(tc.BatchValidationError):  # ids dropped an axis: the forward cannot run, still an error
        tc.validate({"ids": batch["ids"][:, 0], "mask": batch["mask"]}, spec, backend="torch")


class Windowed(Positioned):
    """Positioned, plus a causal-mask buffer of 12 rows sliced to the length (GPT-Neo's): past 12 tokens it raises
    even with position_ids given."""

    def __init__(self):
        super().__init__()
        self.register_buffer("causal", torch.ones(12, 12).tril())

    def forward(self, ids, position_ids=None):
        length = ids.shape[1]
        return super().forward(ids, position_ids) * self.causal[:length, :length].expand(length, length).mean()


def test_a_length_limit_holds_with_positions_given_where_the_model_says_so():
    spec = tc.spec_for(Windowed())
    rules = [r.rule for r in spec.rules if r.code == "sequence_too_long"]
    assert rules == ["L <= 12"], rules
    batch = {"ids": torch.randint(0, 10, (B, 13)), "position_ids": torch.zeros(B, 13, dtype=torch.long)}
    assert runs(Windowed(), batch) == "raises"
    assert {(v.field, v.code) for v in tc.check(batch, spec, backend="torch").errors} == {("ids", "sequence_too_long")}
    assert rules != [r.rule for r in tc.spec_for(Positioned()).rules if r.code == "sequence_too_long"]
