"""Per-family knowledge: the contract read from a model's config, head class and first/last layers.

Before issue 19 this was the whole of `tc.spec_for`; now it is the layer of hints on top of the
trace (names, messages, the box grid, `<eos>` counts, position schemes no trace shows) and the
fallback where a forward cannot be traced.

A Hugging Face model says most of its contract in its config and modules, but not where a user
looks: the id bound is the input embedding's row count (which `resize_token_embeddings` changes
while tokenizers and configs lag), RoBERTa-style position tables start at `pad_token_id + 1`, a
`type_vocab_size` of 1 makes every `token_type_id` but 0 a crash, and the head decides what a
label is. `spec_for` reads those from the loaded model itself (config for the semantics, modules
for the sizes), so the contract matches the weights that will actually run. What each family
accepts was found by running it (tests/test_model_agreement.py, docs/models.md): a rule is an
`error` where breaking it crashes the model or makes its loss non-finite, a `warning` where the
step runs on what is almost surely a data bug.

Position handling, by what the model has:
- an absolute table (BERT, ELECTRA, DistilBERT, GPT-2 `wpe`, BART/mBART `embed_positions` with
  their offset of 2, DeBERTa-v2 with `position_biased_input`): `L <= rows - offset`, a crash if broken;
- a RoBERTa-style table (roberta, xlm-roberta, camembert, layoutlmv3, ...): positions count only
  non-pad tokens from `pad_token_id + 1`, so at most `max_position_embeddings - pad_token_id - 1`
  non-pad tokens per row;
- rotary embeddings (Llama and friends): nothing crashes past `max_position_embeddings`, but the
  model was never trained there and degrades silently: a warning. Pass `max_position_embeddings=...`
  to `spec_for` to allow longer sequences on purpose (e.g. with RoPE scaling);
- relative positions (T5, DeBERTa-v2 without `position_biased_input`, XLNet): no length bound.
Explicit `position_ids` replace the length rule: the ids are bounded instead (they index the table).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tritoncheck.dtypes import dtype_name
from tritoncheck.spec.schema import ParamValue, SpecError
from tritoncheck.derive.signature import forward_args

# A note on what spec_for could not derive: CRASH if a batch breaking it likely crashes the model
# (an id past a table), which is warned; HARMLESS gaps are only logged (INFO, "tritoncheck" logger).
CRASH, HARMLESS = True, False
INT_IDS = ["int64", "int32"]
MASK_DTYPES = ["int64", "int32", "bool", "float"]  # masks are multiplied or compared in: any of these runs
WARNING = "warning"
# Model types whose position ids start at pad_token_id + 1 and skip padding.
ROBERTA_STYLE = frozenset(
    {"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "layoutlmv3", "roberta-prelayernorm", "data2vec-text"}
)
# Relative attention buckets: any length maps into the table.
RELATIVE = frozenset({"t5", "mt5", "umt5", "longt5", "switch_transformers", "xlnet"})
# token_type_ids go through the word embeddings (no table of their own).
TYPES_IN_WORD_EMBEDDINGS = frozenset({"gpt2", "gpt_neo"})
# token_type_ids only compared for equality (XLNet's relative segment encoding): any value runs.
TYPES_COMPARED = frozenset({"xlnet"})
# Masks used as `1.0 - mask`: a bool mask raises.
NO_BOOL_MASK = frozenset({"xlnet"})
# Positions are the running sum of the attention mask (OPT): a mask holding 2 walks off the table.
POSITIONS_FROM_MASK = frozenset({"opt"})
# Sequence classifiers that raise on single-label labels shaped [B, 1] (the others flatten them).
FLAT_LABELS_ONLY = frozenset({"deberta-v2"})
# Encoder-decoders that build decoder_input_ids from input_ids when neither labels nor decoder ids are given.
DECODER_FROM_INPUT_IDS = frozenset({"bart", "mbart"})
# Take the decoder inputs from labels by moving each row's last non-pad token first: a row of
# labels that is all -100 (or pad) makes that index -1 and raises.
SHIFT_FROM_LAST_TOKEN = frozenset({"mbart"})
# Cast pixel_values to their own dtype; every other vision model needs the parameters' dtype.
CASTS_PIXELS = frozenset({"vit", "deit", "clip", "clip_vision_model", "siglip", "siglip_vision_model"})
# Patch embeddings that refuse any image size but the config's (no interpolate_pos_encoding).
FIXED_IMAGE_SIZE = frozenset({"vit", "deit", "clip", "clip_vision_model", "siglip", "siglip_vision_model", "layoutlmv3"})
POSITION_TABLE_NAMES = ("position_embeddings", "position_embedding", "wpe", "embed_positions")
HEADS = (
    ("ForTokenClassification", "token_classification"),
    ("ForSequenceClassification", "sequence_classification"),
    ("ForImageClassification", "sequence_classification"),  # same labels and problem_type logic
    ("ForQuestionAnswering", "question_answering"),
    ("ForQuestionAnsweringSimple", "question_answering"),
    ("ForMaskedLM", "masked_lm"),
    ("ForCausalLM", "causal_lm"),
    ("LMHeadModel", "causal_lm"),
    ("ForConditionalGeneration", "conditional_generation"),
    ("MTModel", "conditional_generation"),  # MarianMTModel
    ("ForCTC", "ctc"),
)
PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression")

ID_HINTS = {
    "above_max": "ids past the embedding rows usually mean tokens were added to the tokenizer without "
    "model.resize_token_embeddings(len(tokenizer)), or tokenizer and model come from different checkpoints",
    "below_min": "negative ids (often -100 used as padding) belong only in labels; pad with the tokenizer's pad_token_id",
}
ALL_IGNORED = {"code": "all_ignored", "hint": "every label is -100, so the mean cross-entropy is NaN"}
NOTHING_TO_PREDICT = {
    "code": "all_ignored",
    "hint": "after the causal shift no label is left: every label past position 0 is -100 (or L is 1), "
    "so the mean cross-entropy is NaN (prompt-only samples after masking?)",
}
NO_ATTENDED = {"code": "no_attended_position", "severity": WARNING,
               "hint": "a row with no attended token has no context (the model runs on garbage); drop empty samples"}


def derive(model: nn.Module, problem_type: str | None) -> tuple[dict[str, Any], list[tuple[str, bool]]]:
    """Today's list-based contract of `model` as a spec mapping, and what it could not derive.

    Raises:
        SpecError: nothing at all could be derived.
    """
    if hasattr(getattr(model, "config", None), "model_type"):
        return _Derivation(model, problem_type).build()
    return _module_spec(model)


class _Derivation:
    """Builds the spec mapping for one Hugging Face model; `notes` collects what it could not derive."""

    def __init__(self, model: nn.Module, problem_type: str | None):
        self.model = model
        self.config = model.config
        # nested configs (CLIP): the text and vision sides have their own sizes
        self.text = getattr(self.config, "text_config", None) or self.config
        self.vision = getattr(self.config, "vision_config", None) or self.config
        self.model_type = str(getattr(self.config, "model_type", "") or "")
        self.cls = type(model).__name__
        self.problem_type = problem_type
        self.accepted, self.takes_kwargs = forward_args(model)
        self.modules = dict(model.named_modules())
        self.params: dict[str, ParamValue] = {}
        self.fields: dict[str, dict[str, Any]] = {}
        self.rules: list[dict[str, Any]] = []
        self.desc: list[str] = [f"Derived by tc.spec_for from {self.cls} (model_type {self.model_type or '?'})."]
        self.notes: list[tuple[str, bool]] = []  # (what was not derived, whether it is a likely crash cause)
        self.frames: tuple[str, str] | None = None  # frames the feature encoder makes from N, from the mask

    def build(self) -> tuple[dict[str, Any], list[tuple[str, bool]]]:
        head = self._head()
        seq2seq = bool(getattr(self.config, "is_encoder_decoder", False))
        text = "input_ids" in self.accepted
        if text:
            self._ids()
            if "attention_mask" in self.accepted:
                self._attention_mask("L")
            self._token_types()
            self._bbox()
            self._positions("L", side="encoder" if seq2seq else None)
        if seq2seq and ("decoder_input_ids" in self.accepted):
            self._decoder_inputs()
        self._pixels()
        self._audio()
        if text or head in ("sequence_classification", "ctc") or seq2seq:
            self._labels(head, seq2seq)
        elif "labels" in self.accepted:
            self.notes.append(("labels", CRASH))
        if not self.fields:
            raise SpecError(f"spec_for({self.cls}): nothing to derive: its forward takes {', '.join(sorted(self.accepted))}; "
                            "spec_for knows input_ids, pixel_values, input_features, and input_values as a waveform into a "
                            "convolutional feature encoder; write the contract in YAML")
        data = {"name": f"{self.model_type or self.cls}-derived", "description": " ".join(self.desc),
                "params": self.params, "fields": self.fields, "rules": self.rules}
        return data, self.notes

    def _head(self) -> str | None:
        for suffix, kind in HEADS:
            if self.cls.endswith(suffix):
                return kind
        return None

    def _compute_dtype(self) -> str:
        """The parameters' dtype, as the `dtype` parameter float inputs are checked against."""
        param = next(self.model.parameters(), None)
        self.params["dtype"] = dtype_name(param.dtype) if param is not None else dtype_name(torch.get_default_dtype())
        return "dtype"

    def _ids(self) -> None:
        rows = None
        try:
            rows = _rows(self.model.get_input_embeddings())
        except (NotImplementedError, AttributeError):
            rows = _rows(self._find_embedding("token_embedding"))  # CLIP's text tower
        configured = getattr(self.text, "vocab_size", None)
        if rows is None:
            rows = configured
            if rows is None:
                self.notes.append(("the token id bound (no input embedding and no config.vocab_size)", CRASH))
        elif configured is not None and configured != rows:
            self.desc.append(f"Ids are bounded by the input embedding's {rows} rows, "
                             f"not config.vocab_size={configured} (resized embeddings).")
        field = {"dtype": INT_IDS, "shape": ["B", "L"], "min": 0, "hints": ID_HINTS}
        if rows is not None:
            self.params["vocab_size"] = int(rows)
            field["max"] = "vocab_size - 1"
        self.fields["input_ids"] = field

    def _attention_mask(self, dim: str) -> None:
        """0/1 in any integer, bool or float dtype; another value runs (the mask is multiplied in) but is a
        data bug, except where positions are the mask's running sum."""
        dtypes = [d for d in MASK_DTYPES if d != "bool" or self.model_type not in NO_BOOL_MASK]
        mask: dict[str, Any] = {"dtype": dtypes, "shape": ["B", dim], "values": [0, 1], "optional": True}
        if self.model_type not in POSITIONS_FROM_MASK:
            mask["severity"] = {"not_in_set": WARNING}
        self.fields["attention_mask"] = mask
        self.rules.append({"rule": f"any(attention_mask != 0, dim={dim})", **NO_ATTENDED})

    def _token_types(self) -> None:
        if "token_type_ids" not in self.accepted:
            if self.takes_kwargs and self.fields.get("input_ids"):  # tokenizers emit them; forward(**kwargs) drops them
                self.fields["token_type_ids"] = {"dtype": INT_IDS, "shape": ["B", "L"], "optional": True,
                                                 "description": "not an input of the model: ignored"}
            elif getattr(self.config, "type_vocab_size", None):
                self.desc.append("The model takes no token_type_ids.")
            return
        field: dict[str, Any] = {"dtype": INT_IDS, "shape": ["B", "L"], "min": 0, "optional": True}
        table = self._find_embedding("token_type_embeddings")
        if table is not None:
            self.params["type_vocab_size"] = table.num_embeddings
            field["max"] = "type_vocab_size - 1"
            if table.num_embeddings == 1:
                field["hints"] = {"above_max": "type_vocab_size is 1: token_type_ids must be all zeros or left out "
                                  "(a BERT-style pair encoding sets 1s)"}
        elif self.model_type in TYPES_IN_WORD_EMBEDDINGS and "vocab_size" in self.params:
            field["max"] = "vocab_size - 1"
            field["description"] = "embedded with the word embeddings"
        elif self.model_type in TYPES_COMPARED:
            del field["min"]
            field["description"] = "segment ids, only compared with each other"
        elif getattr(self.config, "type_vocab_size", None) == 0:
            field["description"] = "ignored by the model (type_vocab_size 0)"
        else:
            self.notes.append(("the token_type_ids bound (no token type table found)", CRASH))
        self.fields["token_type_ids"] = field

    def _bbox(self) -> None:
        if "bbox" not in self.accepted:
            return
        table = self._find_embedding("x_position_embeddings")
        size = table.num_embeddings if table is not None else getattr(self.config, "max_2d_position_embeddings", None)
        box: dict[str, Any] = {"dtype": INT_IDS, "shape": ["B", "L", 4], "min": 0, "hints": {
            "above_max": "bbox looks like pixels: normalise to 0-1000 by page width/height, int(1000 * x / width)"}}
        if size is None:
            self.notes.append(("the bbox coordinate bound", CRASH))
        else:
            self.params["max_2d_position_embeddings"] = int(size)
            box["max"] = "max_2d_position_embeddings - 1"
            if size > 1001:  # the table outgrows the documented 0-1000 grid: the rest runs, but is off the page
                self.rules.append({"rule": "bbox <= 1000", "code": "off_grid", "severity": WARNING,
                                   "hint": "coordinates are normalised to 0-1000; past 1000 the box is off the page "
                                   "(normalised by the wrong page size?)"})
        self.fields["bbox"] = box
        for a, b, axis in ((0, 2, "x"), (1, 3, "y")):
            self.rules.append({"rule": f"bbox[..., {a}] <= bbox[..., {b}]", "code": "box_corners", "severity": WARNING,
                               "hint": f"{axis}1 < {axis}0: boxes may be (x, y, width, height) instead of (x0, y0, x1, y1)"})

    def _pixels(self) -> None:
        if "pixel_values" not in self.accepted:
            return
        cfg = self.vision
        channels = getattr(cfg, "num_channels", None)
        size = getattr(cfg, "input_size", None) or getattr(cfg, "image_size", None)
        casts = self.model_type in CASTS_PIXELS
        field: dict[str, Any] = {"dtype": ["float"] if casts else [self._compute_dtype()], "finite": True,
                                 "optional": self.model_type == "layoutlmv3"}
        if not casts:
            field["hints"] = {"dtype": "the model does not cast pixel_values: give them its parameters' dtype "
                              "(or pass dtype='float' to spec_for when training under autocast)"}
        if channels is None:
            self.notes.append(("the number of image channels", CRASH))
            shape: list[Any] = ["B", "C", "H", "W"]
        elif self.model_type in FIXED_IMAGE_SIZE and isinstance(size, int):
            self.params.update(num_channels=int(channels), input_size=int(size))
            shape = ["B", "num_channels", "input_size", "input_size"]
        else:
            self.params["num_channels"] = int(channels)
            shape = ["B", "num_channels", "H", "W"]
            self.notes.append(("the smallest image size the model takes", HARMLESS))
        field["shape"] = shape
        self.fields["pixel_values"] = field

    def _audio(self) -> None:
        """Raw waveforms (Wav2Vec2 family: a convolutional feature encoder) and log-mel features (Whisper)."""
        kernels, strides = getattr(self.config, "conv_kernel", None), getattr(self.config, "conv_stride", None)
        frames, bins = getattr(self.config, "max_length", None), getattr(self.config, "num_mel_bins", None)
        if "input_values" in self.accepted and kernels is None and isinstance(frames, int) and isinstance(bins, int):
            # a spectrogram into a patch embedding with a fixed position table (AST): exactly max_length frames
            self.params.update(max_length=frames, num_mel_bins=bins)
            self.fields["input_values"] = {"dtype": [self._compute_dtype()], "shape": ["B", "max_length", "num_mel_bins"],
                                           "finite": True, "hints": {"shape": "log-mel features: exactly max_length frames "
                                                                     "of num_mel_bins bins (pad or truncate with the feature extractor)"}}
        elif "input_values" in self.accepted and (kernels is None or strides is None):
            self.notes.append(("input_values (not a waveform into a convolutional feature encoder)", CRASH))
        elif "input_values" in self.accepted:
            self.fields["input_values"] = {"dtype": [self._compute_dtype()], "shape": ["B", "N"], "finite": True}
            self.params["min_length"] = _min_length([(k, s, 0, 1) for k, s in zip(kernels, strides)])
            self.rules.append({"rule": "N >= min_length", "code": "dim_bound", "field": "input_values",
                               "hint": "shorter than the receptive field of the convolutional feature encoder; "
                               "pad or drop very short clips"})
            self.frames = (_frames_expr("N", kernels, strides), _frames_expr("sum(attention_mask, dim=N)", kernels, strides))
            if "attention_mask" in self.accepted:
                self._attention_mask("N")
        if "input_features" in self.accepted:
            bins, source = getattr(self.config, "num_mel_bins", None), getattr(self.config, "max_source_positions", None)
            if bins is None or source is None:
                self.notes.append(("the input_features shape", CRASH))
                shape: list[Any] = ["B", "M", "F"]
            else:
                # the encoder's two convolutions (the second with stride 2) must give exactly max_source_positions frames
                self.params.update(num_mel_bins=int(bins), max_source_positions=int(source))
                shape = ["B", "num_mel_bins", "2 * max_source_positions"]
            self.fields["input_features"] = {"dtype": [self._compute_dtype()], "shape": shape, "finite": True, "hints": {
                "shape": "log-mel features: num_mel_bins rows and exactly 2 * max_source_positions frames (pad or truncate "
                "the audio to 30 s with the feature extractor)"}}
            if "attention_mask" in self.accepted:  # the feature extractor's frame mask; the encoder attends to every frame
                self.fields["attention_mask"] = {"dtype": MASK_DTYPES, "shape": ["B", shape[2]], "values": [0, 1],
                                                 "optional": True, "severity": {"not_in_set": WARNING}}

    def _positions(self, dim: str, side: str | None) -> None:
        """Add the length rule for `dim` (and bound position_ids), by the kind of positions."""
        ids = "input_ids" if dim == "L" else "decoder_input_ids"
        table = self._position_table(side)
        rotary = any("rotary" in type(m).__name__.lower() for m in self.modules.values())
        max_param = "max_position_embeddings" if dim == "L" else "max_target_positions"
        explicit = dim == "L" and "position_ids" in self.accepted
        unless = " where not present(position_ids)" if explicit else ""  # given ids replace the positions: bound those
        soft = False  # rotary: past the context runs (a warning), for L and for the ids
        if self.model_type in RELATIVE or (table is None and getattr(self.config, "relative_attention", False)):
            self.desc.append(f"Relative positions: no bound on {dim}.")
            bound = None
        elif table is not None and (self.model_type in ROBERTA_STYLE or table.padding_idx is not None) and dim == "L":
            pad = table.padding_idx if table.padding_idx is not None else getattr(self.config, "pad_token_id", None)
            if pad is None:
                self.notes.append(("the pad id that offsets RoBERTa-style positions", CRASH))
                return
            self.params.update(max_position_embeddings=table.num_embeddings, pad_token_id=int(pad))
            self.rules.append({
                "rule": f"sum({ids} != pad_token_id, dim={dim}) <= max_position_embeddings - pad_token_id - 1{unless}",
                "code": "sequence_too_long",
                "hint": "RoBERTa-style positions start at pad_token_id + 1, so a row holds at most "
                "max_position_embeddings - pad_token_id - 1 non-pad tokens; truncate in the tokenizer"})
            self.desc.append("Positions start at pad_token_id + 1 and skip padding.")
            bound = "max_position_embeddings - 1"
        elif table is not None:
            offset = int(getattr(table, "offset", 0) or 0)
            self.params[max_param] = table.num_embeddings - offset
            self.rules.append({"rule": f"{dim} <= {max_param}{unless}", "code": "sequence_too_long",
                               "hint": f"the position table has {max_param} rows; truncate (truncation=True, max_length=...)"})
            bound = f"{max_param} - 1"
        elif rotary and getattr(self.text, "max_position_embeddings", None):
            self.params[max_param] = int(self.text.max_position_embeddings)
            self.rules.append({"rule": f"{dim} <= {max_param}{unless}", "code": "sequence_too_long", "severity": WARNING,
                               "hint": "longer than the trained context: rotary positions run but degrade silently; "
                               "truncate, or pass max_position_embeddings=... to spec_for if this is intended"})
            self.desc.append("Rotary positions: past the trained context the model runs, but degrades (a warning).")
            bound, soft = f"{max_param} - 1", True
        else:
            self.notes.append((f"a bound on {dim} (no position table, rotary embedding or known relative scheme)", HARMLESS))
            bound = None
        if dim == "L" and self.model_type == "layoutlmv3" and "pixel_values" in self.accepted:
            # without an image the relative-position ids are a slice of a buffer of max_position_embeddings rows
            self.rules.append({"rule": "L <= max_position_embeddings where not present(pixel_values)",
                               "code": "sequence_too_long", "field": "input_ids",
                               "hint": "without pixel_values a row may be at most max_position_embeddings long, padding "
                               "included; truncate or give the page image"})
        if explicit:
            field: dict[str, Any] = {"dtype": INT_IDS, "shape": ["B", "L"], "min": 0, "optional": True}
            if bound is not None:
                field["max"] = bound
            if soft:
                field["severity"] = {"above_max": WARNING}
            self.fields["position_ids"] = field

    def _position_table(self, side: str | None) -> nn.Embedding | None:
        for name, m in self.modules.items():
            if not isinstance(m, nn.Embedding) or name.rsplit(".", 1)[-1] not in POSITION_TABLE_NAMES:
                continue
            if (side == "encoder" and "decoder" in name) or (side == "decoder" and "decoder" not in name) or "vision" in name:
                continue
            return m
        return None

    def _find_embedding(self, last: str, within: str = "") -> nn.Embedding | None:
        for name, m in self.modules.items():
            if isinstance(m, nn.Embedding) and name.rsplit(".", 1)[-1] == last and within in name:
                return m
        return None

    def _decoder_inputs(self) -> None:
        rows = _rows(self._find_embedding("embed_tokens", within="decoder")) or self.params.get("vocab_size")
        field: dict[str, Any] = {"dtype": INT_IDS, "shape": ["B", "T"], "min": 0, "optional": True,
                                 "hints": {"below_min": "-100 belongs only in labels; the model builds decoder_input_ids "
                                           "from labels itself"}}
        if rows is not None:
            name = "vocab_size" if rows == self.params.get("vocab_size") else "decoder_vocab_size"
            self.params[name] = int(rows)
            field["max"] = f"{name} - 1"
        self.fields["decoder_input_ids"] = field
        if "decoder_attention_mask" in self.accepted:
            self.fields["decoder_attention_mask"] = {"dtype": MASK_DTYPES, "shape": ["B", "T"],
                                                     "values": [0, 1], "optional": True, "severity": {"not_in_set": WARNING}}
        self._positions("T", side="decoder")

    def _labels(self, head: str | None, seq2seq: bool) -> None:
        if head in ("masked_lm", "causal_lm") or (head == "conditional_generation" and not seq2seq):
            self._lm_labels("L", shifted=head != "masked_lm")
        elif head == "conditional_generation":
            self._lm_labels("T", shifted=False)
            self._decoder_from_labels()
        elif head == "token_classification":
            self._num_labels()
            self.fields["labels"] = {"dtype": ["int64"], "shape": ["B", "L"], "min": 0, "max": "num_labels - 1",
                                     "allow": [-100], "optional": True,
                                     "hints": {"above_max": "a label id >= num_labels; check label2id against config.num_labels"}}
            self.rules.append({"rule": "any(labels != -100)", **ALL_IGNORED})
        elif head == "sequence_classification":
            self._sequence_labels()
            self._pooled_token(seq2seq)
        elif head == "question_answering":
            self._qa_positions()
        elif head == "ctc":
            self._ctc_labels()
        elif "labels" in self.accepted:
            self.notes.append((f"labels (no known head in {self.cls})", CRASH))

    def _lm_labels(self, dim: str, shifted: bool) -> None:
        rows = None
        try:
            out = self.model.get_output_embeddings()
            rows = getattr(out, "out_features", None) or getattr(out, "num_embeddings", None)
        except (NotImplementedError, AttributeError):
            pass
        name = "vocab_size"
        if rows is not None and rows != self.params.get("vocab_size"):
            name = "decoder_vocab_size" if rows == self.params.get("decoder_vocab_size") else "output_vocab_size"
            self.params[name] = int(rows)
        if name not in self.params:
            self.notes.append(("the label id bound (no output embedding)", CRASH))
        field: dict[str, Any] = {"dtype": ["int64"], "shape": ["B", dim], "min": 0, "allow": [-100], "optional": True,
                                 "hints": {"below_min": "ignored positions must be exactly -100"}}
        if name in self.params:
            field["max"] = f"{name} - 1"
            field["hints"]["above_max"] = "label ids past the output vocabulary; tokenized with a different tokenizer?"
        self.fields["labels"] = field
        if shifted:  # a causal LM predicts labels[1:] from the tokens before them: label 0 is never used
            self.rules += [{"rule": f"{dim} >= 2 where present(labels)", "field": "labels", **NOTHING_TO_PREDICT},
                           {"rule": f"any((labels != -100) & (arange({dim}) > 0))", **NOTHING_TO_PREDICT}]
        else:
            self.rules.append({"rule": "any(labels != -100)", **ALL_IGNORED})

    def _decoder_from_labels(self) -> None:
        """Encoder-decoders build decoder_input_ids from labels; most cannot do without either."""
        if self.model_type not in DECODER_FROM_INPUT_IDS and "decoder_input_ids" in self.fields:
            self.rules.append({"rule": "present(labels) | present(decoder_input_ids)", "code": "missing_field",
                               "field": "labels", "hint": "the decoder inputs are built from labels: give labels "
                               "(training) or decoder_input_ids"})
        if self.model_type in SHIFT_FROM_LAST_TOKEN and self.params.get("pad_token_id", self.config.pad_token_id) is not None:
            self.params.setdefault("pad_token_id", int(self.config.pad_token_id))
            self.rules.append({"rule": "any((labels != -100) & (labels != pad_token_id), dim=T)", "code": "all_ignored",
                               "hint": "a row of labels that is all -100 (or padding) leaves no token to start the "
                               "decoder inputs from, and the model raises; drop empty targets"})

    def _qa_positions(self) -> None:
        """Hugging Face clamps positions to [0, L] and ignores L: a position off the row is a silent data bug,
        and a batch whose every start (or end) is off the row has a NaN loss."""
        for f in ("start_positions", "end_positions"):
            self.fields[f] = {"dtype": ["int64"], "shape": ["B", "1?"], "min": 0, "max": "L - 1", "optional": True,
                              "severity": {"above_max": WARNING, "below_min": WARNING},
                              "hints": {"above_max": "a position past the sequence is clamped to L and silently ignored "
                                        "(the answer was truncated away?)",
                                        "below_min": "a negative position is clamped to 0 (the [CLS] token)"}}
            self.rules.append({"rule": f"any({f} < L)", "code": "all_ignored",
                               "hint": f"every {f.split('_')[0]} position is past the sequence, so all are ignored and the "
                               "loss is NaN (answers truncated away?)"})
        self.rules.append({"rule": "start_positions <= end_positions", "severity": WARNING,
                           "hint": "an answer that ends before it starts; were character offsets mapped to tokens?"})

    def _ctc_labels(self) -> None:
        """Wav2Vec2-style CTC: targets padded with any negative value (-100), below vocab_size (the model raises
        otherwise), no longer than the frames the feature encoder makes (else the loss is inf)."""
        vocab = getattr(self.config, "vocab_size", None)
        field: dict[str, Any] = {"dtype": INT_IDS, "shape": ["B", "S"], "optional": True,
                                 "description": "CTC targets; negative values are padding"}
        if vocab is None:
            self.notes.append(("the CTC target bound", CRASH))
        else:
            self.params["vocab_size"] = int(vocab)
            field["max"] = "vocab_size - 1"
        self.fields["labels"] = field
        if self.frames is not None:
            for length, where in ((self.frames[0], "N samples"), (self.frames[1], "the attended samples")):
                self.rules.append({"rule": f"sum(labels >= 0, dim=S) <= {length}", "code": "ctc_too_short",
                                   "hint": f"more targets than the frames {where} make: the CTC loss is inf; "
                                   "drop clips too short for their transcript"})
        blank = getattr(self.config, "pad_token_id", None)
        if blank is not None:
            self.params["pad_token_id"] = int(blank)
            self.rules.append({"rule": "labels != pad_token_id", "code": "blank_in_target", "severity": WARNING,
                               "hint": "the pad id is CTC's blank: a target holding it cannot be emitted; "
                               "pad targets with -100"})

    def _num_labels(self) -> int:
        """The head's real width (its last Linear outside the base model), which may differ from
        config.num_labels when the head was replaced."""
        configured = getattr(self.config, "num_labels", None)
        base = str(getattr(self.model, "base_model_prefix", "") or "") + "."
        linears = [m for n, m in self.modules.items() if isinstance(m, nn.Linear) and not (base != "." and n.startswith(base))]
        width = linears[-1].out_features if linears else configured
        if width is None:
            raise SpecError(f"spec_for({self.cls}): cannot tell the number of labels (no config.num_labels, no Linear head)")
        if configured is not None and configured != width:
            self.desc.append(f"The classifier has {width} outputs (config.num_labels says {configured}).")
        self.params["num_labels"] = int(width)
        return int(width)

    def _sequence_labels(self) -> None:
        n = self._num_labels()
        per_sample = ["B"] if self.model_type in FLAT_LABELS_ONLY else ["B", "1?"]  # [B, 1] is flattened
        pt = self.problem_type or getattr(self.config, "problem_type", None)
        if pt is None:
            # What Hugging Face does when problem_type is unset: one output -> regression; otherwise
            # integer labels -> single-label. Float [B, num_labels] labels would go to multi-label,
            # which a second contract covers (problem_type="multi_label_classification").
            pt = "regression" if n == 1 else "single_label_classification"
            self.desc.append(f"config.problem_type is unset; as Hugging Face infers it from num_labels={n}, the labels are {pt}.")
        if pt == "single_label_classification":
            self.fields["labels"] = {"dtype": ["int64"], "shape": per_sample, "min": 0, "max": "num_labels - 1", "optional": True,
                                     "hints": {"above_max": "a label id >= num_labels; check label2id against "
                                               "config.num_labels (1-based labels?)",
                                               "below_min": "negative labels; single-label classification takes class indices"}}
        elif pt == "multi_label_classification":
            self.fields["labels"] = {"dtype": ["float"], "shape": ["B", "num_labels"], "min": 0, "max": 1, "finite": True,
                                     "optional": True, "description": "multi-hot targets for BCEWithLogitsLoss",
                                     "hints": {"above_max": "multi-label targets must be 0/1 (or probabilities), one column per label"}}
        elif pt == "regression":
            self.fields["labels"] = {"dtype": ["float", "int64", "int32"], "shape": per_sample if n == 1 else ["B", "num_labels"],
                                     "finite": True, "optional": True, "description": "regression targets for MSELoss"}
        else:
            raise SpecError(f"spec_for({self.cls}): unknown config.problem_type {pt!r}; pass problem_type=...")

    def _pooled_token(self, seq2seq: bool) -> None:
        """Which token a sequence classifier pools, where that constrains the batch."""
        if seq2seq and "input_ids" in self.fields:
            eos = getattr(self.config, "eos_token_id", None)
            if eos is None:
                self.notes.append(("the <eos> the classifier pools (no config.eos_token_id)", CRASH))
                return
            self.params["eos_token_id"] = int(eos)
            self.rules.append({"rule": "any(input_ids == eos_token_id, dim=L)", "code": "no_eos",
                               "hint": "the classifier reads the hidden state at <eos>: end every row with "
                               "eos_token_id (add_special_tokens=True)"})
            self.rules.append({"rule": "sum(input_ids == eos_token_id, dim=L) * B == sum(input_ids == eos_token_id)",
                               "code": "eos_count", "hint": "every row must hold the same number of <eos> tokens"})
        elif "score" in dict(self.model.named_children()) and getattr(self.text, "pad_token_id", None) is None:
            # decoder-only: pools the last non-pad token, which it cannot find without a pad id
            self.rules.append({"rule": "B <= 1", "code": "no_pad_token", "field": "input_ids",
                               "hint": "config.pad_token_id is None, so the model cannot find each row's last token "
                               "and refuses batches of more than one; set model.config.pad_token_id"})


