"""ContraiCallback in a Hugging Face Trainer: every phase happens, and each decision is visibly
applied in the running job."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import pytest
from conftest import HF_RECIPE, ServedRows, declared, require, tiny_bert, token_task

require("torch", "transformers", "accelerate")

import torch
from packaging.specifiers import SpecifierSet
from transformers import (AutoModelForSequenceClassification, BertForSequenceClassification, Trainer,
                          TrainerCallback, TrainerControl, TrainerState, TrainingArguments)

import contrai
from contrai.integrations._compat import UntestedVersion
from contrai.integrations._compat import hf as compat
from contrai.conductor import Conductor, RunInfo
from contrai.engine import Engine, job_steps, planned_steps
from contrai.integrations.hf import ContraiCallback
from contrai.engine.model import recompute, recomputes

if TYPE_CHECKING:
    from transformers.models.bert.modeling_bert import BertLayer


class Probe(TrainerCallback):
    """What the running job actually did: the LR each step ran at, the dropout at the end."""

    def __init__(self, validate_steps: int) -> None:
        self.offset = validate_steps
        self.lr: dict[int, float] = {}
        self.dropout: list[float] = []
        self.config_dropout = 0.0

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                      optimizer: torch.optim.Optimizer | None = None, **kw: Any) -> None:
        assert optimizer is not None
        self.lr[self.offset + state.global_step + 1] = optimizer.param_groups[0]["lr"]

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     model: BertForSequenceClassification | None = None, **kw: Any) -> None:
        assert model is not None
        self.dropout = [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)]
        self.config_dropout = model.config.attention_probs_dropout_prob


def bert_layers(model: BertForSequenceClassification) -> list[BertLayer]:
    """The encoder's layers, typed (a ``ModuleList`` iterates as plain modules)."""
    return cast("list[BertLayer]", list(model.bert.encoder.layer))


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def train(tmp_path: Path, recipe: Path, *, max_steps: int = 80, stop_at: int | None = None,
          resume: str | None = None, run: str = "run", out: str = "out") -> tuple[Trainer, Probe, ServedRows]:
    data = ServedRows(token_task(400, 1))
    args = TrainingArguments(output_dir=str(tmp_path / out), per_device_train_batch_size=16,
                             per_device_eval_batch_size=32, max_steps=max_steps, learning_rate=1e-3,
                             logging_steps=5, report_to=[], save_strategy="no",
                             use_cpu=True, seed=0, disable_tqdm=True)
    probe = Probe(validate_steps=20)
    callbacks: list[TrainerCallback] = [probe]
    if stop_at is not None:
        callbacks.append(StopAt(stop_at))
    t = Trainer(model=tiny_bert(), args=args, train_dataset=data, eval_dataset=token_task(100, 2),
                callbacks=callbacks)
    ContraiCallback(recipe, run_dir=tmp_path / run, holdout_dataset=token_task(60, 3)).attach(t)
    t.train(resume_from_checkpoint=resume)
    return t, probe, data


