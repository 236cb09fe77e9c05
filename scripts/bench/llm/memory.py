"""Peak host memory of int8 quantization and the serving exports on a 1 B-parameter Llama (BENCHMARKS.md).

A Llama built from a config (random weights: memory only — 16 layers, hidden 2048, SwiGLU 8192,
32 heads with 8 key/value heads, SmolLM2's 49,152-token vocabulary, float32), in a fresh process
per way, each reporting its peak resident set while it works (``VmHWM``, reset once the model is
built) against the model's bytes:

- ``contrai``: ``quantized_in_place`` (int8, group 128, round to nearest), then the
  compressed-tensors export and the GGUF Q8_0 export (group 32) — what the PyTorch engine and
  ``contrai.quant.serving`` do;
- ``torch``: the engine's former int8 — a CPU copy of the model, then PyTorch's
  ``quantize_dynamic`` of its linear layers.

    CONTRAI_LLM=~/.cache/contrai-llm/smollm2-135m python scripts/bench/llm/memory.py OUT_DIR
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

GIB = 1 << 30


def rss() -> int:
    """Bytes resident now (Linux ``/proc``)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def peak() -> int:
    """The peak resident set since the last :func:`reset_peak` (``VmHWM``)."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def reset_peak() -> None:
    """Starts the peak over from what is resident now (Linux: ``5`` to ``clear_refs``), so that
    building the model does not count."""
    Path("/proc/self/clear_refs").write_text("5")


def build() -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=2048,
                      tie_word_embeddings=False)
    return LlamaForCausalLM(cfg).eval()


def child(way: str, out: Path) -> dict[str, Any]:
    import torch
    from transformers import AutoTokenizer

    model = build()
    params = sum(p.numel() for p in model.parameters())
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    before = rss()
    stages: dict[str, int] = {}
    reset_peak()
    t = time.perf_counter()
    if way == "contrai":
        from contrai.quant.serving import write_compressed_tensors, write_gguf
        from contrai.quant.weights import Scheme, quantized_in_place

        tok = AutoTokenizer.from_pretrained(os.environ["CONTRAI_LLM"])
        with quantized_in_place(model, Scheme(8, 128), spill=out) as q:
            stages["quantize"] = peak()
            write_compressed_tensors(model, q, out / "ct-int8", tok)
            stages["compressed-tensors"] = peak()
        reset_peak()
        with quantized_in_place(model, Scheme(8, 32), spill=out) as q:
            write_gguf(model, q, tok, out / "model-q8_0.gguf")
            stages["gguf"] = peak()
    else:
        dense = copy.deepcopy(model).cpu()
        int8 = torch.ao.quantization.quantize_dynamic(dense, {torch.nn.Linear}, dtype=torch.qint8)
        del int8, dense
    return {"way": way, "parameters": params, "model_bytes": model_bytes, "rss_after_build": before,
            "peak": max([peak(), *stages.values()]), "stages": stages, "seconds": time.perf_counter() - t,
            "peak_over_model": (max([peak(), *stages.values()]) - (before - model_bytes)) / model_bytes}


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], Path(sys.argv[3]))))
        return
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for way in ("contrai", "torch"):
        run = subprocess.run([sys.executable, __file__, "--child", way, str(out)], check=True,
                             capture_output=True, text=True)
        r = json.loads(run.stdout.strip().splitlines()[-1])
        print(f"{way:8} {r['parameters']:,} parameters, model {r['model_bytes'] / GIB:.2f} GiB; resident after "
              f"building {r['rss_after_build'] / GIB:.2f} GiB, peak {r['peak'] / GIB:.2f} GiB "
              f"(peak less the process's own overhead = {r['peak_over_model']:.2f} x the model); {r['seconds']:.0f} s",
              flush=True)
        for stage, bytes_ in r["stages"].items():
            print(f"         peak through {stage}: {bytes_ / GIB:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