def _rows(embedding: nn.Module | None) -> int | None:
    return getattr(embedding, "num_embeddings", None)


def _frames_expr(length: str, kernels, strides) -> str:
    """The frames a stack of unpadded convolutions makes from `length` samples, as Hugging Face computes
    them: floor((n - kernel) / stride) + 1 per layer."""
    out = length
    for k, s in zip(kernels, strides):
        out = f"({out} - {k}) // {s} + 1"
    return out


# --- plain nn.Module -------------------------------------------------------------------------

_POOLS = (nn.MaxPool1d, nn.AvgPool1d)
_NORMS = (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm, nn.modules.instancenorm._InstanceNorm)


def _module_spec(model: nn.Module) -> tuple[dict[str, Any], list[tuple[str, bool]]]:
    """What the first and last layers reveal. Layers are taken in registration order, which is the
    order they run in for nn.Sequential and for most hand-written models."""
    name = type(model).__name__
    layers = [m for m in model.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag, nn.Conv1d, nn.Conv2d, nn.Linear))]
    # the first layer with weights of its own (norms are skipped: they keep the input's shape)
    first = next((m for m in model.modules() if not isinstance(m, _NORMS) and any(True for _ in m.parameters(recurse=False))),
                 None)
    params: dict[str, ParamValue] = {}
    fields: dict[str, dict[str, Any]] = {}
    rules: list[dict[str, Any]] = []
    notes: list[tuple[str, bool]] = []
    desc = [f"Derived by tc.spec_for from the modules of {name}."]
    if isinstance(first, (nn.Embedding, nn.EmbeddingBag)):
        params["vocab_size"] = first.num_embeddings
        fields["input_ids"] = {"dtype": INT_IDS, "shape": ["B", "L"], "min": 0, "max": "vocab_size - 1", "hints": ID_HINTS}
        desc.append(f"The first layer is an {type(first).__name__} with {first.num_embeddings} rows; "
                    "its input is assumed to be [B, L].")
        if any(isinstance(m, nn.Conv1d) for m in layers):  # a text CNN: the convolutions slide over L
            params["min_length"] = _min_conv_length(model)
            rules.append({"rule": "L >= min_length", "code": "dim_bound",
                          "hint": "shorter than the receptive field of the Conv1d stack; pad short samples"})
        notes.append(("an upper bound on L (no position table)", HARMLESS))
    elif isinstance(first, nn.Conv1d):
        params["in_channels"] = first.in_channels
        params["min_length"] = _min_conv_length(model)
        fields["inputs"] = {"dtype": ["float"], "shape": ["B", "in_channels", "L"], "finite": True}
        rules.append({"rule": "L >= min_length", "code": "dim_bound",
                      "hint": "shorter than the receptive field of the Conv1d stack "
                      "(kernel_size, dilation, padding, stride); pad short samples"})
        desc.append("The first layer is a Conv1d: channels-first input, at least min_length steps for the conv/pool stack.")
        notes.append(("the value range of inputs (only finiteness is checked)", HARMLESS))
    elif isinstance(first, nn.Conv2d):
        params["in_channels"] = first.in_channels
        fields["inputs"] = {"dtype": ["float"], "shape": ["B", "in_channels", "H", "W"], "finite": True}
        notes.append(("the minimum image size and the value range of inputs", HARMLESS))
    elif isinstance(first, nn.Linear):
        params["in_features"] = first.in_features
        fields["inputs"] = {"dtype": ["float"], "shape": ["B", "in_features"], "finite": True}
        notes.append(("the value range of inputs (only finiteness is checked)", HARMLESS))
    elif first is not None:
        notes.append((f"the input (the first layer is a {type(first).__name__})", CRASH))
    else:
        notes.append(("the input (no layer with weights)", CRASH))

    last = next((m for m in reversed(layers) if isinstance(m, nn.Linear)), None)
    if last is not None and last is not first and last.out_features > 1:
        params["num_classes"] = last.out_features
        fields["labels"] = {"dtype": ["int64"], "shape": ["B"], "min": 0, "max": "num_classes - 1", "optional": True,
                            "hints": {"above_max": "a class index >= the final Linear's out_features (1-based labels?)"}}
        desc.append(f"The final Linear has {last.out_features} outputs: labels are assumed to be one class index per sample.")
    elif last is not None and last is not first:
        notes.append(("labels (the final Linear has one output: regression or binary targets?)", HARMLESS))
    else:
        notes.append(("labels (no final nn.Linear)", HARMLESS))
    if not fields:
        raise SpecError(
            f"spec_for({name}): nothing to derive: the module has no nn.Embedding, nn.Conv1d, nn.Conv2d or nn.Linear; "
            "write the contract in YAML and load it with tc.load_spec"
        )
    return {"name": f"{name}-derived", "description": " ".join(desc), "params": params, "fields": fields, "rules": rules}, notes


