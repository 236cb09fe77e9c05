"""Refine's quantized variants of the served model (``refine.quantize``): each made once — int8
rounded to nearest, int4 by GPTQ — and measured on validation in place, its codes put in place
again for the holdout, its files written when its verdict keeps it (compressed-tensors or the
codes' own file, and GGUF where the model fits one), and its lines in the model card.

In place means on the model itself: each layer's dequantized codes in its weights, the dense ones
spilled to disk and put back after (``weightquant.quantized_in_place``) — never a second copy of
the model, on any device.
"""

from __future__ import annotations

import importlib.util
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from contrai.engine.card import Variant, disk_bytes, llama_cpp_latency_ms, nan0
from contrai.protocol import Quantize
from contrai.quant.serving import (GGUF_BLOCK, GGUF_TYPES, gguf_file, gguf_refusal, save_codes, write_compressed_tensors,
                                   write_gguf)
from contrai.quant.weights import (Calibrate, Quantized, QuantizeError, Reduce, Scheme, fitting_group, quantized_bytes,
                                   quantized_in_place)

# The code width of each variant ``refine.quantize`` may list.
BITS: dict[Quantize, int] = {"int8": 8, "int4": 4}
# The variants GPTQ makes: at int4 it leaves SmolLM2-135M 12 % less perplexity than rounding to
# nearest (BENCHMARKS.md); int8's rounding costs under 0.1 perplexity, not worth a calibration.
GPTQ: frozenset[Quantize] = frozenset({"int4"})

# A loss and an accuracy of the model as it stands.
Evaluate = Callable[[], tuple[float, float]]


@dataclass
class Made:
    """A variant as refine made it: its scheme, its codes (in a folder of their own until the
    holdout has read them), what validation measured (its ``Quantized`` observation), its holdout
    loss and accuracy once read, and its GGUF file once written (or why none was)."""

    scheme: Scheme
    codes: Quantized
    folder: tempfile.TemporaryDirectory[str]
    figures: dict[str, Any]
    holdout: tuple[float, float] = (math.nan, math.nan)
    gguf: str | None = None
    no_gguf: str = ""


