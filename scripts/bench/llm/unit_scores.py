"""Which feed-forward units to prune whole in a pretrained LLM (BENCHMARKS.md): SmolLM2-135M's
loss on held-out e-mails with the same share of every layer's units zeroed, chosen three ways —
by weight norm (the gate and up rows with the down column, Contrai's rule before), by what each
unit adds to ``down_proj``'s output on 32 other e-mails (summed squared input × squared column:
the PyTorch engine's rule now), and at random.

    CONTRAI_LLM=~/.cache/contrai-llm/smollm2-135m \\
        python scripts/bench/llm/unit_scores.py ../shared/data/spamassassin.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

SEQ = 64


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path, help="JSONL with a 'text' field (SpamAssassin)")
    args = ap.parse_args()
    torch.manual_seed(0)
    path = Path(os.environ["CONTRAI_LLM"])
    tok = AutoTokenizer.from_pretrained(path)
    texts = [json.loads(x)["text"] for x in args.data.read_text().split("\n") if x.strip()][:200]
    rows = [r for r in (tok(t)["input_ids"][:SEQ] for t in texts) if len(r) == SEQ]
    calib, held = torch.tensor(rows[:32]), torch.tensor(rows[64:80])
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    layers = model.model.layers
    units = layers[0].mlp.up_proj.weight.shape[0]

    def loss() -> float:
        with torch.no_grad():
            return float(model(input_ids=held, labels=held).loss)

    squares: dict[int, torch.Tensor] = {}

    def hook(i: int) -> Callable[..., None]:
        def add(_m: Any, a: tuple[torch.Tensor, ...]) -> None:
            squares[i] = squares.get(i, 0) + a[0].double().pow(2).sum((0, 1))
        return add

    hooks = [layer.mlp.down_proj.register_forward_pre_hook(hook(i)) for i, layer in enumerate(layers)]
    with torch.no_grad():
        model(input_ids=calib)
    for h in hooks:
        h.remove()
    saved = {n: p.detach().clone() for n, p in model.named_parameters()}
    gen = torch.Generator().manual_seed(0)
    scores: dict[str, Callable[[int, Any], torch.Tensor]] = {
        "weight norm": lambda i, m: (m.gate_proj.weight.pow(2).sum(1) + m.up_proj.weight.pow(2).sum(1)
                                     + m.down_proj.weight.pow(2).sum(0)),
        "output": lambda i, m: squares[i] * m.down_proj.weight.double().pow(2).sum(0),
        "random": lambda i, m: torch.rand(units, generator=gen),
    }
    print(f"dense: loss {loss():.3f}")
    for share in (0.1, 0.25, 0.5):
        for name, score in scores.items():
            with torch.no_grad():
                for i, layer in enumerate(layers):
                    gone = score(i, layer.mlp).argsort()[:int(share * units)]
                    layer.mlp.gate_proj.weight[gone] = 0
                    layer.mlp.up_proj.weight[gone] = 0
                    layer.mlp.down_proj.weight[:, gone] = 0
            print(f"{share:.0%} of units by {name}: loss {loss():.3f}", flush=True)
            with torch.no_grad():
                for n, p in model.named_parameters():
                    p.copy_(saved[n])


if __name__ == "__main__":
    main()
