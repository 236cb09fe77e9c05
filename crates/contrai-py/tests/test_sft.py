"""The seed article's job end to end: SmolLM2-135M (a real pretrained causal LM,
``scripts/fixtures/smollm2.py``) fine-tuned with LoRA (r 8, q/v) under TRL's ``SFTTrainer`` with
``ContraiCallback`` on real e-mails, through validate, main, contraction and refine. Contraction
merges the adapters and cuts whole feed-forward units (gate and up rows with the down
projection's columns); the exports are read back by their consumers — ``transformers`` for the
safetensors and compressed-tensors folders, ``llama-cpp-python`` for GGUF — and give the greedy
next token of the PyTorch model they were written from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import decisions, email_rows, emails, real_llm, require

require("torch", "transformers", "accelerate")
peft = require("peft")
trl = require("trl")

import torch
from trl import SFTTrainer  # type: ignore[attr-defined]  # (trl re-exports lazily)

from contrai.engine import planned_steps
from contrai.integrations.hf import ContraiCallback, last_checkpoint
from contrai.quant.weights import Scheme, quantized_in_place

RECIPE = """
[run]
eval_every = 4
checkpoint_every = 4
phases = [{phases}"main", "contract", "refine"]
[validate]
batch = 4
steps = 15
[main]
steps = 16
batch = 4
lr = 1e-3
warmup = 0.0
[contract]
budget = 0.3
batch = 4
eval_every = 2
prune_every = 2
prune_span = 0.5
stable_checkpoints = 1000
patience = {patience}
tolerance = 0.0
divergence = 1.0
drop_noisiest = 0.1
prune_units = true
prune = [{{ params = "*.mlp.up_proj.weight", init = 0.1, final = {final} }}]
[refine]
budget = 0.1
quantize = {quantize}
max_drop = {max_drop}
[refine.distill]
enabled = false
"""

LENGTH = 64


def token_rows(tok: Any, texts: list[str]) -> list[dict[str, list[int]]]:
    """The texts as SFTTrainer takes them tokenized: ``LENGTH`` tokens each (longer cut, shorter left out)."""
    rows = [tok(t)["input_ids"][:LENGTH] for t in texts]
    return [{"input_ids": r} for r in rows if len(r) == LENGTH]


class Crashed(Exception):
    """The job's process dies (a machine lost mid-step)."""


class NanOnce(SFTTrainer):
    """An SFTTrainer whose loss is NaN at optimizer step ``at``, once (an fp16-style overflow),
    and that dies at step ``crash_at``."""

    def __init__(self, *a: Any, at: int | None, crash_at: int | None = None, **k: Any) -> None:
        super().__init__(*a, **k)
        self.at, self.done, self.crash_at = at, False, crash_at

    def compute_loss(self, model: Any, inputs: Any, *a: Any, **k: Any) -> Any:
        if self.state.global_step + 1 == self.crash_at:
            raise Crashed(f"step {self.crash_at}")
        loss = super().compute_loss(model, inputs, *a, **k)  # type: ignore[no-untyped-call]
        if self.at is not None and self.state.global_step + 1 == self.at and not self.done:
            self.done = True
            return loss * float("nan")
        return loss


def prompt_rows() -> list[dict[str, str]]:
    """Prompt-completion rows of real e-mails, spam and ham in turn: the subject and the text's
    opening asked about, the completion the answer (``" yes"``: spam)."""
    rows = email_rows()
    spam = [r for r in rows if r["label"] == "spam"]
    ham = [r for r in rows if r["label"] == "ham"]
    return [{"prompt": f"Subject: {r['subject']}\n{' '.join(r['text'].split())[:120]}\nIs this e-mail spam? Answer:",
             "completion": " yes" if r["label"] == "spam" else " no"}
            for pair in zip(spam[:60], ham[:60]) for r in pair]


