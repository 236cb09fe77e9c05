"""ContraiCallback in a Lightning Trainer: the same lifecycle, each action applied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence, cast

from conftest import ServedRows, dataset, declared, require

require("torch", "lightning")

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.utilities.types import STEP_OUTPUT
from packaging.specifiers import SpecifierSet
from torch.utils.data import DataLoader

from contrai.integrations._compat import UntestedVersion
from contrai.integrations._compat import lightning as compat
from contrai.engine import planned_steps
from contrai.integrations.lightning import ContraiCallback

RECIPE = """
[run]
eval_every = 10
checkpoint_every = 10
[validate]
steps = 20
batch = 8
lr = 1e-2
min_fall = 0.5
[main]
steps = 80
batch = 16
lr = 5e-3
[contract]
eval_every = 5
stable_checkpoints = 1000
patience = 1000
divergence = 1.0
prune = [{ params = "net.0.weight", init = 0.1, final = 0.5 }]
[refine.distill]
enabled = false
"""


def task(n: int, seed: int, noise: float = 0.03) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    flip = torch.rand(n, generator=g) < noise
    y = torch.where(flip, 1 - y, y)
    return [(x[i], y[i]) for i in range(n)]


class Mlp(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                       torch.nn.Linear(32, 2))
        self.lrs: dict[int, float] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out

    def training_step(self, batch: Sequence[torch.Tensor], i: int) -> torch.Tensor:
        self.lrs[self.trainer.global_step] = self.trainer.optimizers[0].param_groups[0]["lr"]
        return torch.nn.functional.cross_entropy(self(batch[0]), batch[1])

    def validation_step(self, batch: Sequence[torch.Tensor], i: int) -> None:
        pass

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def first_weight(module: Mlp) -> torch.Tensor:
    """The weight of ``net.0``, the layer the recipe prunes (``Sequential`` indexes as any module)."""
    return cast(torch.nn.Linear, module.net[0]).weight


class LrAtStep(pl.Callback):
    """The LR the optimizer steps with (after the callback set it)."""

    def __init__(self) -> None:
        self.lr: list[float] = []

    def on_before_optimizer_step(self, trainer: pl.Trainer, module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        self.lr.append(optimizer.param_groups[0]["lr"])


def test_every_action_is_applied_in_a_lightning_job(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE)
    data = ServedRows(task(512, 1))
    seen = LrAtStep()
    module = Mlp()
    trainer = pl.Trainer(max_steps=110, callbacks=[ContraiCallback(recipe, tmp_path / "run", holdout_dataset=task(64, 3)), seen],
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         accelerator="cpu", num_sanity_val_steps=0)
    trainer.fit(module, DataLoader(dataset(data), batch_size=16, shuffle=True),
                DataLoader(dataset(task(128, 2)), batch_size=64))
    run = tmp_path / "run"
    decisions = [json.loads(x) for x in (run / "decisions.jsonl").read_text().splitlines()]
    kinds = [d["kind"] for d in decisions]
    for k in ["validate_passed", "force_contract", "drop_noisiest", "enter_contract", "enter_refine", "holdout"]:
        assert k in kinds, f"{k} missing from {kinds}"
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    planned = [r["lr"] for r in metrics if "train_loss" in r]
    assert seen.lr == pytest.approx(planned, rel=1e-9), "every step ran at the conductor's LR"
    assert module.net[2].p == pytest.approx(0.1), "dropout × 0.5"
    evaluation = json.loads((run / "final" / "eval.json").read_text())
    w = first_weight(module)
    assert evaluation["sparsity"]["net.0"] == pytest.approx(float((w == 0).float().mean()), abs=1e-9)
    caps = next(d for d in decisions if d["kind"] == "sensitivity")["evidence"]["caps"]
    # floor(share × 256 entries) are pruned: within one entry of the share.
    assert evaluation["sparsity"]["net.0"] == pytest.approx(min(0.5, caps["net.0"]), abs=1 / 256)
    dropped = {int(i) for i in next(d for d in decisions if d["kind"] == "drop_noisiest")["evidence"]["ids"]}
    assert dropped and data.after_drop and not dropped & set(data.after_drop)
    assert evaluation["holdout_accuracy"] > 0.85


class StopAt(pl.Callback):
    """Stops the job after an optimizer step (a preemption)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: pl.Trainer, module: pl.LightningModule, outputs: STEP_OUTPUT, batch: Any,
                           batch_idx: int) -> None:
        if trainer.global_step >= self.step:
            trainer.should_stop = True


