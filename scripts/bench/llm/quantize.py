"""Weight-only quantization of a real causal LM and its serving exports, measured (BENCHMARKS.md).

On SmolLM2-135M (``scripts/fixtures/smollm2.py``) and held-out SpamAssassin e-mails: perplexity
of each variant and how often its greedy next token is the dense model's, for int8 / int4, round
to nearest and GPTQ, groups 64 and 32; the exports' bytes on disk; the compressed-tensors folder
read back by ``transformers``; the GGUF files run by ``llama-cpp-python`` (agreement with the
variant Contrai evaluated, prompt and generation tokens/s, medians of ``--repeats`` runs).

    CONTRAI_LLM=~/.cache/contrai-llm/smollm2-135m \\
        python scripts/bench/llm/quantize.py ../shared/data/spamassassin.jsonl OUT_DIR [--json]

Every figure comes from this one process; the two cores are used by one thing at a time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from contrai.quant.serving import write_compressed_tensors, write_gguf
from contrai.quant.weights import Scheme, each_pass, quantized_in_place

SEQ = 128


def load(data: Path) -> tuple[Path, Any, Any, list[str]]:
    """The model's folder (``CONTRAI_LLM``), its tokenizer, the model in float32 and eval mode, and
    the texts of ``data`` (JSONL); torch seeded and on 2 threads."""
    torch.manual_seed(0)
    torch.set_num_threads(2)
    path = Path(os.environ["CONTRAI_LLM"])
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return path, tok, model, [json.loads(x)["text"] for x in data.read_text().split("\n") if x.strip()]


def blocks(tok: Any, texts: list[str], n: int) -> torch.Tensor:
    """The first SEQ tokens of each e-mail long enough, ``n`` of them."""
    rows = [ids[:SEQ] for ids in (tok(t)["input_ids"] for t in texts) if len(ids) >= SEQ]
    if len(rows) < n:
        raise SystemExit(f"only {len(rows)} e-mails have {SEQ} tokens; {n} wanted")
    return torch.tensor(rows[:n])


@torch.no_grad()
def measure(model: Any, ids: torch.Tensor, dense_top: torch.Tensor | None) -> dict[str, float]:
    """Perplexity on ``ids`` (next-token loss) and agreement of the greedy token with the dense model's."""
    nll, top = 0.0, []
    for row in ids.split(8):
        logits = model(input_ids=row).logits
        nll += torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), row[:, 1:].flatten(),
                                                 reduction="sum").item()
        top.append(logits.argmax(-1))
    tops = torch.cat(top)
    out = {"perplexity": math.exp(nll / (ids.shape[0] * (SEQ - 1)))}
    if dense_top is not None:
        out["agreement_with_dense"] = float((tops == dense_top).float().mean())
    out["_top"] = tops  # type: ignore[assignment]
    return out


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def llama_cpp_run(path: Path, ids: torch.Tensor, want: torch.Tensor, repeats: int) -> dict[str, float]:
    """llama.cpp on the GGUF file: greedy agreement with Contrai's variant; prompt and generation speed."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=2 * SEQ, logits_all=True, verbose=False, n_threads=2)
    try:
        same = 0
        for row, top in zip(ids.tolist(), want):
            llm.reset()
            llm.eval(row)
            same += int((torch.tensor(llm.scores[:len(row)]).argmax(-1) == top).sum())
        prompt, gen = [], []
        for _ in range(repeats):
            llm.reset()
            t = time.perf_counter()
            llm.eval(ids[0].tolist())
            prompt.append(SEQ / (time.perf_counter() - t))
            t = time.perf_counter()
            for _ in range(64):
                token = int(torch.tensor(llm.scores[llm.n_tokens - 1]).argmax())
                llm.eval([token])
            gen.append(64 / (time.perf_counter() - t))
    finally:
        llm.close()
    return {"agreement_with_variant": same / want.numel(), "prompt_tokens_per_s": statistics.median(prompt),
            "generation_tokens_per_s": statistics.median(gen)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path, help="JSONL with a 'text' field (SpamAssassin)")
    ap.add_argument("out", type=Path, help="folder for the exports")
    ap.add_argument("--holdout", type=int, default=32, help="held-out e-mails of 128 tokens")
    ap.add_argument("--calibration", type=int, default=32, help="GPTQ's calibration e-mails")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    path, tok, model, texts = load(args.data)
    # The holdout from the file's end, the calibration from its start: no e-mail in both.
    holdout = blocks(tok, texts[len(texts) // 2:], args.holdout)
    calib = blocks(tok, texts[:len(texts) // 2], args.calibration)

    def calibrate() -> None:
        each_pass(lambda row: model(input_ids=row), calib.split(8))

    rows: dict[str, dict[str, Any]] = {}
    dense = measure(model, holdout, None)
    dense_top = dense.pop("_top")
    rows["dense float32"] = dense | {"bytes": folder_bytes(path / "model.safetensors")}
    args.out.mkdir(parents=True, exist_ok=True)
    for bits, group, method in ((8, 64, "rtn"), (8, 32, "rtn"), (4, 64, "rtn"), (4, 32, "rtn"),
                                (8, 64, "gptq"), (8, 32, "gptq"), (4, 64, "gptq"),
                                (4, 32, "gptq")):
        name = f"int{bits} g{group} {method}"
        t = time.perf_counter()
        with quantized_in_place(model, Scheme(bits, group), calibrate if method == "gptq" else None) as q:
            row: dict[str, Any] = {"quantize_s": time.perf_counter() - t}
            got = measure(model, holdout, dense_top)
            top = got.pop("_top")
            row |= got
            if group == 64 and method == "rtn":
                ct = args.out / f"ct-int{bits}"
                t = time.perf_counter()
                write_compressed_tensors(model, q, ct, tok)
                row |= {"export": "compressed-tensors", "export_s": time.perf_counter() - t, "bytes": folder_bytes(ct)}
                loaded = AutoModelForCausalLM.from_pretrained(ct).eval()
                row["reloaded_agreement_with_variant"] = float((measure(loaded, holdout, None)["_top"] == top).float().mean())
                del loaded
            if group == 32 and method == "gptq":
                gguf = args.out / f"model-q{bits}_0.gguf"
                t = time.perf_counter()
                write_gguf(model, q, tok, gguf)
                row |= {"export": "gguf", "export_s": time.perf_counter() - t, "bytes": folder_bytes(gguf)}
                row |= llama_cpp_run(gguf, holdout, top, args.repeats)
        rows[name] = row
        print(name, {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
