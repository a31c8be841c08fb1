"""Build the two LayoutLMv3 batches used in the README: one valid, one holding real mistakes.

    python examples/make_layoutlmv3_batches.py          # writes examples/layoutlmv3_{good,bad}_batch.pt
    tritoncheck check layoutlmv3-token-classification examples/layoutlmv3_bad_batch.pt -c examples/layoutlmv3_config.json

The mistakes are the ones found in real training scripts (see docs/errors.md):
  sample 0: a label -1 where -100 (ignore) was meant, and a label equal to num_labels
  sample 1: boxes in page pixels instead of the 0-1000 grid
  sample 2: (x, y, width, height) boxes, so x1 < x0; and a NaN pixel
  sample 3: an attention mask that attends to nothing (a warning: the model runs on it)

The good batch runs the model built from layoutlmv3_config.json (fp32: pixel_values are float32).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

HERE = Path(__file__).parent
B, L = 4, 32


def good_batch(config: dict) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, config["vocab_size"], (B, L), generator=g)
    input_ids[:, 0] = 0  # <s>
    input_ids[:, -4:] = config["pad_token_id"]  # padding at the end of every row
    attention_mask = (input_ids != config["pad_token_id"]).long()
    x0 = torch.randint(0, 900, (B, L), generator=g)
    y0 = torch.randint(0, 900, (B, L), generator=g)
    w = torch.randint(0, 100, (B, L), generator=g)
    h = torch.randint(0, 100, (B, L), generator=g)
    bbox = torch.stack([x0, y0, x0 + w, y0 + h], dim=-1)
    bbox[attention_mask == 0] = 0
    labels = torch.randint(0, config["num_labels"], (B, L), generator=g)
    labels[attention_mask == 0] = -100
    labels[:, 0] = -100
    size = config["input_size"]
    # the model's compute dtype: LayoutLMv3's patch embedding does not cast pixel_values, so fp16 pixels crash an fp32 model
    dtype = getattr(torch, config.get("dtype") or config.get("torch_dtype") or "float32")
    pixel_values = torch.randn(B, config["num_channels"], size, size, generator=g).to(dtype)
    return {"input_ids": input_ids, "bbox": bbox, "attention_mask": attention_mask, "labels": labels,
            "pixel_values": pixel_values}


def bad_batch(config: dict) -> dict[str, torch.Tensor]:
    batch = {k: v.clone() for k, v in good_batch(config).items()}
    batch["labels"][0, 3] = -1  # -1 where -100 was meant
    batch["labels"][0, 5] = config["num_labels"]  # a label id == num_labels
    batch["bbox"][1, 1:10] = torch.tensor([120, 310, 1650, 345])  # pixels on a 1700 x 2200 page
    batch["bbox"][2, 2] = torch.tensor([400, 500, 80, 20])  # (x, y, w, h): x1 < x0, y1 < y0
    batch["pixel_values"][2, 0, 10, 10] = float("nan")  # a failed decode / zero-variance normalisation
    batch["attention_mask"][3] = 0  # a row that attends to nothing
    return batch


def main() -> None:
    config = json.loads((HERE / "layoutlmv3_config.json").read_text())
    torch.save(good_batch(config), HERE / "layoutlmv3_good_batch.pt")
    torch.save(bad_batch(config), HERE / "layoutlmv3_bad_batch.pt")


if __name__ == "__main__":
    main()