def fit(tmp_path: Path, recipe: Path, run: str, *, stop_at: int | None = None,
        ckpt: str | None = None) -> tuple[Mlp, LrAtStep]:
    """The test job with Lightning's own checkpointing every 5 steps, stopped or resumed as asked."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    torch.manual_seed(0)
    seen = LrAtStep()
    saver = ModelCheckpoint(dirpath=tmp_path / f"ckpt-{run}", every_n_train_steps=5, save_top_k=-1,
                            filename="{step}")
    callbacks = [ContraiCallback(recipe, tmp_path / run, holdout_dataset=task(64, 3)), seen, saver]
    if stop_at is not None:
        callbacks.append(StopAt(stop_at))
    module = Mlp()
    trainer = pl.Trainer(max_steps=110, callbacks=callbacks, logger=False, enable_progress_bar=False,
                         accelerator="cpu", num_sanity_val_steps=0)
    data = DataLoader(dataset(ServedRows(task(512, 1))), batch_size=16, shuffle=False)
    trainer.fit(module, data, DataLoader(dataset(task(128, 2)), batch_size=64), ckpt_path=ckpt)
    return module, seen


def test_a_lightning_job_stopped_mid_contraction_resumes_with_the_same_decisions(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE)
    whole, _ = fit(tmp_path, recipe, "whole")
    # Contraction starts at optimizer step 80; stop at 88, resume from Lightning's checkpoint of 85.
    fit(tmp_path, recipe, "resumed", stop_at=88)
    ckpt = tmp_path / "ckpt-resumed" / "step=85.ckpt"
    saved = torch.load(ckpt, weights_only=False)["callbacks"][ContraiCallback(recipe, tmp_path / "x").state_key]
    assert set(saved) == {"record", "masks", "rng"}, "the callback's state_dict rides in Lightning's checkpoint"
    assert len(saved["rng"]) == 1 and saved["record"]["next_lr"] > 0, "one rank's generators, the next step's LR"
    assert saved["record"]["step"] == 85 + 20 and saved["record"]["conductor"]["phase"] == "contract"
    resumed, seen = fit(tmp_path, recipe, "resumed", ckpt=str(ckpt))

    def read(run: str, name: str) -> list[dict[str, Any]]:
        return [json.loads(x) for x in (tmp_path / run / name).read_text().splitlines()]

    def decided(run: str) -> list[tuple[int, str]]:
        return [(d["step"], d["kind"]) for d in read(run, "decisions.jsonl")]

    assert decided("resumed") == decided("whole")
    drop = [d["evidence"]["ids"] for r in ("whole", "resumed") for d in read(r, "decisions.jsonl")
            if d["kind"] == "drop_noisiest"]
    assert drop[0] == drop[1]
    steps = {r: [x for x in read(r, "metrics.jsonl") if "train_loss" in x] for r in ("whole", "resumed")}
    assert [x["step"] for x in steps["resumed"]] == [x["step"] for x in steps["whole"]]
    # After the resume every step ran at the LR the uninterrupted job ran at: the anneal carried on.
    after = [x["lr"] for x in steps["whole"] if x["phase"] != "main"][-len(seen.lr):]
    assert seen.lr == pytest.approx(after, rel=1e-9)
    # The pruning masks and the dropout scale came back: the same sparsity, the same dropout.
    assert resumed.net[2].p == pytest.approx(whole.net[2].p) == pytest.approx(0.1)
    sparsity = [json.loads((tmp_path / r / "final" / "eval.json").read_text())["sparsity"] for r in ("whole", "resumed")]
    # Within one entry of the 256: the resumed job's weights are not bit for bit the uninterrupted
    # job's after the resume, and an exact magnitude tie at the threshold prunes every tied entry
    # (both open: the session note of 2026-12-03).
    assert sparsity[0].keys() == sparsity[1].keys() and sparsity[0]["net.0"] > 0
    assert sparsity[0]["net.0"] == pytest.approx(sparsity[1]["net.0"], abs=1.01 / 256)
    w = first_weight(resumed)
    assert float((w == 0).float().mean()) == pytest.approx(sparsity[1]["net.0"], abs=1e-9)


def test_a_strategy_that_shards_parameters_is_refused_when_the_recipe_prunes(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy

    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE)
    cb = ContraiCallback(recipe, tmp_path / "run")
    val = [DataLoader(dataset(task(16, 2)))]
    cb._check(cast(pl.Trainer, SimpleNamespace(val_dataloaders=val, strategy=DDPStrategy(), max_steps=110)))
    with pytest.raises(ValueError, match="pruning needs whole parameters: FSDPStrategy shards them"):
        cb._check(cast(pl.Trainer, SimpleNamespace(val_dataloaders=val, strategy=FSDPStrategy(), max_steps=110)))
    recipe.write_text(RECIPE.replace('prune = [{ params = "net.0.weight", init = 0.1, final = 0.5 }]', "prune = []"))
    ContraiCallback(recipe, tmp_path / "run")._check(cast(pl.Trainer, SimpleNamespace(
        val_dataloaders=val, strategy=FSDPStrategy(), max_steps=110)))


class NanOnce(Mlp):
    """The MLP whose loss is NaN at one training step (a fp16-style blow-up)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.fired = at, False

    def training_step(self, batch: Sequence[torch.Tensor], i: int) -> torch.Tensor:
        loss = super().training_step(batch, i)
        if self.trainer.global_step == self.at and not self.fired:
            self.fired = True
            return loss * float("nan")
        return loss


