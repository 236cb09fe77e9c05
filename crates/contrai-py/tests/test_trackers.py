"""Runs where they live: a real W&B run (``wandb`` in offline mode, from a Hugging Face Trainer
job's ``report_to``) read by the doctor, which must find in it what it finds in the same job's
Trainer state; and the lifecycle's decisions, phase and final figures in every tracker a job logs
to (W&B, MLflow, TensorBoard, Trackio: ``contrai.integrations.trackers``), each read back from the tracker's own
records at the job's steps."""

from __future__ import annotations

import json
import sqlite3
import struct
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Iterator, Mapping, get_args

import pytest
from conftest import HF_RECIPE, decisions, require, tiny_bert, token_task

require("torch", "transformers", "accelerate", "wandb")

import torch
from transformers import Trainer, TrainingArguments

import contrai
from contrai import protocol
from contrai.integrations.hf import ContraiCallback
from contrai.integrations.trackers import PHASES, Trackers

def findings(runs: list[dict[str, Any]]) -> list[tuple[str, int | None, str]]:
    return sorted((f["label"], f.get("step"), f["severity"]) for run in runs for f in run["findings"])


@pytest.fixture
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """W&B offline and quiet (no account, no network), its runs in ``tmp_path/wandb``; W&B's
    process-wide setup, which keeps the first settings it read, let go before and after."""
    import wandb

    wandb.teardown()
    for k, v in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path),
                 "WANDB_PROJECT": "contrai-test", "WANDB_DISABLE_GIT": "true"}.items():
        monkeypatch.setenv(k, v)
    yield
    wandb.teardown()


@pytest.mark.usefixtures("offline_wandb")
def test_a_wandb_run_of_a_trainer_job_reads_as_its_trainer_state(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # A constant LR to the end: a finding both records must show at the same step.
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=16, per_device_eval_batch_size=32,
                             max_steps=120, learning_rate=2e-3, lr_scheduler_type="constant", logging_steps=5,
                             eval_strategy="steps", eval_steps=20, save_strategy="steps", save_steps=120,
                             report_to=["wandb"], run_name="tiny-bert", use_cpu=True, seed=0, disable_tqdm=True)
    trainer = Trainer(model=tiny_bert(), args=args, train_dataset=token_task(512, 1), eval_dataset=token_task(128, 2))
    trainer.train()
    import wandb

    wandb.finish()
    wandb_records(tmp_path)  # the one run, read once W&B's service wrote its exit record
    from_wandb = contrai.doctor(tmp_path / "wandb")
    from_state = contrai.doctor(out / "checkpoint-120" / "trainer_state.json")
    assert [r["name"] for r in from_wandb] == ["tiny-bert"], "named by its run record"
    assert any(f[0] == "lr_no_decay" for f in findings(from_wandb)), findings(from_wandb)
    assert findings(from_wandb) == findings(from_state)


# ---- the decisions in the trackers ----------------------------------------------------------------

# HF_RECIPE's validate check: lifecycle steps the Trainer never took.
VALIDATE = 20
# The Trainer step whose loss is NaN: the rollback must be on the charts there.
NAN_AT = 35


class NanOnce(Trainer):
    """A Trainer whose loss is NaN at optimizer step ``NAN_AT``, once."""

    fired = False

    def compute_loss(self, model: Any, inputs: Any, *a: Any, **k: Any) -> Any:
        loss = super().compute_loss(model, inputs, *a, **k)
        if self.state.global_step + 1 == NAN_AT and not self.fired and isinstance(loss, torch.Tensor):
            self.fired = True
            return loss * float("nan")
        return loss