def sft_run(tmp_path: Path, final: float = 0.25, patience: int = 1000, validate: bool = True,
            nan_at: int | None = None, quantize: str = '["int8", "int4"]', max_drop: float = 2.0,
            data: tuple[list[Any], list[Any], list[Any]] | None = None, crash_at: int | None = None,
            resume: bool = False, **config: Any) -> tuple[Any, Any, Path]:
    """The job (validate first when ``validate``) on ``data`` (train, validation, holdout rows;
    by default e-mails in blocks of ``LENGTH`` tokens), ``config`` added to its ``SFTConfig``:
    its trainer, its tokenizer and its run directory. ``crash_at``: the process dies at that step;
    ``resume``: the job resumes from the Trainer's newest sealed checkpoint."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = real_llm()
    tok = AutoTokenizer.from_pretrained(path)
    if data is None:
        rows = token_rows(tok, emails()[:200])
        data = rows[:64], rows[64:80], rows[80:96]
    train, val, holdout = data
    torch.manual_seed(0)
    model = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(path),
                                peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                lora_dropout=0.0, task_type="CAUSAL_LM"))
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE.format(final=final, patience=patience, phases='"validate", ' if validate else "",
                                    quantize=quantize, max_drop=max_drop))
    # SFTConfig's bf16 is on by default: on a CPU without native bf16 (AMD Zen 3) every matmul then
    # takes PyTorch's reference kernel, 37 times slower than f32 for this model.
    args = trl.SFTConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, per_device_eval_batch_size=8,
                         max_steps=planned_steps(recipe.read_text(), str(recipe)), report_to=[],
                         save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True, learning_rate=1e-3,
                         bf16=False, **{"max_length": LENGTH, **config})
    trainer = NanOnce(model=model, args=args, train_dataset=Dataset.from_list(train),
                      eval_dataset=Dataset.from_list(val), processing_class=tok, at=nan_at, crash_at=crash_at)
    ContraiCallback(recipe, run_dir=tmp_path / "run", holdout_dataset=Dataset.from_list(holdout)).attach(trainer)
    trainer.train(resume_from_checkpoint=last_checkpoint(tmp_path / "out") if resume else None)
    return trainer, tok, tmp_path / "run"


def holdout_ids(tok: Any) -> torch.Tensor:
    """The holdout's token blocks (the rows the run read once at its end)."""
    return torch.tensor([r["input_ids"] for r in token_rows(tok, emails()[:200])[80:96]])


@torch.no_grad()
def greedy(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The model's greedy next token at every position."""
    model.eval()
    out: torch.Tensor = model(input_ids=ids).logits.argmax(-1)
    return out


def agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a == b).float().mean())


def llama_cpp_greedy(gguf: Path, ids: torch.Tensor) -> torch.Tensor:
    """llama.cpp's greedy next token at every position of each row."""
    llama_cpp = require("llama_cpp")
    llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=128, logits_all=True, verbose=False, n_threads=2)
    try:
        rows = []
        for row in ids.tolist():
            llm.reset()
            llm.eval(row)
            rows.append(torch.tensor(llm.scores[:len(row)]).argmax(-1))
        return torch.stack(rows)
    finally:
        llm.close()