def fit_once(tmp_path: Path, module: pl.LightningModule, recipe_text: str = RECIPE, *, holdout: bool = True,
        train: DataLoader[tuple[torch.Tensor, torch.Tensor]] | None = None,
        **trainer_args: Any) -> tuple[pl.Trainer, Path, list[dict[str, Any]]]:
    """``module`` fitted under ContraiCallback for up to 110 steps: the Trainer, the recipe file,
    and the decisions."""
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(recipe_text)
    cb = ContraiCallback(recipe, tmp_path / "run", holdout_dataset=task(64, 3) if holdout else None)
    trainer = pl.Trainer(max_steps=110, callbacks=[cb], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, accelerator="cpu", num_sanity_val_steps=0, **trainer_args)
    trainer.fit(module, train or DataLoader(dataset(task(512, 1)), batch_size=16, shuffle=True),
                DataLoader(dataset(task(128, 2)), batch_size=64))
    decisions = [json.loads(x) for x in (tmp_path / "run" / "decisions.jsonl").read_text().splitlines()]
    return trainer, recipe, decisions


def lost_to_the_rollback(back: dict[str, Any], decisions: list[dict[str, Any]]) -> int:
    """Steps a rollback took back: from the lifecycle's step at the decision to the checkpoint's."""
    restored = next(d for d in decisions if d["kind"] == "engine_substitute" and "checkpoint_step" in d["evidence"])
    lost: int = back["step"] - restored["evidence"]["checkpoint_step"]
    return lost


def test_a_nan_step_rolls_back_and_the_plan_still_finishes(tmp_path: Path) -> None:
    module = NanOnce(at=45)
    trainer, recipe, decisions = fit_once(tmp_path, module,
                                     train=DataLoader(dataset(ServedRows(task(512, 1))), batch_size=16, shuffle=True))
    back = next(d for d in decisions if d["kind"] == "rollback_nonfinite")
    assert back["evidence"]["train_loss"] == "NaN"
    assert decisions[-1]["kind"] == "holdout", "the Trainer's step limit grew by the lost steps"
    # The failed step (the lifecycle's back["step"]) and those back to the checkpoint are lost.
    lost = lost_to_the_rollback(back, decisions)
    assert lost > 1 and trainer.global_step == planned_steps(RECIPE, str(recipe)) + lost > 110
    assert torch.isfinite(first_weight(module)).all(), "the NaN weights were replaced by the checkpoint's"