@pytest.fixture(scope="module")
def mlflow_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One local MLflow store (SQLite) for the module's jobs: making its tables takes seconds. Its
    experiments keep their artifacts beside it (by default, ./mlruns of the working directory)."""
    require("mlflow")
    from mlflow import MlflowClient

    folder = tmp_path_factory.mktemp("mlflow")
    store = f"sqlite:///{folder / 'mlflow.db'}"
    for name in ("contrai-hf", "contrai-lightning"):
        MlflowClient(store).create_experiment(name, artifact_location=(folder / name).as_uri())
    return store


def local_trackio(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trackio's projects in ``folder``: it reads ``TRACKIO_DIR`` once, at import, into each of
    its modules, so each module's copy is pointed there (never the user's cache)."""
    require("trackio")
    monkeypatch.setenv("TRACKIO_DIR", str(folder))
    for name, module in list(sys.modules.items()):
        if name == "trackio" or name.startswith("trackio."):
            for attr, sub in (("TRACKIO_DIR", ""), ("MEDIA_DIR", "media"), ("ARTIFACTS_DIR", "artifacts")):
                if isinstance(getattr(module, attr, None), Path):
                    monkeypatch.setattr(module, attr, folder / sub if sub else folder)


def trainer_steps(ds: list[dict[str, Any]], rollback_at: int, last: int) -> list[int]:
    """The job's step of each decision, from the lifecycle's: validate's check is none of the job's
    steps; the rollback is at the step that failed; after it the lifecycle is behind the job by the
    steps taken back, as the last decision (at the job's ``last`` step) shows."""
    back = next(i for i, d in enumerate(ds) if d["kind"] == "rollback_nonfinite")
    behind = last - (ds[-1]["step"] - VALIDATE)
    return [max(0, d["step"] - VALIDATE) if i < back else rollback_at if i == back else d["step"] - VALIDATE + behind
            for i, d in enumerate(ds)]


def expected_rows(ds: list[dict[str, Any]], steps: list[int]) -> list[tuple[Any, ...]]:
    """Each decision as the trackers' rows hold it: job step, lifecycle step, phase, kind, reason, evidence."""
    return [(s, d["step"], d["phase"], d["kind"], d["reason"], d["evidence"]) for d, s in zip(ds, steps)]


def same(a: Any, b: Any) -> bool:
    """JSON values equal, floats within 1e-12 (``decisions.jsonl`` went through serde's parser,
    which may round a float's last digit; the trackers got the conductor's own values)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == pytest.approx(b, rel=1e-12)
    return bool(a == b)


def check_rows(got: list[tuple[Any, ...]], ds: list[dict[str, Any]], steps: list[int]) -> None:
    """A tracker's rows are the decisions at their job steps, in order."""
    want = expected_rows(ds, steps)
    assert len(got) == len(want) and all(same(list(g), list(w)) for g, w in zip(got, want)), (got, want)


def as_row(r: Mapping[str, Any]) -> tuple[Any, ...]:
    """A tracker's row (its evidence JSON parsed) as :func:`expected_rows` gives one."""
    return (int(r["trainer_step"]), int(r["step"]), r["phase"], r["kind"], r["reason"], json.loads(r["evidence"]))


def markers(ds: list[dict[str, Any]], steps: list[int]) -> Counter[tuple[str, int]]:
    """Each decision's marker (``contrai/decision/<kind>``) at its job step."""
    return Counter((f"contrai/decision/{d['kind']}", s) for d, s in zip(ds, steps))


def check_phases(logged: list[tuple[int, float]], ds: list[dict[str, Any]], steps: list[int]) -> None:
    """The phase scalar, in the order logged: each phase once, in the conductor's order, each
    change between the job step of the previous phase's last decision and its own first."""
    codes = [int(v) for _, v in logged]
    assert codes == sorted(set(codes)) == [PHASES[p] for p in dict.fromkeys(d["phase"] for d in ds)], logged
    for (step, code), prev in zip(logged, [None, *logged]):
        phase = next(p for p, c in PHASES.items() if c == code)
        first = min(s for d, s in zip(ds, steps) if d["phase"] == phase)
        after = 0 if prev is None else max(s for d, s in zip(ds, steps) if PHASES[d["phase"]] == prev[1])
        assert after <= step <= first, (phase, step, after, first)