class Variants:
    """The variants of one run: made on ``calibrate``'s samples (``samples`` of them, for GPTQ),
    their Hessians summed over ranks by ``reduce`` (every rank must make the same codes), their
    files under ``run_dir``."""

    def __init__(self, run_dir: Path, calibrate: Calibrate, samples: int, reduce: Reduce) -> None:
        self.run_dir, self.calibrate, self.samples, self.reduce = run_dir, calibrate, samples, reduce
        self.made: dict[Quantize, Made] = {}

    def make(self, variant: Quantize, block: int | None, model: torch.nn.Module, evaluate: Evaluate) -> dict[str, Any]:
        """The variant's codes of every linear layer but ``lm_head``, one symmetric scale a group of
        input weights — ``block``, else 32 where GGUF can hold the codes as they are, else the
        largest group up to 128 that divides every layer —, evaluated in place: its ``Quantized``
        observation, or ``Declined`` with the reason."""
        gptq = variant in GPTQ
        folder = tempfile.TemporaryDirectory(prefix="contrai-codes-")
        try:
            scheme = Scheme(BITS[variant], block or (GGUF_BLOCK if gguf_refusal(model) is None else fitting_group(model)))
            with quantized_in_place(model, scheme, self.calibrate if gptq else None, into=Path(folder.name),
                                    reduce=self.reduce) as codes:
                loss, acc = evaluate()
        except QuantizeError as e:
            folder.cleanup()
            return {"Declined": {"what": f"quantize the final model to {variant}", "instead": f"kept dense: {e}"}}
        how = f"GPTQ calibrated on {self.samples} training samples" if gptq else "round to nearest"
        figures = {"val_loss": loss, "val_accuracy": nan0(acc), "bytes": quantized_bytes(model, scheme),
                   "dense_bytes": sum(t.numel() * t.element_size() for t in model.state_dict().values()),
                   "scheme": f"weight-only {variant}, {how}, one symmetric scale a group of {scheme.group} input "
                             "weights, every nn.Linear but lm_head",
                   "file": file_for(model, variant)}
        self.made[variant] = Made(scheme, codes, folder, figures)
        return {"Quantized": figures}

    def on_holdout(self, verdict: dict[str, Any], model: torch.nn.Module, evaluate: Evaluate, tokenizer: Any,
                   write: bool) -> dict[str, Any]:
        """The variant's codes put in place again and evaluated on the holdout (``evaluate``), its
        files written when ``write`` and its verdict keeps it; its codes dropped after."""
        made = self.made[verdict["variant"]]
        with quantized_in_place(model, made.scheme, again=made.codes) as q:
            loss, acc = made.holdout = evaluate()
            if verdict["kept"] and write:
                self.write(model, q, made, tokenizer)
        made.folder.cleanup()
        return {"variant": verdict["variant"], "loss": nan0(loss), "accuracy": nan0(acc)}

    def write(self, model: torch.nn.Module, q: Quantized, made: Made, tokenizer: Any) -> None:
        """A kept variant's files: its compressed-tensors folder (or its codes' file), and the GGUF
        file llama.cpp runs when the model and the codes fit one (else why not, for the card)."""
        out = self.run_dir / made.figures["file"]
        if out.suffix == ".pt":
            save_codes(model, q, out)
        else:
            write_compressed_tensors(model, q, out, tokenizer)
        made.no_gguf = gguf_refusal(model, made.scheme) or ("" if tokenizer is not None else
                                                            "the job holds no tokenizer to write into it")
        if not made.no_gguf:
            made.gguf = f"final/{gguf_file(made.scheme)}"
            write_gguf(model, q, tokenizer, self.run_dir / made.gguf)

    def card_lines(self, verdict: dict[str, Any], described: tuple[int, float],
                   rows: list[list[int]] | None) -> list[Variant]:
        """The variant's lines in the model card: the variant — no latency, PyTorch runs it
        dequantized — and its GGUF file, timed by llama.cpp on the card's batch (``rows``)."""
        variant, kept = verdict["variant"], bool(verdict["kept"])
        made = self.made[variant]
        drop = verdict["drop_points"]
        cost = (f"{drop:.2f} validation points lost" if verdict["measure"] == "accuracy"
                else f"validation perplexity {drop:+.2f} %")
        note = f"{made.figures['scheme']}; " + ("kept" if kept else f"refused: {cost}")
        note += "; no latency: PyTorch runs it dequantized"
        if kept and made.no_gguf:
            note += f"; no GGUF: {made.no_gguf}"
        hl, ha = made.holdout
        file = made.figures["file"]
        lines = [Variant(variant, file if kept else None, *described,
                         disk_bytes(self.run_dir / file) if kept else made.figures["bytes"],
                         made.figures["val_accuracy"], nan0(ha), nan0(hl), None, note)]
        if kept and made.gguf:
            path = self.run_dir / made.gguf
            timed, why = llama_cpp_latency_ms(path, rows)
            lines.append(Variant(f"{variant} GGUF", made.gguf, *described, disk_bytes(path),
                                 made.figures["val_accuracy"], nan0(ha), nan0(hl), timed,
                                 f"GGUF {GGUF_TYPES[made.scheme.bits]}: the variant's codes as they are; " + why))
        return lines


def file_for(model: torch.nn.Module, variant: Quantize) -> str:
    """Where a variant goes when kept: a Hugging Face model's compressed-tensors folder
    (``from_pretrained`` reads it with the ``compressed-tensors`` package; vLLM serves it) when
    that package is installed, else the codes in one ``torch.save`` file."""
    servable = hasattr(model, "save_pretrained") and importlib.util.find_spec("compressed_tensors") is not None
    return f"final/{variant}" if servable else f"final/model-{variant}.pt"