class NanEvalOnce(Mlp):
    """The MLP whose logits overflow to NaN in one evaluation after step ``at`` (an fp16 forward
    past its range; the weights stay finite)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.fired, self.trained_to = at, False, 0

    def training_step(self, batch: Sequence[torch.Tensor], i: int) -> torch.Tensor:
        self.trained_to = self.trainer.global_step
        return super().training_step(batch, i)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        if not self.training and self.trained_to >= self.at and not self.fired:
            self.fired = True
            return out * float("nan")
        return out


def test_a_nan_evaluation_is_recorded_and_rolled_back(tmp_path: Path) -> None:
    trainer, recipe, decisions = fit_once(tmp_path, NanEvalOnce(at=45))
    back = next(d for d in decisions if d["kind"] == "rollback_nonfinite")
    assert back["evidence"]["val_loss"] == "NaN" and back["reason"].startswith("non-finite validation loss"), back
    assert decisions[-1]["kind"] == "holdout"
    lost = lost_to_the_rollback(back, decisions)
    assert lost > 0 and trainer.global_step == planned_steps(RECIPE, str(recipe)) + lost


def test_a_trainer_that_stops_before_the_plan_ends_is_told_what_to_set(tmp_path: Path) -> None:
    _, recipe, decisions = fit_once(tmp_path, Mlp(), holdout=False,
                                    train=DataLoader(dataset(task(512, 1)), batch_size=16), max_epochs=1)
    last = decisions[-1]
    planned = planned_steps(RECIPE, str(recipe))
    assert last["kind"] == "engine_substitute" and f"set Trainer(max_steps={planned})" in last["reason"], last
    assert last["evidence"] == {"trainer_step": 32, "lifecycle_step": 52, "max_steps": planned}
    assert not (tmp_path / "run" / "final" / "eval.json").exists()


def test_whole_units_asked_of_a_model_without_their_names_are_recorded(tmp_path: Path) -> None:
    module = Mlp()
    _, _, decisions = fit_once(tmp_path, module, RECIPE.replace("[contract]\n", "[contract]\nprune_units = true\n"),
                          holdout=False, train=DataLoader(dataset(task(512, 1)), batch_size=16))
    said = [d for d in decisions if d["kind"] == "engine_substitute" and d["reason"].startswith("prune whole")]
    assert [d["evidence"] for d in said] == [{"asked": "contract.prune_units"}], said
    assert "single-weight magnitude" in said[0]["reason"]
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in metrics if "sparsity" in r][-1]
    zeros = float((first_weight(module) == 0).float().mean())
    assert zeros > 0 and zeros == pytest.approx(last["sparsity/net.0"], abs=1e-9), (zeros, last)


def test_an_optimizer_step_over_accumulated_batches_is_one_step_of_the_plan(tmp_path: Path) -> None:
    trainer, recipe, decisions = fit_once(tmp_path, Mlp(), accumulate_grad_batches=2)
    assert decisions[-1]["kind"] == "holdout"
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    stepped = [r for r in metrics if "train_loss" in r]
    planned = planned_steps(RECIPE, str(recipe))
    assert trainer.global_step == len(stepped) == planned, "one Stepped an optimizer step, not a batch"
    assert stepped[0]["batch_size"] == 32, "16 a batch, 2 batches a step"


def test_the_tested_lightning_range_is_the_declared_one_and_checked(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    assert declared("lightning", "lightning") == SpecifierSet(",".join(compat.TESTED))
    assert compat.check(), "the installed lightning is in the tested range"
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE)
    monkeypatch.setattr(compat, "TESTED", ("<1",))
    cb = ContraiCallback(recipe, tmp_path / "run")
    with pytest.warns(UntestedVersion, match=r"tested with lightning<1, and lightning \S+ is installed"):
        with pytest.raises(ValueError, match="needs validation data"):
            cb.on_train_start(SimpleNamespace(val_dataloaders=None), Mlp())  # type: ignore[arg-type]


def test_the_recipes_gradient_checkpointing_is_refused_for_a_module_that_cannot_recompute(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"model.gradient_checkpointing = true, but Mlp holds no transformers model"):
        fit_once(tmp_path, Mlp(), "[model]\ngradient_checkpointing = true\n" + RECIPE)


def test_a_module_with_nothing_to_train_is_refused_before_its_optimizer_is_made(tmp_path: Path) -> None:
    """A planted broken pipeline: every parameter frozen. Refused in the callback's setup, with
    the usual cause, before Lightning's optimizer fails on an empty parameter list."""
    module = Mlp()
    for p in module.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="every parameter of the model is frozen"):
        fit_once(tmp_path, module)
    assert not (tmp_path / "run" / "decisions.jsonl").exists()