def check_summary(got: Mapping[str, Any], run: Path, ds: list[dict[str, Any]]) -> None:
    """The final figures a tracker holds are the run's: eval.json's, the card's, the decisions counted."""
    ev = json.loads((run / "final" / "eval.json").read_text())
    card = json.loads((run / "final" / "model-card.json").read_text())
    want = {"contrai/holdout_accuracy": ev["holdout_accuracy"], "contrai/holdout_loss": ev["holdout_loss"],
            "contrai/val_loss": ev["val_loss"], "contrai/step": ev["step"], "contrai/decision_count": len(ds),
            "contrai/rollbacks": 1, "contrai/parameters": card["parameters"],
            "contrai/variants/f32/bytes": card["variants"][0]["bytes"],
            "contrai/int8/bytes": ev["int8"]["bytes"]}
    want |= {f"contrai/sparsity/{m}": v for m, v in ev["sparsity"].items()}
    for k, v in want.items():
        assert float(got[k]) == pytest.approx(v, rel=1e-6), (k, got.get(k), v)


def wandb_records(folder: Path) -> tuple[Path, list[Any]]:
    """The one W&B run under ``folder``: its folder and the records of its ``.wandb`` file, once
    its exit record is in (W&B's service may still be writing when ``wandb.finish`` returns)."""
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    [path] = folder.glob("wandb/offline-run-*/run-*.wandb")
    for _ in range(100):
        try:
            records = wandb_file(path)
        except DecodeError:  # a record W&B's service is still writing: read again
            records = []
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return path.parent, records
        time.sleep(0.1)
    raise AssertionError(f"{path} has no exit record")


