"""Contracts agree with the real Hugging Face models they guard (issue 13).

Each (architecture, head) pair is built from a tiny config (never downloaded weights) and its
contract is `tc.spec_for(model)` (and the built-in spec where one exists). The model is the judge:
every case declares what the model does with the batch, and the test checks that first, then the
contract's verdict:

- the model runs with a finite loss: the contract reports no error (a case may expect a warning:
  a data bug the step runs through);
- the model raises, or its loss is not finite: the contract reports an error on the named field
  and code.

Valid batches are also drawn from each contract (`tritoncheck.strategies`) and run. The case list
below is the one source of docs/models.md (`python scripts/models_table.py` writes it; a test here
checks the committed file is current).
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

import tritoncheck as tc

T = pytest.importorskip("transformers", reason="pip install transformers (in the test extra)")
pytest.importorskip("hypothesis", reason="pip install hypothesis (in the test extra)")  # tritoncheck.strategies draws the valid batches

V, MAXPOS, B, L = 100, 20, 2, 8  # vocabulary rows, position rows, batch, length of every tiny model's batch
TINY = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 20}
TEXT = {"vocab_size": V, "max_position_embeddings": MAXPOS, **TINY}
DECODER = {**TEXT, "num_key_value_heads": 2}
SEQ2SEQ = {"vocab_size": V, "d_model": 16, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
           "decoder_attention_heads": 2, "encoder_ffn_dim": 20, "decoder_ffn_dim": 20, "max_position_embeddings": MAXPOS}
T5 = {"vocab_size": V, "d_model": 16, "d_kv": 8, "d_ff": 20, "num_layers": 1, "num_decoder_layers": 1, "num_heads": 2,
      "decoder_start_token_id": 0}
IMAGE = {"image_size": 8, "patch_size": 4, "num_labels": 3, **TINY}
WAV2VEC2 = {"vocab_size": 12, "conv_dim": (8, 8), "conv_kernel": (4, 3), "conv_stride": (3, 2), "num_conv_pos_embeddings": 3,
            "num_conv_pos_embedding_groups": 1, "pad_token_id": 0, **TINY}  # the feature encoder needs >= 10 samples
LAYOUTLMV3 = {**TEXT, "input_size": 32, "patch_size": 16, "coordinate_size": 2, "shape_size": 4}


# --- what a case expects ---------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    """What the model does with a batch ('runs', 'raises', 'nan') and what the contract must report."""

    model: str
    field: str | None = None
    code: str | None = None
    severity: str | None = None  # of the expected violation


OK = Expect("runs")


def crash(field_name: str, code: str) -> Expect:
    return Expect("raises", field_name, code, "error")


def nan(field_name: str, code: str) -> Expect:
    return Expect("nan", field_name, code, "error")


def warn(field_name: str, code: str) -> Expect:
    return Expect("runs", field_name, code, "warning")


Edit = Callable[[dict], dict]


@dataclass(frozen=True)
class Case:
    name: str
    expect: Expect
    edits: tuple[Edit, ...] = ()
    size: dict = field(default_factory=dict)  # keywords for the pair's batch builder (L=21, ...)


def case(name: str, expect: Expect, *edits: Edit, **size) -> Case:
    return Case(name, expect, edits, size)


def at(name: str, index, value) -> Edit:
    def edit(b):
        b[name][index] = value
        return b

    return edit


def put(name: str, make: Callable[[dict], torch.Tensor]) -> Edit:
    def edit(b):
        b[name] = make(b)
        return b

    return edit


def padded(n: int, pad: int = 1) -> Edit:
    """The last n tokens of every row are padding (pad id, mask 0, label -100)."""

    def edit(b):
        b["input_ids"][:, -n:] = pad
        b["attention_mask"][:, -n:] = 0
        if b.get("labels") is not None and b["labels"].shape == b["input_ids"].shape:
            b["labels"][:, -n:] = -100
        return b

    return edit


def drop(name: str) -> Edit:
    def edit(b):
        del b[name]
        return b

    return edit


@dataclass(frozen=True)
class Pair:
    """One (architecture, head) built from a tiny config, its valid batch and its cases."""

    arch: str
    kind: str  # encoder, decoder, encoder-decoder, vision, audio, multimodal
    config: Callable[[], object]
    batch: Callable[..., dict]  # the valid batch, at the contract's edges; keywords resize it
    cases: tuple[Case, ...]
    builtin: str | None = None  # a built-in contract checked alongside spec_for
    forward: dict = field(default_factory=dict)  # non-tensor keywords of the forward (return_loss=True)
    draws: dict | None = field(default_factory=lambda: {"L": (1, MAXPOS)})  # dims for valid_batches; None: no draws

    def model(self):
        return _model(self.arch)


def _ids(*shape, low=3, high=V, seed=0):
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed))


def _mask(*shape):
    return torch.ones(*shape, dtype=torch.int64)


# --- batch builders, one per input family ----------------------------------------------------


def classify(L=L, labels=3, B=B):  # noqa: N803 - L and B are the dims' names everywhere else
    ids = _ids(B, L)
    ids[0, 0], ids[-1, -1] = 0, V - 1  # the id edges
    return {"input_ids": ids, "attention_mask": _mask(B, L), "labels": torch.tensor([labels - 1, 0])[:B]}


def tokens(L=L, labels=3):  # noqa: N803
    b = classify(L)
    b["labels"] = _ids(B, L, low=0, high=labels, seed=1)
    b["labels"][0, 0], b["labels"][1, 1] = -100, labels - 1
    return b


def masked(L=L):  # noqa: N803
    b = classify(L)
    b["labels"] = torch.full((B, L), -100)
    b["labels"][:, 1] = torch.tensor([0, V - 1])
    return b


def qa(L=L):  # noqa: N803
    b = classify(L)
    del b["labels"]
    b["start_positions"], b["end_positions"] = torch.tensor([0, 2]), torch.tensor([L - 1, 2])
    return b


def causal(L=L):  # noqa: N803
    b = classify(L)
    b["labels"] = b["input_ids"].clone()
    b["labels"][0, :-1] = -100  # one row keeps only its last label: enough after the shift
    return b


def seq2seq(L=L, T=6):  # noqa: N803
    b = classify(L)
    b["labels"] = _ids(B, T, seed=1)
    b["labels"][0, -2:] = -100
    b["labels"][1, 0] = V - 1
    return b


def eos_classify(eos):
    def build(L=L):  # noqa: N803
        b = classify(L)
        b["input_ids"][b["input_ids"] == eos] = 5
        b["input_ids"][:, -1] = eos  # every row ends with its one <eos>
        return b

    return build


def layout(L=L, labels=5):  # noqa: N803
    b = tokens(L, labels)
    g = torch.Generator().manual_seed(2)
    x0 = torch.randint(0, 900, (B, L), generator=g)
    y0 = torch.randint(0, 900, (B, L), generator=g)
    b["bbox"] = torch.stack([x0, y0, x0 + 100, y0 + 100], dim=-1)
    b["bbox"][0, 0] = torch.tensor([0, 0, 1000, 1000])
    b["pixel_values"] = torch.randn(B, 3, 32, 32, generator=g)
    return b


def layout_classify(L=L):  # noqa: N803
    b = layout(L)
    b["labels"] = torch.tensor([0, 2])
    return b


def image(size=8):
    return {"pixel_values": torch.randn(B, 3, size, size, generator=torch.Generator().manual_seed(3)),
            "labels": torch.tensor([0, 2])}


def ctc(N=64, S=3):  # noqa: N803
    g = torch.Generator().manual_seed(4)
    labels = torch.randint(1, 12, (B, S), generator=g)
    labels[0, -1] = -100
    return {"input_values": torch.randn(B, N, generator=g), "labels": labels}


def audio_classify(N=64):  # noqa: N803
    return {"input_values": torch.randn(B, N, generator=torch.Generator().manual_seed(5)), "labels": torch.tensor([0, 2])}


def whisper(T=6):  # noqa: N803
    return {"input_features": torch.randn(B, 8, 20, generator=torch.Generator().manual_seed(6)), "labels": _ids(B, T)}


def clip(L=6):  # noqa: N803
    return {"input_ids": _ids(B, L), "attention_mask": _mask(B, L),
            "pixel_values": torch.randn(B, 3, 8, 8, generator=torch.Generator().manual_seed(7))}


# --- the cases shared by families -------------------------------------------------------------

half = put("pixel_values", lambda b: b["pixel_values"].half())


def common_text(*, length: Case | None = None, token_types: bool = True) -> tuple[Case, ...]:
    out = [
        case("id past the vocabulary", crash("input_ids", "above_max"), at("input_ids", (0, 1), V)),
        case("negative id", crash("input_ids", "below_min"), at("input_ids", (0, 1), -100)),
        case("float ids", crash("input_ids", "dtype"), put("input_ids", lambda b: b["input_ids"].float())),
        case("int32 ids", OK, put("input_ids", lambda b: b["input_ids"].int())),
        case("bool mask", OK, put("attention_mask", lambda b: b["attention_mask"].bool())),
        case("float 0/1 mask", OK, put("attention_mask", lambda b: b["attention_mask"].float())),
        case("mask holds 2", warn("attention_mask", "not_in_set"), at("attention_mask", (0, 1), 2)),
        case("row attends to nothing", warn("attention_mask", "no_attended_position"), at("attention_mask", 0, 0)),
    ]
    if token_types:
        out.append(case("token type past the table", crash("token_type_ids", "above_max"),
                        put("token_type_ids", lambda b: torch.full_like(b["input_ids"], 2))))
    if length is not None:
        out.append(length)
    return tuple(out)


EXPLICIT_POSITIONS = case("L past the table, explicit position_ids within it", OK,
                          put("position_ids", lambda b: torch.arange(b["input_ids"].shape[1]).expand_as(b["input_ids"]) % MAXPOS),
                          L=MAXPOS + 4)
TOO_LONG = case("L past the position table", crash("input_ids", "sequence_too_long"), L=MAXPOS + 1)
LONGEST = case("L at the position table", OK, L=MAXPOS)
COLUMN = case("labels shaped [B, 1]", OK, put("labels", lambda b: b["labels"][:, None]))
CLASS = (
    COLUMN,
    case("label == num_labels", crash("labels", "above_max"), at("labels", 0, 3)),
    case("label -1", crash("labels", "below_min"), at("labels", 0, -1)),
    case("int32 labels", crash("labels", "dtype"), put("labels", lambda b: b["labels"].int())),
)


def bad_tokens(num_labels: int = 3) -> tuple[Case, ...]:
    return (
        case("label == num_labels", crash("labels", "above_max"), at("labels", (0, 2), num_labels)),
        case("label -1", crash("labels", "below_min"), at("labels", (0, 2), -1)),
        case("every label ignored", nan("labels", "all_ignored"), put("labels", lambda b: torch.full_like(b["labels"], -100))),
    )


CAUSAL = (
    case("label past the vocabulary", crash("labels", "above_max"), at("labels", (1, 3), V)),
    case("label -1", crash("labels", "below_min"), at("labels", (1, 3), -1)),
    case("labels only at position 0", nan("labels", "all_ignored"),
         put("labels", lambda b: torch.where(torch.arange(L) == 0, b["labels"], -100))),
    case("L = 1", nan("labels", "all_ignored"), L=1),
    case("left padding", OK, at("attention_mask", (0, slice(0, 3)), 0)),
)
SEQ2SEQ_LABELS = (
    case("label past the vocabulary", crash("labels", "above_max"), at("labels", (1, 3), V)),
    case("label -1", crash("labels", "below_min"), at("labels", (1, 3), -1)),
    case("every label ignored", nan("labels", "all_ignored"), put("labels", lambda b: torch.full_like(b["labels"], -100))),
    case("one target token", OK, T=1),
    case("decoder_input_ids -100", crash("decoder_input_ids", "below_min"),
         put("decoder_input_ids", lambda b: torch.full_like(b["labels"], -100))),
)


def eos_rules(eos: int) -> tuple[Case, ...]:
    return (
        case("no <eos>", crash("input_ids", "no_eos"), at("input_ids", (slice(None), -1), 5)),
        case("<eos> counts differ", crash("input_ids", "eos_count"), at("input_ids", (0, 3), eos)),
        case("two <eos> in every row", OK, at("input_ids", (slice(None), 3), eos)),
    )


IMAGE_CASES = (
    COLUMN,
    case("NaN pixel", nan("pixel_values", "non_finite"), at("pixel_values", (1, 0, 2, 2), float("nan"))),
    case("grey image", crash("pixel_values", "shape"), put("pixel_values", lambda b: b["pixel_values"][:, :1])),
    case("label == num_labels", crash("labels", "above_max"), at("labels", 0, 3)),
)
FIXED_SIZE = (
    case("fp16 pixels (the model casts them)", OK, half),
    case("image of another size", crash("pixel_values", "shape"), size=16),
)
FREE_SIZE = (
    case("fp16 pixels", crash("pixel_values", "dtype"), half),
    case("image of another size", OK, size=16),
)


# --- the pairs ---------------------------------------------------------------------------------

BERT = {**TEXT, "type_vocab_size": 2}
ROBERTA = {**TEXT, "type_vocab_size": 1, "max_position_embeddings": MAXPOS + 2}  # 2 rows below pad_token_id + 1
ROBERTA_LONGEST = case("L at the table (rows - pad - 1)", OK, L=MAXPOS)
ROBERTA_TOO_LONG = case("L past the table (rows - pad - 1)", crash("input_ids", "sequence_too_long"), L=MAXPOS + 1)
ROBERTA_PADDED = case("longer row, the rest padding (padding is free)", OK, padded(4), L=MAXPOS + 4)
ROBERTA_TYPES = (case("token type 1 (type_vocab_size 1)", crash("token_type_ids", "above_max"),
                      put("token_type_ids", lambda b: torch.ones_like(b["input_ids"]))),)
ROTARY_LONG = case("L past max_position_embeddings (rotary)", warn("input_ids", "sequence_too_long"), L=MAXPOS + 1)
QA_CASES = (
    case("start past L (clamped, ignored)", warn("start_positions", "above_max"), at("start_positions", 0, L)),
    case("every start past L", nan("start_positions", "all_ignored"), put("start_positions", lambda b: torch.full((B,), L))),
    case("negative start (clamped to 0)", warn("start_positions", "below_min"), at("start_positions", 0, -1)),
    case("start after end", warn("start_positions", "rule_failed"), at("start_positions", 1, 3)),
    case("int32 positions", crash("start_positions", "dtype"), put("start_positions", lambda b: b["start_positions"].int())),
    case("positions shaped [B, 1]", OK, put("start_positions", lambda b: b["start_positions"][:, None]),
         put("end_positions", lambda b: b["end_positions"][:, None])),
)
# Issue 19: the loss ignores -100 in a single-label classification label (the lists flagged it); every label
# ignored is a NaN loss. Only on pairs without a built-in contract: the built-in bert/roberta specs still flag it.
IGNORED_LABEL = (
    case("label -100 (ignored by the loss)", OK, at("labels", 0, -100)),
    case("every label -100", nan("labels", "all_ignored"), put("labels", lambda b: torch.full_like(b["labels"], -100))),
)
NO_PAD = (case("B > 1 without a pad token", crash("input_ids", "no_pad_token"), B=2),)

PAIRS: tuple[Pair, ...] = (
    # encoders
    Pair("BertForSequenceClassification", "encoder", lambda: T.BertConfig(**BERT, num_labels=3), classify,
         (*common_text(length=TOO_LONG), LONGEST, EXPLICIT_POSITIONS, *CLASS,
          case("float labels", crash("labels", "dtype"), put("labels", lambda b: b["labels"].float())),
          case("zero token types", OK, put("token_type_ids", lambda b: torch.zeros_like(b["input_ids"]))),
          case("position id past the table", crash("position_ids", "above_max"),
               put("position_ids", lambda b: torch.arange(L).expand(B, L) + MAXPOS - L + 1))),
         builtin="bert-sequence-classification"),
    Pair("BertForTokenClassification", "encoder", lambda: T.BertConfig(**BERT, num_labels=3), tokens,
         (*common_text(length=TOO_LONG), *bad_tokens()), builtin="bert-token-classification"),
    Pair("BertForQuestionAnswering", "encoder", lambda: T.BertConfig(**BERT), qa, (*common_text(), *QA_CASES),
         builtin="bert-question-answering"),
    Pair("BertForMaskedLM", "encoder", lambda: T.BertConfig(**BERT), masked,
         (*common_text(length=TOO_LONG),
          case("label past the vocabulary", crash("labels", "above_max"), at("labels", (0, 1), V)),
          case("every label ignored", nan("labels", "all_ignored"), put("labels", lambda b: torch.full_like(b["labels"], -100))))),
    Pair("RobertaForSequenceClassification", "encoder", lambda: T.RobertaConfig(**ROBERTA, num_labels=3), classify,
         (*common_text(length=ROBERTA_TOO_LONG, token_types=False), ROBERTA_LONGEST, ROBERTA_PADDED, EXPLICIT_POSITIONS,
          *ROBERTA_TYPES,
          *CLASS), builtin="roberta-sequence-classification"),
    Pair("XLMRobertaForTokenClassification", "encoder", lambda: T.XLMRobertaConfig(**ROBERTA, num_labels=3), tokens,
         (*common_text(length=ROBERTA_TOO_LONG, token_types=False), *ROBERTA_TYPES, *bad_tokens())),
    Pair("DistilBertForSequenceClassification", "encoder",
         lambda: T.DistilBertConfig(vocab_size=V, max_position_embeddings=MAXPOS, dim=16, n_layers=1, n_heads=2, hidden_dim=20,
                                    num_labels=3), classify,
         (*common_text(length=TOO_LONG, token_types=False), EXPLICIT_POSITIONS, *CLASS, *IGNORED_LABEL,
          case("token_type_ids (not an input: ignored)", OK,
               put("token_type_ids", lambda b: torch.zeros_like(b["input_ids"]))))),
    Pair("ElectraForTokenClassification", "encoder", lambda: T.ElectraConfig(**BERT, embedding_size=8, num_labels=3), tokens,
         (*common_text(length=TOO_LONG), *bad_tokens())),
    Pair("DebertaV2ForSequenceClassification", "encoder", lambda: T.DebertaV2Config(**BERT, num_labels=3), classify,
         (*common_text(length=TOO_LONG), CLASS[1],
          case("labels shaped [B, 1]", crash("labels", "rank"), put("labels", lambda b: b["labels"][:, None])))),
    Pair("AlbertForMaskedLM", "encoder", lambda: T.AlbertConfig(**BERT, embedding_size=8), masked,
         (*common_text(length=TOO_LONG),
          case("every label ignored", nan("labels", "all_ignored"), put("labels", lambda b: torch.full_like(b["labels"], -100))))),
    Pair("MPNetForSequenceClassification", "encoder",
         lambda: T.MPNetConfig(**{**TEXT, "max_position_embeddings": MAXPOS + 2}, num_labels=3), classify,
         (*common_text(length=ROBERTA_TOO_LONG, token_types=False), *CLASS)),
    Pair("XLNetForSequenceClassification", "encoder",
         lambda: T.XLNetConfig(vocab_size=V, d_model=16, n_layer=1, n_head=2, d_inner=20, num_labels=3), classify,
         (*(c for c in common_text(token_types=False) if c.name != "bool mask"),
          case("bool mask", crash("attention_mask", "dtype"), put("attention_mask", lambda b: b["attention_mask"].bool())),
          case("long rows (relative positions)", OK, L=3 * MAXPOS), *CLASS)),
    Pair("XLNetForQuestionAnsweringSimple", "encoder",
         lambda: T.XLNetConfig(vocab_size=V, d_model=16, n_layer=1, n_head=2, d_inner=20), qa,
         (*(c for c in common_text(token_types=False) if c.name != "bool mask"), *QA_CASES)),
    # decoders
    Pair("GPT2LMHeadModel", "decoder", lambda: T.GPT2Config(vocab_size=V, n_positions=MAXPOS, n_embd=16, n_layer=1, n_head=2),
         causal, (*common_text(length=TOO_LONG, token_types=False), LONGEST, EXPLICIT_POSITIONS, *CAUSAL)),
    Pair("GPT2ForSequenceClassification", "decoder",
         lambda: T.GPT2Config(vocab_size=V, n_positions=MAXPOS, n_embd=16, n_layer=1, n_head=2, num_labels=3, pad_token_id=0),
         classify, (*common_text(length=TOO_LONG, token_types=False), *CLASS, *IGNORED_LABEL,
                    case("a row of padding only", OK, at("input_ids", 0, 0)))),
    Pair("LlamaForCausalLM", "decoder", lambda: T.LlamaConfig(**DECODER), causal,
         (*common_text(token_types=False), ROTARY_LONG, EXPLICIT_POSITIONS, *CAUSAL), builtin="causal-lm"),
    Pair("LlamaForSequenceClassification", "decoder", lambda: T.LlamaConfig(**DECODER, num_labels=3),
         functools.partial(classify, B=1), NO_PAD),
    Pair("Qwen2ForCausalLM", "decoder", lambda: T.Qwen2Config(**DECODER), causal,
         (*common_text(token_types=False), ROTARY_LONG, *CAUSAL)),
    Pair("MistralForCausalLM", "decoder", lambda: T.MistralConfig(**DECODER), causal, (ROTARY_LONG, *CAUSAL)),
    Pair("GemmaForCausalLM", "decoder", lambda: T.GemmaConfig(**{**DECODER, "num_key_value_heads": 1}, head_dim=8), causal,
         (ROTARY_LONG, *CAUSAL)),
    Pair("PhiForCausalLM", "decoder", lambda: T.PhiConfig(**TEXT), causal, (ROTARY_LONG, *CAUSAL)),
    Pair("GPTNeoXForCausalLM", "decoder", lambda: T.GPTNeoXConfig(**TEXT), causal, (ROTARY_LONG, *CAUSAL)),
    Pair("OPTForCausalLM", "decoder",
         lambda: T.OPTConfig(vocab_size=V, hidden_size=16, num_hidden_layers=1, ffn_dim=20, num_attention_heads=2,
                             max_position_embeddings=MAXPOS, word_embed_proj_dim=16), causal,
         (*(c for c in common_text(length=TOO_LONG, token_types=False) if c.name != "mask holds 2"), LONGEST, EXPLICIT_POSITIONS,
          case("mask of 2s (positions are its running sum)", crash("attention_mask", "not_in_set"),
               put("attention_mask", lambda b: torch.full_like(b["input_ids"], 2))),
          *CAUSAL)),
    Pair("BloomForCausalLM", "decoder", lambda: T.BloomConfig(vocab_size=V, hidden_size=16, n_layer=1, n_head=2), causal,
         (case("long rows (ALiBi)", OK, L=3 * MAXPOS), *CAUSAL)),
    # encoder-decoders
    Pair("BartForConditionalGeneration", "encoder-decoder", lambda: T.BartConfig(**SEQ2SEQ), seq2seq,
         (*common_text(length=TOO_LONG, token_types=False), LONGEST, *SEQ2SEQ_LABELS,
          case("target at the position table", OK, T=MAXPOS),
          case("target past the position table", crash("labels", "sequence_too_long"), T=MAXPOS + 1),
          case("no labels (decoder inputs from input_ids)", OK, drop("labels"))),
         builtin="bart-seq2seq"),
    Pair("MBartForConditionalGeneration", "encoder-decoder", lambda: T.MBartConfig(**SEQ2SEQ), seq2seq,
         (*common_text(length=TOO_LONG, token_types=False), *SEQ2SEQ_LABELS[:2],
          case("a row of labels all ignored", crash("labels", "all_ignored"), at("labels", 0, -100)))),
    Pair("MarianMTModel", "encoder-decoder",
         lambda: T.MarianConfig(**SEQ2SEQ, decoder_vocab_size=V, pad_token_id=V - 1, decoder_start_token_id=V - 1), seq2seq,
         (*common_text(length=TOO_LONG, token_types=False), *SEQ2SEQ_LABELS,
          case("only input_ids", crash("labels", "missing_field"), drop("labels")))),
    Pair("PegasusForConditionalGeneration", "encoder-decoder", lambda: T.PegasusConfig(**SEQ2SEQ), seq2seq,
         (*common_text(length=TOO_LONG, token_types=False), *SEQ2SEQ_LABELS,
          case("only input_ids", crash("labels", "missing_field"), drop("labels")))),
    Pair("T5ForConditionalGeneration", "encoder-decoder", lambda: T.T5Config(**T5), seq2seq,
         (*common_text(token_types=False), *SEQ2SEQ_LABELS,
          case("long rows (relative positions)", OK, L=3 * MAXPOS, T=3 * MAXPOS),
          case("only input_ids", crash("labels", "missing_field"), drop("labels"))),
         builtin="t5-seq2seq"),
    Pair("MT5ForConditionalGeneration", "encoder-decoder", lambda: T.MT5Config(**T5), seq2seq,
         (*SEQ2SEQ_LABELS, case("only input_ids", crash("labels", "missing_field"), drop("labels")))),
    Pair("BartForSequenceClassification", "encoder-decoder", lambda: T.BartConfig(**SEQ2SEQ, num_labels=3), eos_classify(2),
         (*eos_rules(2), *CLASS[:3]), draws=None),
    Pair("MBartForSequenceClassification", "encoder-decoder", lambda: T.MBartConfig(**SEQ2SEQ, num_labels=3), eos_classify(2),
         (*eos_rules(2), *CLASS[:2]), draws=None),
    Pair("T5ForSequenceClassification", "encoder-decoder", lambda: T.T5Config(**T5, num_labels=3), eos_classify(1),
         (*eos_rules(1), *CLASS[:2]), draws=None),
    Pair("MT5ForSequenceClassification", "encoder-decoder", lambda: T.MT5Config(**T5, num_labels=3), eos_classify(1),
         (*eos_rules(1), *CLASS[:2]), draws=None),
    # vision
    Pair("ViTForImageClassification", "vision", lambda: T.ViTConfig(**IMAGE), image, (*FIXED_SIZE, *IMAGE_CASES), draws={}),
    Pair("DeiTForImageClassification", "vision", lambda: T.DeiTConfig(**IMAGE), image, (*FIXED_SIZE, *IMAGE_CASES), draws={}),
    Pair("SwinForImageClassification", "vision",
         lambda: T.SwinConfig(image_size=8, patch_size=2, embed_dim=8, depths=[1], num_heads=[2], window_size=2, num_labels=3),
         image, (*FREE_SIZE, *IMAGE_CASES), draws={"H": (4, 12), "W": (4, 12)}),
    Pair("ConvNextForImageClassification", "vision",
         lambda: T.ConvNextConfig(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3), image,
         (*FREE_SIZE, *IMAGE_CASES), draws={"H": (8, 12), "W": (8, 12)}),
    Pair("ResNetForImageClassification", "vision",
         lambda: T.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3), image,
         (*FREE_SIZE, *IMAGE_CASES), draws={"H": (4, 12), "W": (4, 12)}),
    # audio
    Pair("Wav2Vec2ForCTC", "audio", lambda: T.Wav2Vec2Config(**WAV2VEC2), ctc,
         (case("shortest input (10 samples, one frame)", OK, N=10, S=1),
          case("input too short for the feature encoder", crash("input_values", "dim_bound"), N=9, S=1),
          case("more targets than frames", nan("labels", "ctc_too_short"), N=16, S=3),
          case("NaN sample", nan("input_values", "non_finite"), at("input_values", (0, 3), float("nan"))),
          case("fp16 input", crash("input_values", "dtype"), put("input_values", lambda b: b["input_values"].half())),
          case("label == vocab_size", crash("labels", "above_max"), at("labels", (1, 0), 12)),
          case("labels padded with -1", OK, at("labels", (0, -1), -1)),
          case("the blank (pad) id in the targets", warn("labels", "blank_in_target"), at("labels", (1, 0), 0)),
          case("attention row shorter than the targets", nan("labels", "ctc_too_short"),
               put("attention_mask", lambda b: (torch.arange(64) < 13).long().expand(B, 64).clone())),
          case("empty attention row", crash("labels", "ctc_too_short"),
               put("attention_mask", lambda b: torch.zeros(B, 64, dtype=torch.int64)))),
         draws={"N": (10, 80), "S": (1, 3)}),
    Pair("Wav2Vec2ForSequenceClassification", "audio",
         lambda: T.Wav2Vec2Config(**WAV2VEC2, num_labels=3, classifier_proj_size=8), audio_classify,
         (case("input too short for the feature encoder", crash("input_values", "dim_bound"), N=9),
          case("label == num_labels", crash("labels", "above_max"), at("labels", 0, 3)), COLUMN,
          case("fp16 input", crash("input_values", "dtype"), put("input_values", lambda b: b["input_values"].half()))),
         draws={"N": (10, 80)}),
    Pair("WhisperForConditionalGeneration", "audio",
         lambda: T.WhisperConfig(vocab_size=V, num_mel_bins=8, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                                 decoder_attention_heads=2, encoder_ffn_dim=20, decoder_ffn_dim=20, d_model=16,
                                 max_source_positions=10, max_target_positions=12, pad_token_id=V - 1, bos_token_id=V - 2,
                                 eos_token_id=V - 2, decoder_start_token_id=V - 3), whisper,
         (case("longest target", OK, T=12),
          case("the feature extractor's attention_mask", OK, put("attention_mask", lambda b: torch.ones(B, 20, dtype=torch.int64))),
          case("target past max_target_positions", crash("labels", "sequence_too_long"), T=13),
          case("frames != 2 * max_source_positions", crash("input_features", "shape"),
               put("input_features", lambda b: b["input_features"][..., :18])),
          case("7 mel bins", crash("input_features", "shape"), put("input_features", lambda b: b["input_features"][:, :7])),
          case("fp16 features", crash("input_features", "dtype"), put("input_features", lambda b: b["input_features"].half())),
          case("label past the vocabulary", crash("labels", "above_max"), at("labels", (0, 2), V)),
          case("every label ignored", nan("labels", "all_ignored"), put("labels", lambda b: torch.full_like(b["labels"], -100))),
          case("only input_features", crash("labels", "missing_field"), drop("labels"))),
         draws={"T": (1, 12)}),
    # multimodal
    Pair("LayoutLMv3ForTokenClassification", "multimodal", lambda: T.LayoutLMv3Config(**LAYOUTLMV3, num_labels=5), layout,
         (*common_text(length=case("L past the position table", crash("input_ids", "sequence_too_long"), L=MAXPOS + 1)),
          case("box at 1000 (the grid's edge)", OK, at("bbox", (1, 1), torch.tensor([0, 0, 1000, 1000]))),
          case("box at 1023 (off the grid, in the table)", warn("bbox", "off_grid"), at("bbox", (1, 1), torch.tensor([0, 0, 1023, 1023]))),
          case("box at 1024 (pixels?)", crash("bbox", "above_max"), at("bbox", (1, 1), torch.tensor([0, 0, 1024, 1024]))),
          case("negative box", crash("bbox", "below_min"), at("bbox", (1, 1, 0), -3)),
          case("x1 < x0", warn("bbox", "box_corners"), at("bbox", (1, 1), torch.tensor([400, 10, 80, 30]))),
          case("fp16 pixels", crash("pixel_values", "dtype"), half),
          case("bf16 pixels", crash("pixel_values", "dtype"), put("pixel_values", lambda b: b["pixel_values"].bfloat16())),
          case("fp64 pixels", crash("pixel_values", "dtype"), put("pixel_values", lambda b: b["pixel_values"].double())),
          case("NaN pixel", nan("pixel_values", "non_finite"), at("pixel_values", (1, 0, 3, 3), float("nan"))),
          case("image of another size", crash("pixel_values", "shape"), put("pixel_values", lambda b: torch.randn(B, 3, 48, 48))),
          case("no pixels", OK, drop("pixel_values")),
          case("18 tokens (rows - pad - 1)", OK, L=MAXPOS - 2),
          case("19 tokens (past rows - pad - 1)", crash("input_ids", "sequence_too_long"), L=MAXPOS - 1),
          case("longer row, the rest padding", OK, padded(4), L=MAXPOS + 2),
          case("no pixels, longer row with padding", crash("input_ids", "sequence_too_long"), padded(4), drop("pixel_values"),
               L=MAXPOS + 2),
          case("position id past the table", crash("position_ids", "above_max"),
               put("position_ids", lambda b: torch.arange(L).expand(B, L) + MAXPOS - L + 1)),
          case("boxes without the 4 axis", crash("bbox", "rank"), put("bbox", lambda b: b["bbox"][..., 0])),
          case("more images than pages", crash("pixel_values", "dim_mismatch"),
               put("pixel_values", lambda b: torch.randn(B + 1, 3, 32, 32))),
          case("grey image", crash("pixel_values", "shape"), put("pixel_values", lambda b: b["pixel_values"][:, :1])),
          case("no pixels, L past the position table", crash("input_ids", "sequence_too_long"), drop("pixel_values"), L=MAXPOS + 1),
          *bad_tokens(5)),
         builtin="layoutlmv3-token-classification"),
    Pair("LayoutLMv3ForSequenceClassification", "multimodal", lambda: T.LayoutLMv3Config(**LAYOUTLMV3, num_labels=3),
         layout_classify, (case("fp16 pixels", crash("pixel_values", "dtype"), half), *CLASS)),
    Pair("CLIPModel", "multimodal",
         lambda: T.CLIPConfig(text_config={**TEXT, "max_position_embeddings": 12}, vision_config={**IMAGE, "num_labels": 2},
                              projection_dim=8), clip,
         (case("longest text", OK, L=12),
          case("text past the position table", crash("input_ids", "sequence_too_long"), L=13),
          case("id past the text vocabulary", crash("input_ids", "above_max"), at("input_ids", (0, 1), V)),
          case("position id past the table", crash("position_ids", "above_max"),
               put("position_ids", lambda b: torch.arange(6).expand(B, 6) + 7)),
          case("fp16 pixels (the model casts them)", OK, half),
          case("image of another size", crash("pixel_values", "shape"), put("pixel_values", lambda b: torch.randn(B, 3, 16, 16))),
          case("more images than texts", crash("pixel_values", "dim_mismatch"),
               put("pixel_values", lambda b: torch.randn(B + 1, 3, 8, 8))),
          case("NaN pixel", nan("pixel_values", "non_finite"), at("pixel_values", (1, 0, 3, 3), float("nan")))),
         forward={"return_loss": True}, draws={"L": (1, 12)}),
)


# --- the suite ---------------------------------------------------------------------------------

PAIRS_BY_NAME = {p.arch: p for p in PAIRS}


@functools.cache
def _model(arch: str):
    pair = PAIRS_BY_NAME[arch]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(T, arch)(pair.config()).eval()


@functools.cache
def contracts(arch: str) -> dict[str, tc.BatchSpec]:
    """spec_for(model), and the built-in contract filled from the model's config where one exists."""
    pair, model = PAIRS_BY_NAME[arch], _model(arch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a known family derives without "left unchecked" warnings
        out = {"spec_for": tc.spec_for(model)}
    if pair.builtin:
        out[pair.builtin] = tc.load_spec(pair.builtin, config=model.config)
    return out


def run_model(pair: Pair, batch: dict) -> str:
    """'runs' (every float output finite), 'raises' or 'nan'. The model is shared by the pair's cases, so
    its config is restored after each forward: a sequence-classification head sets `config.problem_type`
    from the first labels it sees, and a float-labels case run first (xdist's order) made every later
    case multi-label."""
    model = pair.model()
    problem_type = getattr(model.config, "problem_type", None)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = model(**batch, **pair.forward)
    except Exception:  # the oracle: any error the model raises counts
        return "raises"
    finally:
        model.config.problem_type = problem_type
    loss = out.get("loss")
    values = [loss] if loss is not None else [v for v in out.values() if isinstance(v, torch.Tensor) and v.is_floating_point()]
    return "runs" if all(bool(torch.isfinite(v).all()) for v in values) else "nan"


def build(pair: Pair, c: Case) -> dict:
    batch = pair.batch(**c.size)
    for edit in c.edits:
        batch = edit(batch)
    return batch


def verdict(report) -> tuple[set, set]:
    """(errors, warnings), each a set of (field, code)."""
    return {(v.field, v.code) for v in report.errors}, {(v.field, v.code) for v in report.warnings}


def all_cases(pair: Pair) -> tuple[Case, ...]:
    return (case("valid batch (edges)", OK), *pair.cases)


CASES = [(p.arch, c.name) for p in PAIRS for c in all_cases(p)]


@pytest.mark.parametrize(("arch", "name"), CASES, ids=[f"{a}-{n}" for a, n in CASES])
def test_contract_agrees_with_the_model(arch, name):
    pair = PAIRS_BY_NAME[arch]
    c = next(c for c in all_cases(pair) if c.name == name)
    batch = build(pair, c)
    assert run_model(pair, {k: v.clone() for k, v in batch.items()}) == c.expect.model, "the model's behaviour changed"
    for source, spec in contracts(arch).items():
        errors, warns = verdict(tc.check(batch, spec, backend="torch"))
        expected = (c.expect.field, c.expect.code)
        if c.expect.model != "runs":
            assert expected in errors, f"{source}: the model {c.expect.model}, but the contract reports {errors or 'no error'}"
        else:
            assert not errors, f"{source}: the model runs, but the contract reports errors {errors}"
            if c.expect.severity == "warning":
                assert expected in warns, f"{source}: expected the warning {expected}, got {warns}"
            else:
                assert not warns, f"{source}: unexpected warnings {warns}"


DRAWN = [p.arch for p in PAIRS if p.draws is not None]


def traced_part(spec: tc.BatchSpec) -> tc.BatchSpec:
    """The contract without the forward parameters spec_for could not trace (inputs_embeds, mems, ...): those are
    accepted with a warning that their values are unchecked (`untraced_field`), so drawing them at random says
    nothing about the derived rules (the strategies do not yet leave out a field whose presence breaks a rule)."""
    untraced = {r.field for r in spec.rules if r.code == "untraced_field"}
    return spec.model_copy(update={"fields": {k: v for k, v in spec.fields.items() if k not in untraced},
                                   "rules": [r for r in spec.rules if r.code != "untraced_field"]})


@pytest.mark.parametrize("arch", DRAWN)
def test_batches_drawn_from_the_contract_run(arch):
    """Valid batches drawn from spec_for's contract (at the edges of its dims) run the model cleanly."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    pair = PAIRS_BY_NAME[arch]
    spec = traced_part(contracts(arch)["spec_for"])
    labels = tuple(f for f in ("labels", "start_positions", "end_positions") if f in spec.fields)

    @settings(max_examples=4, derandomize=True, database=None, deadline=None)
    @given(data=st.data())
    def draw(data):
        batch = data.draw(tc.strategies.valid_batches(spec, B=(1, 3), require=labels, **pair.draws))
        assert run_model(pair, batch) == "runs", {k: (tuple(v.shape), v.dtype) for k, v in batch.items()}

    draw()


def test_layoutlmv3_contracts_never_pass_a_batch_that_crashes_the_model():
    """Issue 13: fp16 pixels and long rows without pixels passed the LayoutLMv3 contract and crashed the model."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    pair = PAIRS_BY_NAME["LayoutLMv3ForTokenClassification"]

    @settings(max_examples=25, derandomize=True, database=None, deadline=None)
    @given(data=st.data())
    def draw(data):
        for spec in contracts(pair.arch).values():
            batch = data.draw(tc.strategies.valid_batches(spec, B=(1, 3), L=(1, MAXPOS + 4), require=("labels",)))
            assert run_model(pair, batch) == "runs", {k: (tuple(v.shape), v.dtype) for k, v in batch.items()}

    draw()


def test_the_shipped_good_example_runs_the_model_it_was_made_for():
    """examples/layoutlmv3_good_batch.pt passes its contract and runs LayoutLMv3 built from examples/layoutlmv3_config.json
    (narrowed to one tiny layer: the sizes the batch depends on are the file's)."""
    examples = Path(__file__).resolve().parent.parent / "examples"
    config = json.loads((examples / "layoutlmv3_config.json").read_text())
    spec = tc.load_spec("layoutlmv3-token-classification", config=config)
    batch = torch.load(examples / "layoutlmv3_good_batch.pt", weights_only=True)
    assert not tc.check(batch, spec).violations
    torch.manual_seed(0)
    tiny = {**config, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 20,
            "coordinate_size": 2, "shape_size": 4}
    model = T.LayoutLMv3ForTokenClassification(T.LayoutLMv3Config(**tiny)).eval()
    with torch.no_grad():
        assert torch.isfinite(model(**batch).loss)
    bad = torch.load(examples / "layoutlmv3_bad_batch.pt", weights_only=True)
    assert not tc.check(bad, spec).ok


def test_docs_models_md_is_the_scripts_output():
    """docs/models.md is rendered from this file's cases by scripts/models_table.py."""
    import importlib.util

    root = Path(__file__).resolve().parent.parent
    loader = importlib.util.spec_from_file_location("models_table", root / "scripts" / "models_table.py")
    script = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(script)
    assert (root / "docs" / "models.md").read_text(encoding="utf-8") == script.render(), \
        "docs/models.md is stale: run python scripts/models_table.py"


# the derived rules the other suites do not reach: the causal shift, <eos> counts, CTC frames, QA clamping,
# presence rules, off-grid boxes, a parameter-expression shape
NEW_RULES = ("LlamaForCausalLM", "BartForSequenceClassification", "Wav2Vec2ForCTC", "BertForQuestionAnswering",
             "LayoutLMv3ForTokenClassification", "WhisperForConditionalGeneration", "OPTForCausalLM")


@pytest.mark.parametrize("arch", NEW_RULES)
def test_the_c_backend_reports_what_torch_does(arch):
    """Every case of these pairs, checked by the compiled C kernel: the same report as the torch backend."""
    from report_compare import comparable

    pair = PAIRS_BY_NAME[arch]
    spec = contracts(arch)["spec_for"]
    for c in all_cases(pair):
        batch = build(pair, c)
        want = tc.check(batch, spec, backend="torch").to_dict()
        got = tc.check(batch, spec, backend="c").to_dict()
        assert got.pop("backend") == "c", c.name
        want.pop("backend")
        assert comparable(got) == comparable(want), c.name


# --- the generated sweep over transformers' own auto-model mappings (issue 19) -------------------
# tests/model_sweep.py builds every head class of the mappings from a shrunk config, derives its contract and
# runs mutations of the traced batch through the real model; docs/models.md's figures come from the recorded
# run (docs/models_sweep.json, written by `python scripts/models_table.py --sweep`).

SWEEP_JSON = Path(__file__).resolve().parent.parent / "docs" / "models_sweep.json"
FAST_SWEPT = ("GPTNeoForCausalLM", "BloomForQuestionAnswering", "FlaubertForMultipleChoice",
              pytest.param("LongT5ForConditionalGeneration", marks=pytest.mark.slow))  # 5 s: the slow set


def _recorded() -> dict:
    return json.loads(SWEEP_JSON.read_text(encoding="utf-8"))


@pytest.mark.parametrize("cls", FAST_SWEPT)
def test_a_swept_pair_gives_what_was_recorded(cls):
    """A few pairs of the sweep, re-run: the same probes caught and the same false alarms as docs/models.md says."""
    import model_sweep

    index, (head, model_type, name) = next((i, p) for i, p in enumerate(model_sweep.swept()) if p[2] == cls)
    assert model_sweep.to_json(model_sweep.sweep_pair(head, model_type, name)) == _recorded()["pairs"][index]


class _MaskedTokens(torch.nn.Module):
    """Token ids times a mask; `skip_ones`: an all-ones mask is skipped (as BERT's attention does), so a [B] mask of
    ones runs and one holding a 0 reaches `mask[:, :, None]` and raises; else a [B] mask broadcasts over the tokens."""

    def __init__(self, skip_ones: bool):
        super().__init__()
        self.emb, self.skip_ones = torch.nn.Embedding(10, 4), skip_ones

    def forward(self, ids, mask):
        h = self.emb(ids)
        if self.skip_ones and bool(mask.all()):
            return {"loss": h.mean()}
        return {"loss": (h * (mask[:, :, None] if self.skip_ones else mask.view(ids.shape[0], -1, 1))).mean()}


@pytest.mark.parametrize(("skip_ones", "expected"), [(True, "with its first value 0"), (False, "")])
def test_a_shape_probe_that_runs_by_luck_of_the_values_is_breaking(skip_ones, expected):
    """The sweep's truth for a shape: breaking where a variant of the batch that runs raises once changed alike."""
    import model_sweep

    model = _MaskedTokens(skip_ones)
    example = {"ids": torch.randint(0, 10, (2, 5)), "mask": torch.ones(2, 5, dtype=torch.long)}
    dims = {"ids": ["B", "L"], "mask": ["B", "L"]}
    probe = next(p for p in model_sweep.probes(example, set(), dims) if p.name == "mask: last axis dropped")
    assert model_sweep.outcome(model, probe.batch) == "runs"
    assert model_sweep.breaking_variant(model, example, probe, dims) == expected


# CI re-runs every SWEEP_SHARE-th swept pair (the whole sweep takes 10-20 minutes on 2 cores); set
# TRITONCHECK_SWEEP_SHARE=1 to re-run all of it. `python scripts/models_table.py --sweep` rewrites the record.
SWEEP_SHARE = int(os.environ.get("TRITONCHECK_SWEEP_SHARE", "4"))


def test_the_recorded_figures_are_the_sum_of_the_recorded_pairs():
    import model_sweep

    recorded = _recorded()
    pairs = [model_sweep.Result(**p) for p in recorded["pairs"]]
    assert model_sweep.summary(pairs) == recorded["summary"]
    assert [p["pair"] for p in recorded["pairs"]] == [name for _, _, name in model_sweep.swept()]


@pytest.mark.slow
@pytest.mark.parametrize("half", [0, 1])
def test_a_share_of_the_sweep_gives_what_docs_models_md_says(half):
    """Every SWEEP_SHARE-th swept pair re-run (minutes): each gives what docs/models.md's record says.

    In two halves (alternate pairs of the share), so that two test workers share the minutes."""
    import model_sweep

    swept = model_sweep.swept()
    for index in range(half * SWEEP_SHARE, len(swept), 2 * SWEEP_SHARE):
        assert model_sweep.to_json(model_sweep.sweep_pair(*swept[index])) == _recorded()["pairs"][index], swept[index]
