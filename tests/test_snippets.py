"""Every ```python block of README.md and docs/*.md runs, as written.

How the blocks run:
- The blocks of one file run in order in one namespace, as a reader goes through them, in a
  fresh temporary working directory.
- What the prose calls "your model", "your batch", "your dataset" comes from this file's
  per-document fixtures (`FIXTURES`): tiny real models and data, never downloads.
- A ```yaml block whose first line is `# NAME.yaml` is written to NAME.yaml first, so the
  python blocks can load it as written (`tc.load_spec("my_spec.yaml", num_labels=7)`).
- A function named `test_*` that a block defines is called after the block (hypothesis tests
  run their examples), with pytest fixtures it names taken from the namespace.
- To keep a block from running, put `<!-- no-run: REASON -->` on the line before its fence.
  Only for blocks that need a GPU or several processes (torch.distributed); the reason must
  say which (checked below).
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import tritoncheck as tc

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NO_RUN = re.compile(r"<!--\s*no-run:\s*(.+?)\s*-->\s*$")
FENCE = re.compile(r"^```(\w*)[^\n]*$")


@dataclass
class Block:
    lang: str
    code: str
    line: int  # of the first code line, for tracebacks
    no_run: str | None  # the reason, if marked


def blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        mark = NO_RUN.search(lines[i - 1]) if i else None
        out.append(Block(m.group(1), "\n".join(lines[i + 1:end]) + "\n", i + 2, mark.group(1) if mark else None))
        i = end + 1
    return out


# --- fixtures: what the prose assumes the reader has ------------------------------------------------


def _transformers():
    return pytest.importorskip("transformers", reason="pip install transformers (in the test extra)")


def _layoutlmv3():
    """A tiny LayoutLMv3 with the example config's contract (vocabulary, tables, image size, labels)."""
    T = _transformers()
    config = json.loads((ROOT / "examples" / "layoutlmv3_config.json").read_text())
    config.update(hidden_size=36, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
                  coordinate_size=6, shape_size=6)
    torch.manual_seed(0)
    return T.LayoutLMv3ForTokenClassification(T.LayoutLMv3Config(**config)).eval()


def _ctc_batch():
    torch.manual_seed(0)
    return {"log_probs": torch.randn(12, 2, 5).log_softmax(2), "targets": torch.tensor([[1, 2, 3], [4, 4, 0]]),
            "input_lengths": torch.tensor([12, 10]), "target_lengths": torch.tensor([3, 2])}


def readme_fixtures(tmp_path):
    model = _layoutlmv3()
    batch = torch.load(ROOT / "examples" / "layoutlmv3_good_batch.pt", weights_only=True)
    samples = [{k: v[i] for k, v in batch.items()} for i in range(len(batch["input_ids"]))]
    bad = {k: v.clone() for k, v in samples[0].items()}
    bad["labels"][3] = -1  # -1 where -100 was meant: quarantined by the training loop's collate
    return {"model": model, "batch": batch, "ds": [*samples, bad], "ids": batch["input_ids"], "boxes": batch["bbox"],
            "mask": batch["attention_mask"], "pixels": batch["pixel_values"], "labels": batch["labels"],
            **_ctc_batch()}


def _bert(num_labels=3, max_position_embeddings=64):
    T = _transformers()
    torch.manual_seed(0)
    config = T.BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=37, max_position_embeddings=max_position_embeddings, type_vocab_size=2,
                          num_labels=num_labels)
    return T.BertForSequenceClassification(config).eval()


def derive_fixtures(tmp_path):
    T = _transformers()
    llama = T.LlamaForCausalLM(T.LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=1,
                                             max_position_embeddings=64)).eval()
    return {"model": _bert(), "llama": llama}


def strategies_fixtures(tmp_path):
    from tritoncheck.pytest_plugin import fuzz

    T = _transformers()
    return {"MyModel": T.BertForSequenceClassification, "config": _bert().config, "tritoncheck_fuzz": fuzz}