def wandb_file(path: Path) -> list[Any]:
    """The records of a ``.wandb`` file: a 7-byte header, then LevelDB's log format — 32 KiB blocks
    of records, each a 7-byte header (CRC, length, type: full, first, middle, last) and its piece
    of a protobuf ``Record``."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, piece, out = path.read_bytes(), 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if left < 7 or (n == 0 and kind == 0):  # a block's zero-filled tail
            pos += left
            continue
        piece, pos = piece + data[pos + 7:pos + 7 + n], pos + 7 + n
        if kind in (1, 4):
            # The generated protobuf module ships no stubs naming its classes.
            out.append(pb.Record.FromString(piece))  # type: ignore[attr-defined]
            piece = b""
    return out


def items(entries: Any) -> dict[str, Any]:
    """A W&B history row's or summary update's items, by their full key."""
    return {(e.key or "/".join(e.nested_key)): json.loads(e.value_json) for e in entries}


def check_wandb(folder: Path, step_key: str, run: Path, ds: list[dict[str, Any]], steps: list[int]) -> None:
    """The decisions, phase and summary in the offline W&B run's own record."""
    where, records = wandb_records(folder)
    rows = [items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    summary: dict[str, Any] = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            summary |= items(r.summary.update)
    got = Counter((k, int(h[step_key])) for h in rows for k in h if k.startswith("contrai/decision/"))
    assert got == markers(ds, steps)
    check_phases([(int(h[step_key]), h["contrai/phase"]) for h in rows if "contrai/phase" in h], ds, steps)
    table = [json.loads((where / "files" / h["contrai/decisions/path"]).read_text()) for h in rows
             if "contrai/decisions/path" in h]
    check_rows([as_row(dict(zip(t["columns"], r))) for t in table for r in t["data"]], ds, steps)
    check_summary(summary, run, ds)
    assert summary["contrai/final_phase"] == "refine"


def check_mlflow(store: str, experiment: str, run: Path, ds: list[dict[str, Any]], steps: list[int],
                 tmp_path: Path) -> None:
    """The decisions, phase and summary in the MLflow run's metrics, artifact and tags."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=store)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    [found] = client.search_runs([exp.experiment_id])
    run_id, data = found.info.run_id, found.data
    kinds = {f"contrai/decision/{d['kind']}" for d in ds}
    got = Counter((k, m.step) for k in kinds for m in client.get_metric_history(run_id, k))
    assert got == markers(ds, steps)
    phases = sorted(client.get_metric_history(run_id, "contrai/phase"), key=lambda m: (m.step, m.value))
    check_phases([(m.step, m.value) for m in phases], ds, steps)
    text = Path(client.download_artifacts(run_id, "contrai/decisions.jsonl", str(tmp_path))).read_text()
    check_rows([as_row(json.loads(x)) for x in text.splitlines()], ds, steps)
    check_summary(data.metrics, run, ds)
    assert data.tags["contrai/final_phase"] == "refine"


def check_tensorboard(folder: Path, run: Path, ds: list[dict[str, Any]], steps: list[int]) -> None:
    """The decisions, phase and summary in the job's TensorBoard event file."""
    require("tensorboard")
    from tensorboard.backend.event_processing import event_accumulator as ea

    [events] = {p.parent for p in folder.rglob("events.out.tfevents.*")}
    acc = ea.EventAccumulator(str(events), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    got = Counter((t, e.step) for t in tags if t.startswith("contrai/decision/") for e in acc.Scalars(t))
    assert got == markers(ds, steps)
    check_phases([(e.step, e.value) for e in acc.Scalars("contrai/phase")], ds, steps)
    texts = [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors("contrai/decisions/text_summary")]
    assert [s for s, _ in texts] == steps
    for (_, text), d in zip(texts, ds):
        assert f"**{d['kind']}** ({d['phase']}, lifecycle step {d['step']}" in text and d["reason"] in text, text
        assert same(json.loads(text.split("\n\n    ", 1)[1]), d["evidence"]), text
    last = max(steps)
    check_summary({t: acc.Scalars(t)[-1].value for t in tags if acc.Scalars(t)[-1].step == last}, run, ds)


def check_trackio(folder: Path, project: str, run: Path, ds: list[dict[str, Any]], steps: list[int]) -> None:
    """The decisions, phase and summary in the local Trackio project's database."""
    db = sqlite3.connect(folder / f"{project}.db")
    rows = [json.loads(m) for (m,) in db.execute("select metrics from metrics order by id")]
    db.close()
    got = Counter((k, int(r["train/global_step"])) for r in rows for k in r if k.startswith("contrai/decision/"))
    assert got == markers(ds, steps)
    check_phases([(int(r["train/global_step"]), r["contrai/phase"]) for r in rows if "contrai/phase" in r], ds, steps)
    table = [r["contrai/decisions"]["_value"] for r in rows if "contrai/decisions" in r]
    check_rows([as_row(x) for t in table for x in t], ds, steps)
    check_summary(next(r for r in rows if "contrai/holdout_accuracy" in r), run, ds)


@pytest.mark.usefixtures("offline_wandb")
def test_a_trainer_jobs_decisions_are_in_each_tracker_it_reports_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  mlflow_store: str) -> None:
    require("mlflow", "tensorboard", "trackio")
    local_trackio(tmp_path / "trackio", monkeypatch)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "contrai-hf")
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(HF_RECIPE)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=16,
                             per_device_eval_batch_size=32, max_steps=80, learning_rate=1e-3, logging_steps=5,
                             report_to=["wandb", "mlflow", "tensorboard", "trackio"], run_name="tiny-bert",
                             project="contrai-test", save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True)
    trainer = NanOnce(model=tiny_bert(), args=args, train_dataset=token_task(400, 1), eval_dataset=token_task(100, 2))
    ContraiCallback(recipe, run_dir=tmp_path / "run", holdout_dataset=token_task(60, 3)).attach(trainer)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="contrai: .* failed", category=RuntimeWarning)
        trainer.train()
    import wandb

    wandb.finish()
    run = tmp_path / "run"
    ds = decisions(run)
    assert ds[-1]["kind"] == "holdout" and any(d["kind"] == "rollback_nonfinite" for d in ds), ds
    steps = trainer_steps(ds, NAN_AT, trainer.state.global_step)
    check_wandb(tmp_path, "train/global_step", run, ds, steps)
    check_mlflow(mlflow_store, "contrai-hf", run, ds, steps, tmp_path / "mlflow")
    check_tensorboard(tmp_path / "out", run, ds, steps)
    check_trackio(tmp_path / "trackio", "contrai-test", run, ds, steps)


