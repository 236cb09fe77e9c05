"""Spike triage in PyTorch jobs: a planted bad batch spikes, is quarantined and leaves the training
set (Hugging Face and Lightning); a planted LR that spikes different batches is cut, also when the
checkpoint before the spike holds the spoiled weights; a length-grouped LM whose loss follows batch
length takes no action."""

from __future__ import annotations

import dataclasses
import json
import random
import statistics
from pathlib import Path
from typing import Any

from conftest import require, tiny_bert, token_task

require("torch", "transformers", "accelerate")

import torch
from torch.utils.data import Sampler, SequentialSampler
from transformers import (LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainerControl, TrainerState,
                          TrainingArguments)

from contrai import DroppableDataset
from contrai.integrations.hf import ContraiCallback

RECIPE = """
[run]
phases = {phases}
eval_every = 10
checkpoint_every = 10
[validate]
steps = 20
batch = 8
lr = 3e-3
min_fall = 0.5
[main]
steps = {steps}
batch = 16
lr = {lr}
"""

# What spike triage decides.
SPIKE_KINDS = ("rollback_spike", "drop_spiking", "lr_cut_spike", "abort_spike")

# The planted batch: the 10th of every epoch in row order (rows 144..159), its labels the
# opposite of what its first token says.
PLANTED = list(range(144, 160))


class InOrder(Trainer):
    """A Trainer that draws the training set in row order every epoch (as a curriculum or a
    pre-shuffled corpus does): the same batch comes back each epoch."""

    def _get_train_sampler(self, *a: Any, **k: Any) -> Sampler[int]:
        return SequentialSampler(self.train_dataset)  # type: ignore[arg-type]


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def args(out: Path, steps: int, **extra: Any) -> TrainingArguments:
    return TrainingArguments(output_dir=str(out), per_device_train_batch_size=16, per_device_eval_batch_size=32,
                             max_steps=steps, report_to=[], save_strategy="no", use_cpu=True, seed=0,
                             disable_tqdm=True, **extra)


def recipe(tmp_path: Path, steps: int, phases: str = '["validate", "main"]', lr: float = 2e-3) -> Path:
    p = tmp_path / "recipe.toml"
    p.write_text(RECIPE.format(steps=steps, phases=phases, lr=lr))
    return p


def planted_job(tmp_path: Path, resume: str | None = None) -> DroppableDataset:
    """The tiny BERT job on rows whose 10th batch is planted (the Trainer keeps every checkpoint it
    saves); its train set."""
    rows = token_task(400, 1, noise=0.0)
    for r in PLANTED:
        rows[r]["labels"] = 1 - rows[r]["labels"]
    data = DroppableDataset(rows)
    trainer = InOrder(model=tiny_bert(), args=args(tmp_path / "out", 200, save_total_limit=100), train_dataset=data,
                      eval_dataset=token_task(100, 2, noise=0.0))
    ContraiCallback(recipe(tmp_path, 150), run_dir=tmp_path / "run").attach(trainer)
    trainer.train(resume_from_checkpoint=resume)
    return data


def test_a_planted_bad_batch_spikes_is_quarantined_and_leaves(tmp_path: Path) -> None:
    data = planted_job(tmp_path)

    run = tmp_path / "run"
    decisions = jsonl(run / "decisions.jsonl")
    spikes = [d for d in decisions if d["kind"] in SPIKE_KINDS]
    kinds = [d["kind"] for d in spikes]
    assert kinds == ["rollback_spike", "drop_spiking"], [(d["kind"], d["reason"]) for d in spikes]
    quarantined = jsonl(run / "quarantine.jsonl")
    assert [q["cause"] for q in quarantined] == ["undetermined", "data"], quarantined
    assert all(q["rows"] == PLANTED for q in quarantined), quarantined
    # The planted rows left the training set and nothing spiked after; the run went on to its end.
    assert data.dropped == PLANTED
    assert spikes[1]["evidence"]["left"] == PLANTED
    main = [m for m in jsonl(run / "metrics.jsonl") if m["phase"] == "main" and "train_loss" in m]
    assert main[-1]["step"] == 20 + 150

    # Resumed from the Trainer's checkpoints between the two spikes, the job ends as the whole one
    # did: from the lifecycle's checkpoint before the second spike (its record says one entry),
    # quarantine.jsonl is cut back to its first entry and the second is written again; from the
    # one the Trainer saved right after the second rollback, the rows already left.
    whole = (quarantined, [(d["step"], d["kind"]) for d in decisions])
    saved = sorted((int(c.name.rsplit("-", 1)[1]), json.loads((c / "contrai.json").read_text()))
                   for c in (tmp_path / "out").glob("checkpoint-*"))
    size = (run / "quarantine.jsonl").stat().st_size
    between = [(n, r["quarantine_len"]) for n, r in saved if r["step"] < spikes[1]["step"] and r["quarantine_len"] > 0]
    cut_back = max(n for n, q in between if q < size)
    after_rollback = max(n for n, q in between if q == size)
    for n in (cut_back, after_rollback):
        planted_job(tmp_path, resume=str(tmp_path / "out" / f"checkpoint-{n}"))
        again = jsonl(run / "decisions.jsonl")
        assert (jsonl(run / "quarantine.jsonl"), [(d["step"], d["kind"]) for d in again]) == whole, n