def _min_conv_length(model: nn.Module) -> int:
    """The shortest input that leaves every Conv1d/pool output at least one step long."""
    return _min_length([_conv_geometry(m) for m in model.modules() if isinstance(m, (nn.Conv1d, *_POOLS))])


def _min_length(layers: list[tuple[int, int, int | None, int]]) -> int:
    """The shortest input a stack of (kernel, stride, padding, dilation) layers turns into one step.

    Walking backwards from an output of 1: a layer (k, s, p, d) gives floor((n + 2p - d(k-1) - 1) / s) + 1
    steps, so it needs n >= s(r - 1) + d(k - 1) + 1 - 2p to produce r.
    """
    need = 1
    for k, s, p, d in reversed(layers):
        if p is None:  # padding="same" keeps the length
            continue
        need = max(1, s * (need - 1) + d * (k - 1) + 1 - 2 * p)
    return need


def _conv_geometry(m: nn.Module) -> tuple[int, int, int | None, int]:
    def one(v: Any) -> int:
        return int(v[0] if isinstance(v, (tuple, list)) else v)

    k, s = one(m.kernel_size), one(m.stride if m.stride is not None else m.kernel_size)
    d = one(getattr(m, "dilation", 1))
    pad = m.padding
    if pad == "same":
        return k, s, None, d
    return k, s, 0 if pad == "valid" else one(pad), d
