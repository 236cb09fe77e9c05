"""One LoRA training step of SmolLM2-135M (r 8 on q/v, 4 × 64 tokens) on the CPU, in fp32 and under
bf16 autocast (what TRL's SFTConfig turns on by default), median of REPEATS steps each after one
warm-up step: the figure behind the pre-flight finding ``bf16_not_native``.

    python scripts/bench/llm/bf16_on_cpu.py [MODEL_DIR]   # default ~/.cache/contrai-llm/smollm2-135m
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import peft
import torch
from transformers import AutoModelForCausalLM

REPEATS = 3


def step_seconds(model: torch.nn.Module, ids: torch.Tensor, bf16: bool) -> float:
    """Seconds of one forward and backward."""
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return time.perf_counter() - start


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/contrai-llm/smollm2-135m")
    torch.manual_seed(0)
    model = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
                                peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                lora_dropout=0.0, task_type="CAUSAL_LM"))
    ids = torch.randint(0, 1000, (4, 64))
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, oneDNN bf16 native: {native}")
    medians = {}
    for bf16 in (False, True):
        step_seconds(model, ids, bf16)
        times = [step_seconds(model, ids, bf16) for _ in range(REPEATS)]
        medians[bf16] = statistics.median(times)
        print(f"{'bf16 autocast' if bf16 else 'fp32':>13}: median {medians[bf16]:.2f} s of {[round(t, 2) for t in times]}")
    print(f"bf16 / fp32: {medians[True] / medians[False]:.1f}x")


if __name__ == "__main__":
    main()