class PlantLr(TrainerCallback):
    """The optimizer's LR × ``factor`` for one step at each of the Trainer's ``steps`` (after the
    conductor set it; a negative factor climbs the loss): the next step's loss spikes, on
    whatever batch comes."""

    def __init__(self, steps: set[int], factor: float) -> None:
        self.steps, self.factor = steps, factor

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                      optimizer: torch.optim.Optimizer | None = None, **kw: Any) -> None:
        if optimizer is not None and state.global_step + 1 in self.steps:
            for g in optimizer.param_groups:
                g["lr"] *= self.factor


class LrSeen(TrainerCallback):
    """The LR each lifecycle step ran at, each time it ran (a rollback replays steps), as the
    conductor set it."""

    def __init__(self) -> None:
        self.contrai: ContraiCallback | None = None
        self.runs: dict[int, list[float]] = {}

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                      optimizer: torch.optim.Optimizer | None = None, **kw: Any) -> None:
        assert self.contrai is not None and self.contrai.engine is not None and optimizer is not None
        self.runs.setdefault(self.contrai.engine.step + 1, []).append(optimizer.param_groups[0]["lr"])


def test_an_lr_that_spikes_different_batches_is_cut(tmp_path: Path) -> None:
    # The first planted step is lifecycle step 120, whose checkpoint holds the weights it spoiled:
    # the rollback goes below it.
    seen = LrSeen()
    trainer = Trainer(model=tiny_bert(), args=args(tmp_path / "out", 250),
                      train_dataset=DroppableDataset(token_task(400, 1, noise=0.0)),
                      eval_dataset=token_task(100, 2, noise=0.0), callbacks=[seen, PlantLr({100, 133}, -3000.0)])
    seen.contrai = ContraiCallback(recipe(tmp_path, 160), run_dir=tmp_path / "run").attach(trainer)
    trainer.train()

    run = tmp_path / "run"
    decisions = jsonl(run / "decisions.jsonl")
    spikes = [d for d in decisions if d["kind"] in SPIKE_KINDS]
    assert [d["kind"] for d in spikes] == ["rollback_spike", "lr_cut_spike"], [(d["kind"], d["reason"]) for d in spikes]
    assert [q["cause"] for q in jsonl(run / "quarantine.jsonl")] == ["undetermined", "optimisation"]
    # The steps the first rollback replayed ran at the schedule's LR again; those the second
    # replayed, and every step after, at half of it.
    first, cut = spikes[0]["step"], spikes[1]["step"]
    replayed = {s: lrs for s, lrs in seen.runs.items() if len(lrs) > 1}
    assert replayed and all(abs(lrs[1] / lrs[0] - 1) < 1e-9 for s, lrs in replayed.items() if s <= first)
    after = [lrs[-1] / lrs[0] for s, lrs in replayed.items() if s > first]
    assert after and all(abs(r - 0.5) < 1e-9 for r in after), after
    assert max(seen.runs) == 20 + 160 and cut < 20 + 160


