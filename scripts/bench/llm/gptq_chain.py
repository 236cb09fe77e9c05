"""GPTQ's calibration carried from layer to layer against whole passes of the model (BENCHMARKS.md).

On SmolLM2-135M (``scripts/fixtures/smollm2.py``, 30 decoder layers) and 32 SpamAssassin e-mails
of 128 tokens: the seconds ``quantized_in_place`` takes to make int4 g32 GPTQ codes (a) carrying
each layer's calibration inputs from the layer before (``weightquant.Chain``: the model runs once)
and (b) running the whole model up to each layer for its inputs (the way before the chain, forced
by disabling ``Chain.start``); the codes of both are checked equal. Medians of ``--repeats`` runs,
the two ways alternating, in one process.

    CONTRAI_LLM=~/.cache/contrai-llm/smollm2-135m \\
        python scripts/bench/llm/gptq_chain.py ../shared/data/spamassassin.jsonl [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from contrai import weightquant
from contrai.quant.weights import Scheme, each_pass, quantized_in_place
from quantize import blocks, load  # this folder's quantize.py (a script's folder is on its path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path, help="a JSONL file with a text field (spamassassin.jsonl)")
    ap.add_argument("--calibration", type=int, default=32, help="calibration e-mails")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    _, tok, model, texts = load(args.data)
    calib = blocks(tok, texts[:len(texts) // 2], args.calibration)

    def calibrate() -> None:
        each_pass(lambda row: model(input_ids=row), calib.split(8))

    chain_start = weightquant.Chain.start
    times: dict[str, list[float]] = {"chain": [], "whole passes": []}
    codes: dict[str, dict[str, weightquant.Codes]] = {}
    for _ in range(args.repeats):
        for way in times:
            setattr(weightquant.Chain, "start", chain_start if way == "chain" else classmethod(lambda *_: None))
            t = time.perf_counter()
            with quantized_in_place(model, Scheme(4, 32), calibrate) as q:
                times[way].append(time.perf_counter() - t)
                codes[way] = {n: q.codes(n) for n in q.files}
    setattr(weightquant.Chain, "start", chain_start)
    a, b = codes["chain"], codes["whole passes"]
    same = a.keys() == b.keys() and all(torch.equal(a[n].codes, b[n].codes) and torch.equal(a[n].scale, b[n].scale)
                                        for n in a)
    med = {way: statistics.median(t) for way, t in times.items()}
    print(json.dumps({"seconds": med, "runs": times, "speedup": med["whole passes"] / med["chain"],
                      "codes_equal": same, "layers": len(a)}, indent=2))


if __name__ == "__main__":
    main()
