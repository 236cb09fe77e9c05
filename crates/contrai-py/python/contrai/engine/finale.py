"""The end of a run (export, quantized variants, holdout, card, eval.json), as the Burn engine's ``finale.rs``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch

from contrai.engine.adapters import merged, unloaded
from contrai.engine.batches import batch_size, token_rows
from contrai.engine.card import Variant, card, describe, disk_bytes, dtype_name, latency_ms, nan0
from contrai.engine.compact import Cut, cut_in_place, units_removed
from contrai.engine.job import Job
from contrai.engine.masks import Masks
from contrai.engine.model import class_names, evaluating, first_device, unwrap
from contrai.integrations.trackers import Trackers, figures
from contrai.quant.variants import Variants
from contrai.rows import words_json

if TYPE_CHECKING:
    from contrai.engine.measure import Evaluation


class Finishing:
    """The :class:`~contrai.engine.Engine`'s end of a run: what the conductor asks for once
    training is over. The engine's attributes and methods it uses are declared here."""

    job: Job
    run_dir: Path
    classes: int
    leader: bool
    writer: Any
    masks: Masks
    phase: str
    whole: set[str]
    recomputing: bool | None
    finished: dict[str, Any] | None
    final: torch.nn.Module | None
    final_val: tuple[float, float]
    exported: tuple[int, float]
    export_note: str
    pruned: dict[str, float] | None
    variants: Variants
    holdout_eval: tuple[float, float, int]
    card: dict[str, Any] | None
    trackers: Trackers
    apply_masks: Callable[[], None]
    substitute: Callable[[str, str, dict[str, Any]], None]
    evaluation: Evaluation

    def export(self, _: Any) -> dict[str, Any]:
        """The final weights (masks applied) in ``final/``, evaluated on validation: a LoRA job's
        merged model without PEFT's layers (``adapters.unloaded``), a Hugging Face model's pruned
        feed-forward units cut out of it in place (``cut_units``) — the model quantized and served
        from here on."""
        self.apply_masks()
        self.export_note = "LoRA adapters merged" if merged(unwrap(self.job.model)) else ""
        model = self.final = unloaded(unwrap(self.job.model))
        self.pruned = self.masks.by_module()
        self.cut_units(model)
        self.exported = describe(model.state_dict())
        fin = self.run_dir / "final"
        if self.leader:
            fin.mkdir(parents=True, exist_ok=True)
            save = getattr(model, "save_pretrained", None)
            if save is not None:
                tok = self.job.tokenizer()
                if hasattr(tok, "save_pretrained"):
                    tok.save_pretrained(fin)
                save(fin)
            else:
                torch.save(model.state_dict(), fin / "model.pt")
        loss, acc, _ = self.evaluation(self.job.model, self.job.eval_batches())
        self.final_val = (loss, acc)
        return {"Exported": {"val_loss": loss, "val_accuracy": nan0(acc)}}

    def cut_units(self, model: torch.nn.Module) -> None:
        """A Hugging Face model's pruned feed-forward units cut out of it in place, on every rank,
        as far as one ``intermediate_size`` allows (``compact``); what stays as zeros recorded."""
        if not hasattr(model, "save_pretrained"):
            return
        if "heads" in self.whole:
            self.substitute("remove the pruned attention heads from the exported model",
                            "transformers 5 prunes no heads (no config.pruned_heads): they stay as zeros", {})
        cut = units_removed(model, self.masks)
        if not isinstance(cut, Cut):
            if cut is not None:
                self.substitute("remove the pruned feed-forward units from the exported model", cut, {})
            return
        cut_in_place(model, cut, self.masks)
        self.export_note = "; ".join(x for x in (self.export_note, f"pruned feed-forward units cut out "
                                                 f"(intermediate_size {cut.before} → {cut.after})") if x)
        if self.leader:
            print(f"[contrai] pruned feed-forward units cut out, intermediate_size {cut.before} -> {cut.after}")
        if cut.left:
            self.substitute("remove the pruned feed-forward units from the exported model",
                            f"{cut.before - cut.after} a layer cut out (the fewest any layer lost); {cut.left} more "
                            "stay as zeros: a Hugging Face config holds one intermediate_size",
                            {"intermediate_size": cut.after, "units_left_as_zeros": cut.left})

    def pruned_share(self) -> dict[str, float]:
        """Each pruned module's share of zero weights as pruning left it — before any cut took
        units out (the cut model's masks cover what remains)."""
        return self.pruned if self.pruned is not None else self.masks.by_module()

    def distil(self, _: Any) -> dict[str, Any]:
        """Declined: the PyTorch engine does not distil; the fine-tuned model is the final one."""
        return {"Declined": {"what": "distil into the recipe's student",
                             "instead": "the PyTorch engine does not distil yet; the fine-tuned model is the final one"}}

    def quantize(self, p: dict[str, Any]) -> dict[str, Any]:
        """A weight-only variant of the final model (``p["to"]``: int8 or int4), made and evaluated
        on validation in place (``contrai.quant.variants``)."""
        return self.variants.make(p["to"], p["block"], self.served(),
                                  lambda: self.evaluation(self.job.model, self.job.eval_batches())[:2])

    def served(self) -> torch.nn.Module:
        """The exported model (``export``), else the job's."""
        return self.final if self.final is not None else unwrap(self.job.model)

    def read_holdout(self, p: dict[str, Any]) -> dict[str, Any]:
        """The holdout, read once: the final model and each quantized variant (its codes put in
        place again, as validation saw them) evaluated on it; a variant's files written when its
        verdict keeps it."""
        batches = self.job.holdout_batches()
        loss, acc, n = self.evaluation(self.job.model, batches, sharded=False)
        quantized = [self.variants.on_holdout(
            verdict, self.served(), lambda: self.evaluation(self.job.model, self.job.holdout_batches(), sharded=False)[:2],
            self.job.tokenizer(), self.leader) for verdict in p["quantized"]]
        if batches is None:
            self.substitute("read the holdout", "no holdout was given to the callback (holdout_dataset=)", {})
        self.holdout_eval = (loss, acc, n)
        if self.leader:
            self.write_card(p["quantized"])
        return {"HoldoutRead": {"loss": nan0(loss), "accuracy": nan0(acc), "samples": n, "quantized": quantized}}

    def write_card(self, verdicts: list[dict[str, Any]]) -> None:
        """``final/model-card.json`` (``contrai.engine.card``): the exported model, and each quantized
        variant refine made (its file when kept; its bytes as counted when refused), with its GGUF
        file and llama.cpp's latency on the same batch when one was written."""
        model = self.served()
        batch = next(iter(self.job.eval_batches()))
        with evaluating(model):
            latency = latency_ms(lambda: self.job.logits(self.job.model, batch))
        loss, acc, _ = self.holdout_eval
        timed = f"latency on {first_device(model).type}"
        variants = [Variant(dtype_name(model), "final", *self.exported,
                            disk_bytes(self.run_dir / "final"), nan0(self.final_val[1]), nan0(acc), nan0(loss),
                            latency, "; ".join(x for x in (self.export_note, timed) if x))]
        # The quantized variants hold the exported model's shape (cut in place): its figures.
        for verdict in verdicts:
            variants += self.variants.card_lines(verdict, self.exported, token_rows(batch))
        self.card = card(model, class_names(model, self.classes), self.pruned_share(), bool(self.recomputing),
                         batch_size(batch) or 0, variants)
        self.writer.write("model_card", words_json(self.card))

    def finish(self, summary: dict[str, Any]) -> None:
        """``final/eval.json``, written last: the run is over; its figures and the card's into the
        job's trackers' summaries."""
        self.masks.apply(unwrap(self.job.model))
        self.finished = summary
        if not self.leader:
            return
        self.writer.sync()
        loss, acc, n = self.holdout_eval
        ev = {"step": summary["step"], "classes": class_names(unwrap(self.job.model), self.classes),
              "holdout_samples": n, "holdout_loss": loss, "holdout_accuracy": nan0(acc),
              "val_loss": self.final_val[0], "val_accuracy": nan0(self.final_val[1]),
              "best": summary["best"], "holdout_reads": 1, "main_end": summary["main_end"],
              "planned_steps": summary["planned_steps"], "sparsity": self.pruned_share(),
              "int8": summary["int8"], "student": None}
        if summary.get("int4") is not None:
            ev["int4"] = summary["int4"]
        self.writer.write("eval", words_json(ev))
        self.trackers.summary(*figures(ev, self.card, self.phase, self.run_dir / "decisions.jsonl"))