def test_the_phase_codes_are_the_conductors_phases_in_order() -> None:
    assert list(PHASES) == [get_args(p)[0] for p in get_args(protocol.Phase)]
    assert list(PHASES.values()) == list(range(len(PHASES)))


class Broken:
    """A tracker whose run fails at every write (a closed run, a lost server)."""

    name = "Broken"

    def __init__(self) -> None:
        self.calls = 0

    def log(self, step: int, scalars: Mapping[str, float], row: Any) -> None:
        self.calls += 1
        raise ConnectionError("the server went away")

    def summary(self, step: int, figures: Mapping[str, float], words: Mapping[str, str]) -> None:
        self.calls += 1
        raise ConnectionError("the server went away")


def test_a_tracker_that_fails_is_warned_of_once_and_left_out() -> None:
    broken = Broken()
    trackers = Trackers(lambda: [broken], lambda: 7)
    decision = {"step": 27, "phase": "main", "kind": "lr_cut_plateau", "reason": "flat", "evidence": {}}
    with pytest.warns(RuntimeWarning, match="Broken failed .*the server went away") as caught:
        trackers.decision(decision)
        trackers.decision(decision)
        trackers.summary({"contrai/step": 1.0}, {})
    assert broken.calls == 1 and len(caught) == 1


def test_trackers_are_looked_for_once_and_a_failed_look_leaves_none() -> None:
    looked: list[int] = []

    def find() -> list[Any]:
        looked.append(1)
        raise ImportError("no wandb")

    trackers = Trackers(find, lambda: 0)
    with pytest.warns(RuntimeWarning, match="could not be found"):
        trackers.phase("validate")
    trackers.phase("main")
    assert looked == [1] and trackers.sinks == []


@pytest.mark.usefixtures("offline_wandb")
def test_a_lightning_jobs_decisions_are_in_each_of_its_loggers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              mlflow_store: str) -> None:
    require("lightning", "mlflow", "tensorboard")
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import MLFlowLogger, TensorBoardLogger, WandbLogger
    from torch.utils.data import DataLoader
    from conftest import dataset
    from test_lightning import RECIPE, NanOnce as NanModule, task

    from contrai.integrations.lightning import ContraiCallback as LightningCallback

    recipe = tmp_path / "recipe.toml"
    recipe.write_text(RECIPE)
    loggers = [TensorBoardLogger(tmp_path / "tb", name="job"), WandbLogger(save_dir=tmp_path, offline=True),
               MLFlowLogger(experiment_name="contrai-lightning", tracking_uri=mlflow_store)]
    trainer = pl.Trainer(max_steps=110, callbacks=[LightningCallback(recipe, tmp_path / "run", holdout_dataset=task(64, 3))],
                         logger=loggers, enable_checkpointing=False, enable_progress_bar=False, accelerator="cpu",
                         num_sanity_val_steps=0)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="contrai: .* failed", category=RuntimeWarning)
        trainer.fit(NanModule(at=45), DataLoader(dataset(task(512, 1)), batch_size=16, shuffle=True),
                    DataLoader(dataset(task(128, 2)), batch_size=64))
    import wandb

    wandb.finish()
    run = tmp_path / "run"
    ds = decisions(run)
    assert ds[-1]["kind"] == "holdout" and any(d["kind"] == "rollback_nonfinite" for d in ds), ds
    # The NaN loss is the step the Trainer counts as 46: the rollback is on the charts there.
    steps = trainer_steps(ds, 46, trainer.global_step)
    check_tensorboard(tmp_path / "tb", run, ds, steps)
    check_wandb(tmp_path, "trainer/global_step", run, ds, steps)
    check_mlflow(mlflow_store, "contrai-lightning", run, ds, steps, tmp_path / "mlflow")