# A corpus whose per-token loss follows sequence length: each sequence starts with three random
# tokens (unpredictable) and counts up from there (predictable once learnt), so a short sequence's
# mean token loss is many times a long one's. Grouped by length, the short ones come together
# and their batches' losses jump.
VOCAB = 48


def counting(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    g = random.Random(seed)
    out = []
    for _ in range(n):
        length = g.choice([5, 6]) if g.random() < 0.2 else g.randint(28, 32)
        ids = [g.randrange(VOCAB) for _ in range(3)]
        while len(ids) < length:
            ids.append((ids[-1] + 1) % VOCAB)
        t = torch.tensor(ids)
        out.append({"input_ids": t, "attention_mask": torch.ones(length, dtype=torch.long), "labels": t})
    return out


def pad(batch: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Right-padded to the batch's longest (labels -100 there)."""
    width = max(len(b["input_ids"]) for b in batch)

    def fill(key: str, value: int) -> torch.Tensor:
        return torch.stack([torch.cat([b[key], torch.full((width - len(b[key]),), value)]) for b in batch])

    return {"input_ids": fill("input_ids", 0), "attention_mask": fill("attention_mask", 0), "labels": fill("labels", -100)}


def by_length() -> dict[str, Any]:
    """The TrainingArguments that group batches by length: 5.x ``train_sampling_strategy``, 4.x
    ``group_by_length``."""
    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return {"train_sampling_strategy": "group_by_length"} if "train_sampling_strategy" in names else {"group_by_length": True}


def test_a_length_grouped_sawtooth_takes_no_action(tmp_path: Path) -> None:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    trainer = Trainer(model=LlamaForCausalLM(cfg), args=args(tmp_path / "out", 200, **by_length()),
                      train_dataset=DroppableDataset(counting(800, 1)), eval_dataset=counting(96, 2),
                      data_collator=pad)
    # A language model with random weights overfits one batch slowly: no validate check here.
    ContraiCallback(recipe(tmp_path, 120, phases='["main"]', lr=5e-3), run_dir=tmp_path / "run",
                    classes=VOCAB).attach(trainer)
    trainer.train()

    run = tmp_path / "run"
    losses = [m["train_loss"] for m in jsonl(run / "metrics.jsonl") if "train_loss" in m]
    assert len(losses) == 120
    # A sawtooth: every megabatch ends in short batches whose loss is several times the rest's ...
    high = [i for i in range(8, len(losses)) if losses[i] > 3 * statistics.median(losses[i - 8:i])]
    teeth = [i for i in high if i - 1 not in high]
    assert len(teeth) >= 5, losses
    # ... which is no spike: nothing rolled back, quarantined, cut or dropped.
    kinds = [d["kind"] for d in jsonl(run / "decisions.jsonl")]
    assert not set(SPIKE_KINDS) & set(kinds), kinds
    assert not (run / "quarantine.jsonl").exists()


def test_a_planted_bad_batch_leaves_a_lightning_job_too(tmp_path: Path) -> None:
    import lightning.pytorch as pl
    from test_lightning import Mlp, task
    from torch.utils.data import DataLoader

    from contrai.integrations.lightning import ContraiCallback as LightningCallback

    rows = task(400, 1, noise=0.0)
    for r in PLANTED:  # far from the boundary and labelled the other side of it
        rows[r] = (rows[r][0] * 4, 1 - rows[r][1])
    data = DroppableDataset(rows)
    job = LightningCallback(recipe(tmp_path, 150, phases='["main"]', lr=5e-3), tmp_path / "run")
    trainer = pl.Trainer(max_steps=250, accelerator="cpu", callbacks=[job], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, num_sanity_val_steps=0)
    trainer.fit(Mlp(), DataLoader(data, batch_size=16, shuffle=False),  # type: ignore[arg-type]
                DataLoader(task(128, 2), batch_size=32))  # type: ignore[arg-type]

    run = tmp_path / "run"
    kinds = [d["kind"] for d in jsonl(run / "decisions.jsonl") if d["kind"] in SPIKE_KINDS]
    assert kinds == ["rollback_spike", "drop_spiking"], kinds
    assert [q["rows"] for q in jsonl(run / "quarantine.jsonl")] == [PLANTED, PLANTED]
    assert data.dropped == PLANTED
