"""PyTorch's side of the MiniLM-L6 fine-tuning step: Hugging Face's BertForSequenceClassification
loaded from the unzipped all-MiniLM-L6-v2 directory, 2 classes, train mode (dropout 0.1 as its
config says), AdamW, global-norm clipping at 1.0, random tokens (every position real), CPU.

    python minilm_step.py --model DIR [--batch 32 --seq 128 --steps 20 --warmup 3 --threads 2]

Prints one RESULT line: the median step and the median of each phase, in milliseconds.
"""

import argparse
import statistics
import time

import torch
from transformers import BertForSequenceClassification


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(a.model, num_labels=2)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    vocab = model.config.vocab_size
    phases = {"step": [], "forward": [], "backward": [], "optimizer": []}
    for step in range(a.warmup + a.steps):
        ids = torch.randint(2, vocab, (a.batch, a.seq))
        labels = torch.randint(0, 2, (a.batch,))
        mask = torch.ones_like(ids)
        t0 = time.perf_counter()
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        if step >= a.warmup:
            for k, v in (("step", t3 - t0), ("forward", t1 - t0), ("backward", t2 - t1), ("optimizer", t3 - t2)):
                phases[k].append(v * 1e3)
    med = {k: statistics.median(v) for k, v in phases.items()}
    print(
        "RESULT torch minilm_step median_ms={step:.1f} forward_ms={forward:.1f} "
        "backward_ms={backward:.1f} optimizer_ms={optimizer:.1f}".format(**med)
    )


if __name__ == "__main__":
    main()
