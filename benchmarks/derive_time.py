"""How long `tc.spec_for` takes: a derivation from scratch (trace, probes, self-check) and a cached one.

    python benchmarks/derive_time.py                      # CSV to stdout
    python benchmarks/derive_time.py --out benchmarks/results/derive-time.csv

Targets (issue 19): at most 2 s of CPU for a tiny model from scratch, at most 1 ms cached. One row
per model: `cold_s` is the median of `--repeat` derivations with the cache cleared (each traces a
copy of the model), `cached_ms` the median of 200 calls that hit the cache (the key is computed
from the class, the config and the parameter shapes on every call), `forwards` how many forwards
the derivation ran. CPU only; `cold_s` is process CPU time (every torch thread counted), so a loaded
machine inflates it less than wall time would; `nproc`, the 1-minute load average and the torch thread
count are in the CSV. The latest run is in benchmarks/results/derive-time.csv.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
import warnings

import torch
from torch import nn

import tritoncheck as tc
from tritoncheck.derive import cache
TINY = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 20}


def models() -> dict[str, nn.Module]:
    import transformers as T  # noqa: N812

    text = {"vocab_size": 100, "max_position_embeddings": 32, **TINY}
    return {
        "BertForSequenceClassification": T.BertForSequenceClassification(T.BertConfig(**text, num_labels=3)),
        "LlamaForCausalLM": T.LlamaForCausalLM(T.LlamaConfig(**text, num_key_value_heads=2)),
        "T5ForConditionalGeneration": T.T5ForConditionalGeneration(T.T5Config(
            vocab_size=100, d_model=16, d_kv=8, d_ff=20, num_layers=1, num_heads=2, decoder_start_token_id=0)),
        "ViTForImageClassification": T.ViTForImageClassification(T.ViTConfig(image_size=8, patch_size=4, **TINY)),
        "Wav2Vec2ForCTC": T.Wav2Vec2ForCTC(T.Wav2Vec2Config(
            vocab_size=12, conv_dim=(8, 8), conv_kernel=(4, 3), conv_stride=(3, 2), num_conv_pos_embeddings=3,
            num_conv_pos_embedding_groups=1, **TINY)),
        "conv1d-classifier (nn.Sequential)": nn.Sequential(
            nn.Conv1d(3, 8, 5), nn.ReLU(), nn.MaxPool1d(2), nn.Conv1d(8, 8, 3), nn.AdaptiveAvgPool1d(1), nn.Flatten(),
            nn.Linear(8, 4)),
        "small CNN (nn.Sequential)": nn.Sequential(
            nn.Conv2d(3, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(16, 10)),
    }


def measure(model: nn.Module, repeat: int) -> dict[str, object]:
    model.eval()
    cold = []
    for _ in range(repeat):
        cache.clear()
        start = time.process_time()
        spec = tc.spec_for(model)
        cold.append(time.process_time() - start)
    hits = []
    for _ in range(200):
        start = time.perf_counter()
        tc.spec_for(model)
        hits.append(time.perf_counter() - start)
    forwards = spec.derivation.split("(")[1].split(" forwards")[0] if "forwards)" in spec.derivation else ""
    return {"cold_s": round(statistics.median(cold), 4), "cached_ms": round(statistics.median(hits) * 1e3, 4),
            "forwards": forwards, "traced": not spec.name.endswith("(derived by fallback)")}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the CSV here instead of stdout")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, model in models().items():
            rows.append({"model": name, **measure(model, args.repeat), "nproc": os.cpu_count(),
                         "load_1m": round(os.getloadavg()[0], 2),
                         "torch_threads": torch.get_num_threads(),
                         "torch": torch.__version__})
    out = open(args.out, "w", newline="") if args.out else sys.stdout  # noqa: SIM115 - closed below when a file
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    if args.out:
        out.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
