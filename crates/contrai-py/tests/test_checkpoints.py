"""The PyTorch engine's checkpoints: what trains is written, a frozen base is not, and a frozen
matrix that pruning zeroed comes back from its originals."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from conftest import require

require("torch")

import torch

import contrai
from contrai import _core
from contrai.conductor import Conductor, RunInfo
from contrai.engine.checkpoints import Checkpoints, CorruptCheckpoint, load_weights, put_back
from contrai.engine.masks import Masks
from contrai.protocol import CheckpointRecord


def record(step: int) -> CheckpointRecord:
    """A whole checkpoint record of ``step`` (with a conductor's state)."""
    conductor = Conductor(contrai.default_recipe(), RunInfo(train_samples=100, classes=2, weights=["w"], heads=None))
    return {"format": _core.RECORD_FORMAT, "step": step, "samples": 32 * step, "metrics_len": 0, "decisions_len": 0,
            "conductor": conductor.state()}


class LoraLike(torch.nn.Module):
    """A frozen 'base' matrix with a small trainable layer after it."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.base = torch.nn.Linear(64, 64)
        self.adapter = torch.nn.Linear(64, 4)
        for p in self.base.parameters():
            p.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.adapter(torch.relu(self.base(x)))
        return out


def lora_like() -> LoraLike:
    return LoraLike()


def prune_base(model: torch.nn.Module, ckpts: Checkpoints, share: float) -> Masks:
    masks = Masks()
    masks.update(model, {"targets": {"base.weight": {"sparsity": share, "cap": 1.0}}, "scope": "module", "heads": None})
    ckpts.keep_originals(model, masks.keep)
    masks.apply(model)
    return masks


def test_a_checkpoint_holds_what_trains_and_a_restore_rebuilds_pruned_frozen_matrices(tmp_path: Path) -> None:
    model = lora_like()
    original = model.base.weight.detach().clone()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)
    ckpts = Checkpoints(tmp_path / "checkpoints", keep_last=5)
    ckpts.write(1, model, opt, Masks(), record(1), [])
    saved = torch.load(ckpts.dir(1) / "model.pt")
    assert set(saved) == {"adapter.weight", "adapter.bias"}, "the frozen base is not written"
    adapter1 = model.adapter.weight.detach().clone()

    masks = prune_base(model, ckpts, 0.5)
    model(torch.randn(8, 64)).sum().backward()
    opt.step()
    ckpts.write(2, model, opt, masks, record(2), [])
    at2 = {k: v.detach().clone() for k, v in model.state_dict().items()}
    assert float((model.base.weight == 0).float().mean()) == 0.5

    masks = prune_base(model, ckpts, 0.8)
    assert torch.equal(torch.load(ckpts.original_file("base.weight")), original), "kept once, before any pruning"

    back = ckpts.read({"Step": 1})
    assert load_weights(model, back) == []
    assert torch.equal(model.base.weight, original), "the pruned frozen matrix is whole again"
    assert torch.equal(model.adapter.weight, adapter1)
    back = ckpts.read("Latest")
    load_weights(model, back)
    for k, v in model.state_dict().items():
        assert torch.equal(v, at2[k]), k
    assert back.masks.overall() == 0.5


def test_a_parameter_frozen_at_the_checkpoint_and_trained_since_is_named(tmp_path: Path) -> None:
    model = lora_like()
    ckpts = Checkpoints(tmp_path / "checkpoints", keep_last=5)
    ckpts.write(3, model, None, Masks(), record(3), [])
    model.base.bias.requires_grad_(True)
    assert load_weights(model, ckpts.read("Latest")) == ["base.bias"]


def test_old_checkpoints_are_removed_but_the_kept_ones_stay(tmp_path: Path) -> None:
    model = lora_like()
    ckpts = Checkpoints(tmp_path / "checkpoints", keep_last=2)
    for step in (10, 20, 30, 40):
        ckpts.write(step, model, None, Masks(), record(step), [10])
    assert ckpts.steps() == [10, 30, 40]
    ckpts.drop_after(10)
    assert ckpts.steps() == [10]


def test_a_checkpoint_that_does_not_match_its_sums_is_never_loaded(tmp_path: Path) -> None:
    model = lora_like()
    ckpts = Checkpoints(tmp_path / "checkpoints", keep_last=5)
    for step in (10, 20):
        with torch.no_grad():
            model.adapter.weight.add_(1.0)
        ckpts.write(step, model, None, Masks(), record(step), [])
    f = ckpts.dir(20) / "model.pt"
    f.write_bytes(f.read_bytes()[:-7])  # a torn write
    back = ckpts.read("Latest")
    assert (back.step, back.skipped) == (10, [20])
    with pytest.raises(CorruptCheckpoint, match="does not match its SHA-256"):
        ckpts.read({"Step": 20})


def test_put_back_restores_values_and_gradients() -> None:
    model = lora_like()
    w = model.adapter.weight
    model(torch.randn(2, 64)).sum().backward()
    assert w.grad is not None
    value, grad = w.detach().clone(), w.grad.clone()

    def measure_in_place() -> None:
        with torch.no_grad():
            w.zero_()
        w.grad = None

    with put_back([w]):
        measure_in_place()
    assert torch.equal(w, value) and torch.equal(w.grad, grad)


def test_the_envelope_is_the_run_formats_and_old_format_2_checkpoints_still_read(tmp_path: Path) -> None:
    import hashlib
    import subprocess

    model = lora_like()
    ckpts = Checkpoints(tmp_path / "checkpoints", keep_last=5)
    ckpts.write(5, model, None, Masks(), record(5), [])
    d = ckpts.dir(5)
    # One envelope for both engines: SHA256SUMS over every file, sha256sum's own format.
    listed = {line.split("  ")[1] for line in (d / "SHA256SUMS").read_text().splitlines()}
    assert listed == {"model.pt", "masks.pt", "state.json"}
    assert subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=d).returncode == 0
    assert json.loads((d / "state.json").read_text())["format"] == _core.RECORD_FORMAT

    # A checkpoint of the format before it: its sums inside state.json, no SHA256SUMS.
    old = ckpts.dir(3)
    old.mkdir()
    torch.save({k: v for k, v in model.state_dict().items() if k.startswith("adapter")}, old / "model.pt")
    Masks().save(str(old / "masks.pt"))
    sums = {n: hashlib.sha256((old / n).read_bytes()).hexdigest() for n in ("model.pt", "masks.pt")}
    (old / "state.json").write_text(json.dumps({**record(3), "format": 2, "frozen": ["base.weight", "base.bias"],
                                                "sha256": sums}))
    assert ckpts.read({"Step": 3}).record["format"] == 2
    (old / "model.pt").write_bytes(b"torn")
    with pytest.raises(CorruptCheckpoint, match="does not match its SHA-256"):
        ckpts.read({"Step": 3})


class RunsCode:
    """An object whose unpickling calls ``open(marker, "w")``: what a crafted file would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("planted", ["model.pt", "optimizer.pt", "masks.pt"])
def test_a_pickle_that_would_run_code_in_a_run_directory_is_refused(tmp_path: Path, planted: str) -> None:
    model = lora_like()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)
    ckpts = Checkpoints(tmp_path / "checkpoints", keep_last=5)
    ckpts.write(1, model, opt, Masks(), record(1), [])
    marker = tmp_path / "ran"
    torch.save(RunsCode(marker), ckpts.dir(1) / planted)
    with pytest.raises(pickle.UnpicklingError):
        ckpts.load(1, json.dumps(record(1)), [])
    assert not marker.exists(), "the crafted pickle ran"


def test_a_damaged_record_is_refused_naming_its_file_and_field(tmp_path: Path) -> None:
    model = lora_like()
    ckpts = Checkpoints(tmp_path / "checkpoints", keep_last=5)
    ckpts.write(4, model, None, Masks(), record(4), [])
    back = ckpts.read({"Step": 4}).record
    assert (back["step"], back["lost_steps"], back["merged"]) == (4, 0, False), "defaults filled in"
    state = json.loads((ckpts.dir(4) / "state.json").read_text())
    state["conductor"]["step"] = "four"
    with pytest.raises(ValueError, match=r"step-0*4/state.json: field `conductor.step`"):
        ckpts.load(4, json.dumps(state), [])
    with pytest.raises(ValueError, match=r"field `format` is 9; this Contrai reads a checkpoint record of format 1, 2, 3, 4"):
        ckpts.load(4, json.dumps({**state, "format": 9}), [])