class StopAt(TrainerCallback):
    """Stops the job after a Trainer step (a preemption)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kw: Any) -> TrainerControl:
        if state.global_step >= self.step:
            control.should_training_stop = True
        return control


def test_every_phase_happens_and_each_decision_is_applied(tmp_path: Path, recipe_file: Path,
                                                         recwarn: pytest.WarningsRecorder) -> None:
    trainer, probe, data = train(tmp_path, recipe_file)
    assert not [w for w in recwarn if "was not attached" in str(w.message)], "attach gave the callback its Trainer"
    run = tmp_path / "run"
    decisions = rows(run / "decisions.jsonl")
    kinds = [d["kind"] for d in decisions]
    for k in ["validate_passed", "checkpoint_round_trip", "main_complete", "doctor", "sensitivity",
              "force_contract", "drop_noisiest", "enter_contract", "enter_refine", "int8", "holdout"]:
        assert k in kinds, f"{k} missing from {kinds}"
    assert kinds[-1] == "holdout"
    saved = sorted((tmp_path / "out").glob("checkpoint-*"))
    assert len(saved) == 3, "the Trainer keeps its lifecycle checkpoints 3 at a time when save_total_limit is unset"
    metrics = rows(run / "metrics.jsonl")
    steps = [r for r in metrics if "train_loss" in r]
    # The LR every step ran at is the conductor's: warmup and cosine in main, then contract's
    # linear anneal from main's last LR with no warmup.
    for r in steps:
        assert probe.lr[r["step"]] == pytest.approx(r["lr"], rel=1e-9, abs=1e-15), r
    # The gradient norm the conductor saw at each step is the one the Trainer logged (before clipping).
    logged = [(int(e["step"]), e["grad_norm"]) for e in trainer.state.log_history if "grad_norm" in e]
    assert len(logged) >= 10
    for step, norm in logged:
        assert steps[step - 1]["grad_norm"] == pytest.approx(norm, rel=1e-4), (step, norm)
    contract = [r["lr"] for r in steps if r["phase"] == "contract"]
    last_main = [r["lr"] for r in steps if r["phase"] == "main"][-1]
    assert contract[0] == pytest.approx(last_main) and all(b < a for a, b in zip(contract, contract[1:]))
    # Dropout × 0.5 in contract and refine: every nn.Dropout and the attention dropout the model reads.
    assert probe.dropout and all(p == pytest.approx(0.05) for p in probe.dropout), probe.dropout
    assert probe.config_dropout == pytest.approx(0.05)
    # The sparsity measured in the final weights matches the decisions: each module at its rule's
    # final share within diagnose's cap.
    scan = next(d for d in decisions if d["kind"] == "sensitivity")["evidence"]
    caps = scan["caps"]
    # Main is too short to pay for measuring each module: diagnose's scan was linearized on its
    # budgeted subsample (whole evaluation batches of 32 spread over the 100 samples), every level
    # at once, against the unpruned loss on those batches (the whole set not evaluated).
    assert scan["scan"] == "linearized"
    assert scan["scan_samples"] < 100 and scan["scan_base_val_loss"] == scan["base_val_loss"]
    for module, levels in scan["sensitivity"].items():
        assert [r["level"] for r in levels] == [0.1, 0.2, 0.3, 0.5], (module, levels)
    final = {"intermediate": 0.5, "attention.self": 0.2}
    model = trainer.model
    assert model is not None
    evaluation = json.loads((run / "final" / "eval.json").read_text())
    for module, share in evaluation["sparsity"].items():
        want = min(next(v for k, v in final.items() if module.endswith(k)), caps[module])
        assert share == pytest.approx(want, abs=2e-3), (module, share, want)
        weights = [p for n, p in model.named_parameters() if n.startswith(module) and p.dim() == 2]
        zeros = sum(int((w == 0).sum()) for w in weights) / sum(w.numel() for w in weights)
        assert zeros == pytest.approx(share, abs=1e-6), (module, zeros, share)
    # The noisy samples named by the decision were never served again.
    drop = next(d for d in decisions if d["kind"] == "drop_noisiest")
    dropped = {int(i) for i in drop["evidence"]["ids"]}
    assert dropped and set(data.dropped) == dropped
    assert data.after_drop and not dropped & set(data.after_drop)
    # The holdout, read once; the report and the doctor read the run directory.
    assert evaluation["holdout_samples"] == 60 and evaluation["holdout_accuracy"] > 0.9
    # The int8 model: weight-only codes put in place of the weights (no copy of the model),
    # kept, and written as compressed-tensors — which transformers reads back and which gives
    # the holdout accuracy the run recorded for it.
    int8 = next(d for d in decisions if d["kind"] == "int8")
    assert "weight-only int8" in int8["reason"] and "kept as final/int8" in int8["reason"], int8["reason"]
    assert evaluation["int8"]["bytes"] < 0.5 * evaluation["int8"]["dense_bytes"]
    require("compressed_tensors")
    loaded = AutoModelForSequenceClassification.from_pretrained(run / "final" / "int8")
    loaded.train(False)
    holdout = token_task(60, 3)
    with torch.no_grad():
        ids = torch.stack([r["input_ids"] for r in holdout])
        mask = torch.stack([r["attention_mask"] for r in holdout])
        got = loaded(input_ids=ids, attention_mask=mask).logits.argmax(-1)
    correct = float((got == torch.stack([r["labels"] for r in holdout])).float().mean())
    assert correct == pytest.approx(evaluation["int8"]["holdout_accuracy"], abs=1e-6)
    html = contrai.report(run)
    assert "Controller decisions" in html and "enter_contract" in html
    assert contrai.doctor(run)[0]["verdict"] in ("healthy", "action needed")


def test_a_job_stopped_mid_contraction_resumes_with_the_same_decisions(tmp_path: Path, recipe_file: Path) -> None:
    train(tmp_path, recipe_file, run="whole", out="out-whole")
    # Contraction starts at Trainer step 60; checkpoints every 5 steps there: stop at 68, resume
    # from the Trainer's checkpoint of step 65 written under the callback.
    train(tmp_path, recipe_file, stop_at=68, run="resumed", out="out-resumed")
    ckpt = tmp_path / "out-resumed" / "checkpoint-65"
    assert (ckpt / "contrai.json").exists(), sorted(p.name for p in (tmp_path / "out-resumed").iterdir())
    train(tmp_path, recipe_file, resume=str(ckpt), run="resumed", out="out-resumed")

    def decided(run: str) -> list[tuple[int, str]]:
        return [(d["step"], d["kind"]) for d in rows(tmp_path / run / "decisions.jsonl")]

    assert decided("resumed") == decided("whole")
    whole = [r for r in rows(tmp_path / "whole" / "metrics.jsonl") if "wall_s" not in r]
    resumed = [r for r in rows(tmp_path / "resumed" / "metrics.jsonl") if "wall_s" not in r]
    assert [r["step"] for r in resumed] == [r["step"] for r in whole]


def test_what_to_set_is_said_when_the_trainer_cannot_run_the_recipe(tmp_path: Path, recipe_file: Path) -> None:
    args = TrainingArguments(output_dir=str(tmp_path / "o"), max_steps=10, report_to=[], use_cpu=True)
    t = Trainer(model=tiny_bert(), args=args, train_dataset=token_task(50, 1))
    ContraiCallback(recipe_file, run_dir=tmp_path / "r").attach(t)
    with pytest.raises(ValueError, match="needs an evaluation set"):
        t.train()
    t = Trainer(model=tiny_bert(), args=args, train_dataset=token_task(50, 1), eval_dataset=token_task(20, 2))
    ContraiCallback(recipe_file, run_dir=tmp_path / "r2").attach(t)
    with pytest.raises(ValueError, match=r"max_steps=80"):
        t.train()
    best = TrainingArguments(output_dir=str(tmp_path / "o"), max_steps=80, report_to=[], use_cpu=True,
                             eval_strategy="steps", save_strategy="steps", load_best_model_at_end=True)
    t = Trainer(model=tiny_bert(), args=best, train_dataset=token_task(50, 1), eval_dataset=token_task(20, 2))
    ContraiCallback(recipe_file, run_dir=tmp_path / "r5").attach(t)
    with pytest.raises(ValueError, match=r"set load_best_model_at_end=False"):
        t.train()
    # FSDP and ZeRO-3 need accelerators; the check reads what Accelerate sets for them.
    cb = ContraiCallback(recipe_file, run_dir=tmp_path / "r4")
    zero3 = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=SimpleNamespace(zero_stage=3)))
    plain = SimpleNamespace(load_best_model_at_end=False)
    for sharded in (SimpleNamespace(is_fsdp_enabled=True), SimpleNamespace(accelerator=zero3)):
        fake = cast(Trainer, SimpleNamespace(eval_dataset=token_task(20, 2), args=plain, **vars(sharded)))
        with pytest.raises(ValueError, match=r"pruning needs whole parameters: FSDP or DeepSpeed ZeRO-3 shards"):
            cb._check(fake, 80)
    cb._check(cast(Trainer, SimpleNamespace(eval_dataset=token_task(20, 2), args=plain, is_fsdp_enabled=False)), 80)
    bad = tmp_path / "bad.toml"
    bad.write_text("[contract]\nprune_scpe = 'global'\n")
    with pytest.raises(ValueError, match=r"bad.toml:2: .*did you mean `prune_scope`"):
        ContraiCallback(bad, run_dir=tmp_path / "r3")


def small_trainer(tmp_path: Path, callbacks: list[TrainerCallback] | None = None) -> Trainer:
    """A Trainer of the tiny BERT that cannot run the recipe (too few steps): it fails in
    ``on_train_begin``, once the callback has its Trainer."""
    args = TrainingArguments(output_dir=str(tmp_path / "o"), max_steps=10, report_to=[], use_cpu=True)
    return Trainer(model=tiny_bert(), args=args, train_dataset=token_task(50, 1), eval_dataset=token_task(20, 2),
                   callbacks=callbacks)


def test_attach_binds_the_trainer_and_registers_the_callback_once(tmp_path: Path, recipe_file: Path) -> None:
    cb = ContraiCallback(recipe_file, run_dir=tmp_path / "r")
    t = small_trainer(tmp_path)
    assert cb.attach(t) is cb and cb.trainer is t
    assert cb.attach(t) is cb
    assert [c for c in t.callback_handler.callbacks if c is cb] == [cb], "added once, attached twice"
    passed = ContraiCallback(recipe_file, run_dir=tmp_path / "r2")
    t2 = small_trainer(tmp_path, callbacks=[passed])
    passed.attach(t2)
    assert [c for c in t2.callback_handler.callbacks if c is passed] == [passed], "passed in callbacks=, not added again"
    with pytest.raises(ValueError, match="attached to another Trainer"):
        cb.attach(t2)


def test_a_callback_never_attached_finds_its_trainer_with_a_warning(tmp_path: Path, recipe_file: Path) -> None:
    cb = ContraiCallback(recipe_file, run_dir=tmp_path / "r")
    t = small_trainer(tmp_path, callbacks=[cb])
    with pytest.warns(FutureWarning, match=r"not attached: call ContraiCallback\(...\).attach\(trainer\)"):
        with pytest.raises(ValueError, match=r"max_steps=80"):
            t.train()
    assert cb.trainer is t


def test_the_tested_transformers_range_is_the_declared_one_and_checked(tmp_path: Path, recipe_file: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert declared("hf", "transformers") == SpecifierSet(",".join(compat.TESTED))
    assert compat.check(), "the installed transformers is in the tested range"
    monkeypatch.setattr(compat, "TESTED", (">=999",))
    with pytest.warns(UntestedVersion, match=r"tested with transformers>=999, and transformers \S+ is installed"):
        ContraiCallback(recipe_file, run_dir=tmp_path / "r").attach(small_trainer(tmp_path))


def test_whole_heads_and_units_are_pruned_in_a_bert(tmp_path: Path, recipe_file: Path) -> None:
    recipe = recipe_file.read_text().replace("[contract]\n", "[contract]\nprune_heads = true\nprune_units = true\n")
    recipe_file.write_text(recipe.replace("init = 0.1, final = 0.2", "init = 0.5, final = 0.5"))
    trainer, _, _ = train(tmp_path, recipe_file)
    decisions = rows(tmp_path / "run" / "decisions.jsonl")
    said = [d["reason"] for d in decisions if d["kind"] == "engine_substitute" and "prune" in d["reason"]]
    assert said == ["remove the pruned attention heads from the exported model: transformers 5 prunes no heads "
                    "(no config.pruned_heads): they stay as zeros"], said
    assert decisions[-1]["kind"] == "holdout"
    model = trainer.model
    assert isinstance(model, BertForSequenceClassification)
    sparsity = json.loads((tmp_path / "run" / "final" / "eval.json").read_text())["sparsity"]
    for i, layer in enumerate(bert_layers(model)):
        # Units: half the expansion's rows were pruned with the same columns of the projection, and
        # cut out of the model at export (64 → 32 left, none of them dead).
        up, down = layer.intermediate.dense.weight, layer.output.dense.weight
        assert up.shape == (32, 32) and down.shape == (32, 32)
        assert (up != 0).any(dim=1).all() and (down != 0).any(dim=0).all()
        assert sparsity[f"bert.encoder.layer.{i}.intermediate"] == pytest.approx(0.5)
        # Heads: one of the two (16 rows of query, key and value; its 16 output columns).
        att = layer.attention
        gone = [h for h in range(2) if (att.self.query.weight[16 * h:16 * (h + 1)] == 0).all()]
        assert len(gone) == 1, "one head of two"
        cut = slice(16 * gone[0], 16 * (gone[0] + 1))
        for w in (att.self.key.weight, att.self.value.weight):
            assert (w[cut] == 0).all()
        assert (att.output.dense.weight[:, cut] == 0).all() and (att.output.dense.weight != 0).sum() == 32 * 16
    # The exported model has the units cut out, and computes what the trained one does.
    exported = BertForSequenceClassification.from_pretrained(tmp_path / "run" / "final")
    assert exported.config.intermediate_size == 32
    assert bert_layers(exported)[0].output.dense.weight.shape == (32, 32)
    batch = {k: torch.stack([r[k] for r in token_task(32, 9)]) for k in ("input_ids", "attention_mask")}
    # transformers leaves PreTrainedModel.eval unannotated.
    model.eval(), exported.eval()  # type: ignore[no-untyped-call]
    with torch.no_grad():
        torch.testing.assert_close(exported(**batch).logits, model(**batch).logits, atol=1e-5, rtol=1e-5)


def test_masks_take_structures_whole_only_where_the_names_show_them() -> None:
    from contrai.engine.masks import Masks

    order = {"targets": {"bert.encoder.layer.0.intermediate.dense.weight": {"sparsity": 0.25, "cap": 1.0}},
             "scope": "module", "heads": 2, "units": True}
    bert = tiny_bert()
    m = Masks()
    assert m.update(bert, order) == {"units"}
    keep = m.keep["bert.encoder.layer.0.output.dense.weight"]
    assert keep.shape == (32, 64) and int((~keep).all(dim=0).sum()) == 16, "the projection's columns go too"
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    m = Masks()
    assert m.update(mlp, {"targets": {"0.weight": {"sparsity": 0.5, "cap": 1.0}}, "scope": "module",
                          "heads": None, "units": True}) == set()
    assert float((~m.keep["0.weight"]).float().mean()) == 0.5, "single weights instead"


def test_layers_that_lost_different_numbers_of_units_all_lose_the_fewest(tmp_path: Path) -> None:
    from contrai.engine.adapters import PEFT_PREFIX
    from contrai.engine.compact import Cut, cut_in_place, units_removed
    from contrai.engine.masks import Masks

    model = tiny_bert()
    model.eval()  # type: ignore[no-untyped-call]  # unannotated in transformers
    m = Masks()
    ffn = "bert.encoder.layer.{}.intermediate.dense.weight"
    m.update(model, {"targets": {ffn.format(0): {"sparsity": 0.5, "cap": 1.0}, ffn.format(1): {"sparsity": 0.75, "cap": 1.0}},
                     "scope": "module", "heads": None, "units": True})
    m.apply(model)
    cut = units_removed(model, m)
    assert isinstance(cut, Cut)
    assert (cut.before, cut.after, cut.left) == (64, 32, 16)
    # A LoRA job's masks name the weights as the PEFT wrapper does, and PEFT before 0.20 leaves
    # its config on the model it unloaded: that model is no PEFT model, and its units are cut.
    wrapped = Masks()
    wrapped.keep = {PEFT_PREFIX + k: v for k, v in m.keep.items()}
    setattr(model, "peft_config", {"default": object()})
    again = units_removed(model, wrapped)
    assert isinstance(again, Cut) and again.after == 32
    delattr(model, "peft_config")
    # 16 units fewer would leave 48, not a multiple of 32: none are cut.
    few = Masks()
    few.update(model, {"targets": {ffn.format(0): {"sparsity": 0.5, "cap": 1.0}, ffn.format(1): {"sparsity": 0.25, "cap": 1.0}},
                       "scope": "module", "heads": None, "units": True})
    why = units_removed(model, few)
    assert isinstance(why, str) and "fewer than 32 whole units" in why
    batch = {k: torch.stack([r[k] for r in token_task(8, 9)]) for k in ("input_ids", "attention_mask")}
    with torch.no_grad():
        want = model(**batch).logits
    cut_in_place(model, cut, m)
    assert model.config.intermediate_size == 32
    assert all(w.shape == (32, 32) for w in (bert_layers(model)[1].intermediate.dense.weight,
                                             bert_layers(model)[1].output.dense.weight))
    assert int((bert_layers(model)[1].intermediate.dense.weight == 0).all(dim=1).sum()) == 16
    assert m.keep[ffn.format(1)].shape == (32, 32), "the masks are cut with the model"
    m.apply(model)
    model.save_pretrained(tmp_path)
    small = BertForSequenceClassification.from_pretrained(tmp_path)
    small.eval()  # type: ignore[no-untyped-call]  # unannotated in transformers
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, want, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(small(**batch).logits, want, atol=1e-6, rtol=1e-5)
    batch = {k: torch.stack([r[k] for r in token_task(8, 4)]) for k in ("input_ids", "attention_mask")}
    with torch.no_grad():
        torch.testing.assert_close(small(**batch).logits, model(**batch).logits, atol=1e-5, rtol=1e-5)


def test_a_recipe_that_leaves_main_steps_to_the_job_is_laid_on_the_trainers_max_steps(tmp_path: Path) -> None:
    # `contrai recipe init --for hf` as a new user takes it: the Trainer's 400 steps hold the plan.
    job = contrai.job_recipe()
    assert planned_steps(job, "recipe.toml", job_steps(job, 400)) == 400
    assert job_steps(contrai.default_recipe(), 400) is None, "a recipe that writes main.steps keeps them"
    # The test recipe without main.steps, on the Trainer's 80 steps: main 60, contract 16, refine 4.
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(HF_RECIPE.replace("steps = 60\n", ""))
    trainer, _, _ = train(tmp_path, recipe, max_steps=80)
    run = tmp_path / "run"
    laid = next(d for d in rows(run / "decisions.jsonl") if d["kind"] == "plan_from_job")
    assert laid["evidence"] == {"job_steps": 80, "main": 60, "contract": 16, "refine": 4}
    assert "steps = 60" in (run / "recipe.toml").read_text(), "the run directory keeps the recipe in force"
    evaluation = json.loads((run / "final" / "eval.json").read_text())
    assert evaluation["planned_steps"] == 20 + 80 and trainer.state.global_step == 80  # validate's 20 are its own


class NanOnce(Trainer):
    """A Trainer whose loss is NaN on one micro-batch of optimizer step ``at`` (an fp16-style
    overflow), once."""

    def __init__(self, *a: Any, at: int, **k: Any) -> None:
        super().__init__(*a, **k)
        self.at, self.done = at, False

    def compute_loss(self, model: Any, inputs: Any, *a: Any, **k: Any) -> Any:
        loss = super().compute_loss(model, inputs, *a, **k)
        if self.state.global_step + 1 == self.at and not self.done and isinstance(loss, torch.Tensor):
            self.done = True
            return loss * float("nan")
        return loss


def test_a_nan_the_trainers_log_hides_is_counted_from_the_raw_loss(tmp_path: Path, recipe_file: Path) -> None:
    # Accumulating 2 micro-batches and logging every 10 steps with logging_nan_inf_filter on (the
    # default), the Trainer's own log averages the NaN away; the callback sees the raw loss.
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8,
                             gradient_accumulation_steps=2, per_device_eval_batch_size=32, max_steps=80,
                             logging_steps=10, report_to=[], save_strategy="no", use_cpu=True, seed=0,
                             disable_tqdm=True)
    t = NanOnce(model=tiny_bert(), args=args, train_dataset=ServedRows(token_task(400, 1)),
                eval_dataset=token_task(100, 2), at=35)
    ContraiCallback(recipe_file, run_dir=tmp_path / "run", holdout_dataset=token_task(60, 3)).attach(t)
    t.train()
    assert all(math.isfinite(h["loss"]) for h in t.state.log_history if "loss" in h), "the Trainer's log hides it"
    back = [d for d in rows(tmp_path / "run" / "decisions.jsonl") if d["kind"] == "rollback_nonfinite"]
    assert [d["step"] for d in back] == [20 + 35], back
    assert back[0]["evidence"]["train_loss"] == "NaN"
    assert t.model is not None and all(torch.isfinite(p).all() for p in t.model.parameters()), \
        "the NaN step's weights were replaced"
    assert (tmp_path / "run" / "final" / "eval.json").exists()


def test_the_recipes_gradient_checkpointing_runs_in_the_job_and_the_plan_says_what_runs(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text("[model]\ngradient_checkpointing = true\n" + HF_RECIPE)
    trainer, _, _ = train(tmp_path, recipe, max_steps=80)
    run = tmp_path / "run"
    assert trainer.model is not None and compat.checkpointing_on(trainer.model), "the engine turned it on"
    assert json.loads((run / "plan.json").read_text())["gradient_checkpointing"] is True
    assert json.loads((run / "final" / "eval.json").read_text())["planned_steps"] == 100, "every phase ran"
    # A job that checkpoints by its own settings: the plan says so though the recipe does not.
    on = Conductor(HF_RECIPE, RunInfo(train_samples=400, classes=2, gradient_checkpointing=True)).plan()
    off = Conductor(HF_RECIPE, RunInfo(train_samples=400, classes=2, gradient_checkpointing=False)).plan()
    assert on.get("gradient_checkpointing") is True and not off.get("gradient_checkpointing", False)
    # A transformers model inside another module (a LightningModule's attribute) is found and turned on.
    holder = torch.nn.ModuleDict({"encoder": tiny_bert(), "head": torch.nn.Linear(2, 2)})
    assert not recomputes(holder) and recompute(holder) and recomputes(holder)
    # A model with nothing that can recompute: refused, saying what to do instead.
    job = cast(Any, SimpleNamespace(model=torch.nn.Sequential(torch.nn.Linear(2, 2)), rank=0))
    with pytest.raises(ValueError, match=r"model.gradient_checkpointing = true, but Sequential"):
        Engine(job, tmp_path / "other", recipe.read_text(), str(recipe), 2).checkpointing()