def test_a_lora_sft_job_is_contracted_merged_cut_and_served_by_each_consumer(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    trainer, tok, run = sft_run(tmp_path)
    d = decisions(run)
    kinds = [x["kind"] for x in d]
    assert "validate_passed" in kinds and "enter_contract" in kinds and kinds[-1] == "holdout", kinds
    assert "engine_substitute" not in kinds, [x["reason"] for x in d if x["kind"] == "engine_substitute"]
    dropped = next(x for x in d if x["kind"] == "drop_noisiest")["evidence"]
    assert dropped["count"] > 0 and len(trainer.train_dataset.dropped) == dropped["count"], dropped
    # Contraction acted on the merged model: no adapter layer is left, the feed-forward matrices
    # the recipe prunes trained and lost whole units.
    model = trainer.model.get_base_model()
    assert not any("lora_" in n for n, _ in model.named_parameters())
    ids = holdout_ids(tok)
    served = greedy(model, ids)
    # (1) The merged model with its pruned units cut out — in memory, and through from_pretrained.
    exported = AutoModelForCausalLM.from_pretrained(run / "final")
    size = exported.config.intermediate_size
    assert size == model.config.intermediate_size < 1536 and size % 32 == 0, size
    assert model.model.layers[0].mlp.down_proj.weight.shape == (576, size), "the model in memory is cut too"
    assert agreement(greedy(exported, ids), served) >= 0.99
    # (2) The int8 model, kept within max_drop (perplexity +2 %), in the compressed-tensors
    # layout; int4 costs a 135M model far more perplexity, even by GPTQ, and is refused.
    ev = json.loads((run / "final" / "eval.json").read_text())
    assert ev["classes"] == [] and ev["int8"]["measure"] == "perplexity", ev
    assert ev["int8"]["kept"] and abs(ev["int8"]["drop_points"]) < 2.0, ev["int8"]
    assert not ev["int4"]["kept"] and ev["int4"]["drop_points"] > 2.0, ev["int4"]
    val, dense_val = ev["int4"]["val_perplexity"]
    assert ev["int4"]["drop_points"] == pytest.approx(100 * (val / dense_val - 1), rel=1e-3)
    assert not (run / "final" / "int4").exists() and not (run / "final" / "model-q4_0.gguf").exists()
    assert "refuse_int4" in kinds and "perplexity" in next(x for x in d if x["kind"] == "holdout")["reason"]
    up = next(v for k, v in ev["sparsity"].items() if k.endswith("layers.0.mlp"))
    assert up > 0.2, "the sparsity as pruning left it, before the cut"
    int8 = AutoModelForCausalLM.from_pretrained(run / "final" / "int8")
    # Group 32: the codes GGUF's Q8_0 holds as they are.
    with quantized_in_place(model, Scheme(8, 32)):
        want = greedy(model, ids)
    assert agreement(greedy(int8, ids), want) >= 0.95
    # (3) The run wrote the same codes as GGUF Q8_0: llama.cpp computes the variant. It also rounds
    # the activations to 8 bits (Q8_0 × Q8_0 dot products), which the reference above does not:
    # near-tied positions flip (94.9 % agreed on an AMD Zen 3 with llama.cpp's AVX2 kernels).
    gguf = run / "final" / "model-q8_0.gguf"
    assert agreement(llama_cpp_greedy(gguf, ids), want) >= 0.93
    # The model card lists each, as the Burn engine's does: the cut model's parameters, bytes, figures.
    card = json.loads((run / "final" / "model-card.json").read_text())
    assert card["architecture"] == "LlamaForCausalLM" and "model" not in card
    dense, q8, q8_gguf, q4 = card["variants"]
    assert card["classes"] == [] and q4["name"] == "int4" and q4["file"] is None
    assert "refused: validation perplexity +" in q4["note"] and "GPTQ" in q4["note"], q4["note"]
    assert q4["bytes"] < 0.8 * q8["bytes"], "an int4 model counted, not written (the f32 embedding in both)"
    # (parameters() counts the head tied to the embeddings once, as the card does)
    assert dense["parameters"] == sum(p.numel() for p in exported.parameters()) == sum(p.numel() for p in model.parameters())
    assert dense["parameters"] < 134_515_008, "fewer than SmolLM2-135M's"
    assert q8["name"] == "int8" and q8["file"] == "final/int8" and q8["bytes"] < 0.6 * dense["bytes"]
    assert q8_gguf["name"] == "int8 GGUF" and q8_gguf["file"] == "final/model-q8_0.gguf"
    assert q8_gguf["bytes"] == gguf.stat().st_size < 0.4 * dense["bytes"] and q8_gguf["latency_ms"] > 0
    assert "llama.cpp" in q8_gguf["note"], q8_gguf["note"]
    assert dense["latency_ms"] > 0 and dense["holdout_loss"] == pytest.approx(ev["holdout_loss"])
    assert "LoRA adapters merged; pruned feed-forward units cut out (intermediate_size 1536 → " in dense["note"]
    assert dense["zero_weights"] < 0.01 and q8["zero_weights"] == dense["zero_weights"], "no pruned zeros left"


def test_a_nan_and_a_contraction_that_costs_perplexity_are_rolled_back_on_the_merged_model(tmp_path: Path) -> None:
    """A NaN loss at contraction's first step goes back to its entry checkpoint (the merged
    model, its optimizer group with it); then half the feed-forward units cut with no patience:
    the first evaluation after the cut is worse than the model contraction started from, and
    contraction rolls back to its checkpoint and ends; the run still finishes with its exports."""
    from transformers import AutoModelForCausalLM

    trainer, tok, run = sft_run(tmp_path, final=0.5, patience=1, validate=False, nan_at=17, quantize='"int4"',
                                max_drop=100.0)
    d = decisions(run)
    kinds = [x["kind"] for x in d]
    back = [x for x in d if x["kind"] == "rollback_contract"]
    assert kinds.index("enter_contract") < kinds.index("rollback_nonfinite") < kinds.index("rollback_contract"), kinds
    assert len(back) == 1 and kinds[-1] == "holdout", kinds
    assert back[0]["evidence"]["val_loss"] > back[0]["evidence"]["best_val_loss"]
    exported = AutoModelForCausalLM.from_pretrained(run / "final")
    ids = holdout_ids(tok)
    model = trainer.model.get_base_model()
    assert agreement(greedy(exported, ids), greedy(model, ids)) >= 0.99
    # int4 alone by GPTQ, kept at a limit it meets: the run's calibration makes the same codes
    # again, and its compressed-tensors folder and its GGUF Q4_0 file compute that variant.
    ev = json.loads((run / "final" / "eval.json").read_text())
    assert ev["int8"] is None and ev["int4"]["kept"], ev
    card = json.loads((run / "final" / "model-card.json").read_text())
    assert [v["name"] for v in card["variants"]][1:] == ["int4", "int4 GGUF"]
    assert "GPTQ calibrated on 64 training samples" in card["variants"][1]["note"]
    engine = next(c for c in trainer.callback_handler.callbacks if isinstance(c, ContraiCallback)).engine
    assert engine is not None
    int4 = AutoModelForCausalLM.from_pretrained(run / "final" / "int4")
    with quantized_in_place(model, Scheme(4, 32), engine.calibrate):
        want = greedy(model, ids)
    assert agreement(greedy(int4, ids), want) >= 0.95
    assert agreement(llama_cpp_greedy(run / "final" / "model-q4_0.gguf", ids), want) >= 0.90


def test_packing_and_completion_only_loss_are_what_the_lifecycle_measures(tmp_path: Path) -> None:
    """TRL's packing (best fit, padding-free: a row holds several examples, told apart by their
    position_ids) with its completion-only loss on prompt-completion rows: Contrai evaluates what
    the Trainer trains — its validation loss is the Trainer's own ``eval_loss``, the answers'
    loss (far below the whole text's) — and the run goes through contraction to its exports; the
    holdout, given raw, is prepared as TRL prepared the evaluation set."""
    rows = prompt_rows()
    trainer, tok, run = sft_run(tmp_path, validate=False, quantize='"int8"', data=(rows[:80], rows[80:100], rows[100:]),
                                packing=True, max_length=128)
    d = decisions(run)
    kinds = [x["kind"] for x in d]
    assert "enter_contract" in kinds and "drop_noisiest" in kinds and kinds[-1] == "holdout", kinds
    assert "engine_substitute" not in kinds, [x["reason"] for x in d if x["kind"] == "engine_substitute"]
    # Packed: fewer training rows than examples; the holdout's 20 examples were read, packed too.
    assert len(trainer.train_dataset) < 80 and "position_ids" in next(iter(trainer.get_eval_dataloader()))
    ev = json.loads((run / "final" / "eval.json").read_text())
    assert 0 < ev["holdout_samples"] < 20, ev["holdout_samples"]
    # The final model's validation loss as Contrai measured it is the Trainer's eval_loss of the
    # same model (each packed row's mean against the Trainer's token mean: close, not equal) ...
    theirs = trainer.evaluate()["eval_loss"]
    assert ev["val_loss"] == pytest.approx(theirs, rel=0.15), (ev["val_loss"], theirs)
    # ... the loss of the answers alone, not of every token of the e-mails.
    model = trainer.model.get_base_model()
    batch = next(iter(trainer.get_eval_dataloader()))
    with torch.no_grad():
        whole = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], labels=batch["input_ids"]).loss
    assert ev["val_loss"] < 0.5 * float(whole), (ev["val_loss"], float(whole))