def training_fixtures(tmp_path):
    """A tiny BERT, token rows as a `datasets` dataset (with a text column) and as a torch dataset, a word
    tokenizer, Trainer arguments, and a Lightning module with loaders of (index, inputs, labels)."""
    T = _transformers()
    datasets = pytest.importorskip("datasets", reason="pip install datasets (in the test extra)")
    tokenizers = pytest.importorskip("tokenizers", reason="pip install tokenizers (in the test extra)")
    model = _bert(max_position_embeddings=16)
    rows = [{"input_ids": [2, 5 + i % 7, 3], "label": i % 3} for i in range(8)]
    rows[5]["label"] = 7  # past num_labels: skipped by the collators
    dataset = [{"input_ids": torch.tensor(r["input_ids"]), "attention_mask": torch.ones(3, dtype=torch.long),
                "labels": torch.tensor(r["label"])} for r in rows]
    ds = datasets.Dataset.from_list([{**r, "text": f"row {i}"} for i, r in enumerate(rows)])
    vocab = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i + 2 for i in range(38)}}
    inner = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok = T.PreTrainedTokenizerFast(tokenizer_object=inner, pad_token="[PAD]", unk_token="[UNK]")
    args = T.TrainingArguments(str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4, report_to=[],
                               use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True)
    bad = {k: v.clone() for k, v in dataset[0].items()}
    bad["input_ids"][1] = 40  # past the vocabulary: the guard stops it before the forward
    return {"model": model, "dataset": dataset, "ds": ds, "tok": tok, "args": args,
            "batch": {k: v.unsqueeze(0) for k, v in dataset[0].items()},
            "bad_batch": {k: v.unsqueeze(0) for k, v in bad.items()},
            **_lightning(tmp_path)}


def _lightning(tmp_path):
    L = pytest.importorskip("lightning", reason="pip install lightning (in the test extra)")
    from torch import nn
    from torch.utils.data import DataLoader

    class Classifier(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv1d(4, 3, 3), nn.AdaptiveAvgPool1d(1), nn.Flatten())

        def _loss(self, batch):
            _, inputs, labels = batch
            return nn.functional.cross_entropy(self.net(inputs), labels)

        def training_step(self, batch, batch_idx):
            return self._loss(batch)

        def validation_step(self, batch, batch_idx):
            self._loss(batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def rows(n, bad):
        return [(i, torch.randn(4, 8), torch.tensor(5 if i in bad else i % 3)) for i in range(n)]

    return {"classifier": Classifier(), "train_loader": DataLoader(rows(8, ()), batch_size=4),
            "val_loader": DataLoader(rows(8, (6,)), batch_size=4)}


FIXTURES = {"README.md": readme_fixtures, "derive.md": derive_fixtures, "strategies.md": strategies_fixtures,
            "training.md": training_fixtures}


# --- the tests --------------------------------------------------------------------------------------


@pytest.mark.parametrize("doc", [d for d in DOCS if any(b.lang == "python" for b in blocks(d))], ids=lambda p: p.name)
def test_every_python_block_runs(doc, tmp_path, monkeypatch):
    found = blocks(doc)
    monkeypatch.chdir(tmp_path)
    for b in found:
        name = re.match(r"#\s*(\S+\.ya?ml)\s*$", b.code.splitlines()[0]) if b.lang == "yaml" else None
        if name:
            (tmp_path / name.group(1)).write_text(b.code, encoding="utf-8")
    scope = {"__name__": f"snippets_{doc.stem}", "torch": torch, "tc": tc}
    scope.update(FIXTURES.get(doc.name, lambda _: {})(tmp_path))
    ran = 0
    for b in found:
        if b.lang != "python" or b.no_run:
            continue
        before = set(scope)
        exec(compile(b.code, f"{doc.relative_to(ROOT)}:{b.line}", "exec"), scope)  # our own docs, not user input
        for name in sorted(set(scope) - before):
            if name.startswith("test_") and callable(scope[name]):
                fn = scope[name]
                fn(**{p: scope[p] for p in inspect.signature(fn).parameters})
        ran += 1
    assert ran, f"every python block of {doc.name} is marked no-run"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_run_is_only_for_gpu_or_several_processes(doc):
    for b in blocks(doc):
        if b.no_run:
            assert re.search(r"\bGPU\b|several processes", b.no_run), f"{doc.name}:{b.line}: {b.no_run}"
            assert b.lang == "python", f"{doc.name}:{b.line}: only python blocks run"


def test_the_readme_yaml_is_my_spec_and_loads_as_the_readme_says(tmp_path, monkeypatch):
    (named,) = [b for b in blocks(ROOT / "README.md") if b.lang == "yaml" and b.code.startswith("# my_spec.yaml")]
    (tmp_path / "my_spec.yaml").write_text(named.code, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    spec = tc.load_spec("my_spec.yaml", num_labels=7)
    assert "bbox" in spec.fields and all(v is not None for v in spec.params.values())


def test_blocks_are_found_with_their_marks():
    readme = blocks(ROOT / "README.md")
    assert sum(b.lang == "python" for b in readme) >= 5
    assert any(b.no_run and "GPU" in b.no_run for b in readme)