def test_a_job_that_died_past_the_merge_resumes_from_its_checkpoint_exactly(tmp_path: Path) -> None:
    """The process dies at contraction's step 24 (main ended at 16, the adapters merged); the
    Trainer's newest checkpoint holds PEFT's adapters alone and an optimizer with the merged
    matrices' group. The resumed job merges the adapters again, takes the merged matrices from
    the lifecycle's checkpoint of that step, and retrains the next step to the loss the dead job
    logged for it; the run goes on to its end."""
    with pytest.raises(Crashed):
        sft_run(tmp_path, validate=False, quantize='"none"', crash_at=24)
    ckpt = last_checkpoint(tmp_path / "out")
    assert ckpt is not None
    step = int(str(ckpt).rsplit("-", 1)[1]) + 1
    assert 16 < step < 24, ckpt
    before = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().split("\n") if x]
    logged = next(r for r in before if r["step"] == step and "train_loss" in r)
    trainer, _, run = sft_run(tmp_path, validate=False, quantize='"none"', resume=True)
    after = [json.loads(x) for x in (run / "metrics.jsonl").read_text().split("\n") if x]
    again = next(r for r in after if r["step"] == step and "train_loss" in r)
    assert again["train_loss"] == pytest.approx(logged["train_loss"], rel=1e-5), (again, logged)
    kinds = [x["kind"] for x in decisions(run)]
    assert kinds.count("enter_contract") == 1 and kinds[-1] == "holdout", kinds
    assert not any("lora_" in n for n, _ in trainer.model.get_base_model().named_parameters())
