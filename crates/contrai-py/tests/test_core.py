"""The Rust core through Python: recipe errors, the conductor's protocol, the run writer."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from conftest import require

import contrai
from contrai import _core
from contrai.conductor import Conductor, RunInfo, kind
from contrai.rows import words_json


def test_a_recipe_error_names_file_line_key_and_the_nearest_key() -> None:
    with pytest.raises(ValueError) as e:
        contrai.recipe_check("[main]\nsteps = 10\nlrr = 0.1\n", "spam.toml")
    msg = str(e.value)
    assert msg.startswith("spam.toml:3:") and "did you mean `lr`?" in msg, msg
    with pytest.raises(ValueError, match="contract.batch"):
        contrai.recipe_check("[main]\nbatch = 32\n[contract]\nbatch = 8\n", "r.toml")
    assert "[main]" in contrai.recipe_check("", "r.toml"), "resolved: every default filled in"


def test_the_conductor_speaks_the_protocol_from_python() -> None:
    c = Conductor(contrai.default_recipe(), RunInfo(train_samples=100, classes=2, weights=["w"], heads=None))
    turn = c.begin()
    assert kind(turn["actions"][0])[0] == "Replan"
    name, payload = kind(turn["request"])
    assert name == "CheckPipeline" and payload["steps"] == 30
    turn = c.observe({"PipelineChecked": {"first_loss": 0.7, "last_loss": 0.01, "val_loss": 0.69}})
    kinds = [p["kind"] for n, p in map(kind, turn["actions"]) if n == "Record"]
    assert kinds == ["validate_passed"]
    assert turn["request"] == "RoundTrip"
    turn = c.observe({"RoundTripped": {"identical": True, "model_bytes": 1, "optimizer_bytes": 1}})
    name, plan = kind(turn["request"])
    assert name == "Train" and plan == {"step": 30, "phase": "main", "lr": pytest.approx(5e-4 / 12)}
    state = c.state()
    assert state["step"] == 30 and state["phase"] == "main"
    with pytest.raises(ValueError, match="observation: .*Stepped"):
        c.observe({"Steped": {"loss": 0.5}})  # type: ignore[arg-type]  # deliberately no observation
    # A failed step: its NaN loss reaches the conductor (JSON has no NaN), which rolls back.
    turn = c.observe({"Stepped": {"loss": float("nan"), "grad_norm": 1.0, "lr": plan["lr"]}})
    assert kind(turn["request"])[0] == "Restore", turn
    with pytest.raises(RuntimeError, match="does not answer"):
        c.observe({"Evaluated": {"val_loss": 0.5, "val_accuracy": 0.9}})


def test_the_run_writer_checks_rows_and_stamps_the_format(tmp_path: Path) -> None:
    w = _core.RunWriter(str(tmp_path / "run"), "test")
    w.metric(json.dumps({"step": 1, "phase": "main", "val_loss": 0.5, "val_accuracy": 0.9}))
    with pytest.raises(ValueError, match="evaluation row"):
        w.metric(json.dumps({"step": 1, "phase": "main", "val_loss": "x", "val_accuracy": 1}))
    with pytest.raises(ValueError, match="decision"):
        w.decide(json.dumps({"step": 1, "kind": "nope"}))
    assert json.loads((tmp_path / "run" / "run.json").read_text())["format"] == contrai.RUN_FORMAT
    (tmp_path / "run" / "run.json").write_text('{"format": 9, "writer": "later"}')
    with pytest.raises(ValueError, match="format 9"):
        _core.RunWriter(str(tmp_path / "run"), "test")


def test_a_diverged_evaluation_is_written_as_a_word_and_read_back(tmp_path: Path) -> None:
    w = _core.RunWriter(str(tmp_path / "run"), "test")
    for step in range(1, 31):
        w.metric(words_json({"step": step, "phase": "main", "samples": 32 * step, "train_loss": 1 / step,
                             "lr": 1e-3, "grad_norm": 1.0, "batch_size": 32, "wall_s": 0.1 * step}))
    w.metric(words_json({"step": 30, "phase": "main", "val_loss": float("nan"), "val_accuracy": 0.5}))
    w.metric(words_json({"step": 31, "phase": "validate", "validate_loss": float("-inf")}))
    w.sync()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-2]["val_loss"] == "NaN" and rows[-1]["validate_loss"] == "-Infinity"
    [run] = contrai.doctor(tmp_path / "run")
    assert "nonfinite" in {f["label"] for f in run["findings"]}, run
    assert {f["confidence"] for f in run["findings"] if f["label"] == "nonfinite"} == {"high"}, run


def test_a_headerless_tsv_is_split_with_the_columns_given(tmp_path: Path) -> None:
    rng = random.Random(5)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6)) for _ in range(400)]
    rows = [
        ("spam" if i % 3 == 0 else "ham", " ".join(rng.sample(words, 12)) + ' "hello"')
        for i in range(300)
    ]
    data = tmp_path / "mail.tsv"
    data.write_text("".join(f"{label}\t{text}\n" for label, text in rows))
    assert contrai.audit(data, columns=["label", "text"])["samples"] == 300, "quotes are text in TSV"
    manifest = contrai.split(data, tmp_path / "split", columns=["label", "text"])
    assert sum(p["count"] for p in manifest["partitions"]) == 300
    train = (tmp_path / "split" / "train.tsv").read_text().splitlines()
    assert train[0] == "label\ttext" and '"hello"' in train[1]
    with pytest.raises(ValueError, match="named twice"):
        contrai.split(data, tmp_path / "other", columns=["text", "text"])
    # Version 2: 60 more rows; every old sample keeps its partition.
    more = [("ham", " ".join(rng.sample(words, 12))) for _ in range(60)]
    grown = tmp_path / "mail-v2.tsv"
    grown.write_text(data.read_text() + "".join(f"{label}\t{text}\n" for label, text in more))
    v2 = contrai.split(grown, tmp_path / "split-v2", columns=["label", "text"], parent=tmp_path / "split")
    assert v2["version"] == 2 and v2["parent"]["lost"] == [0, 0, 0]
    assert v2["parent"]["kept"] == [p["count"] for p in manifest["partitions"]]
    assert sum(v2["parent"]["added"]) == 60


def test_the_engine_refuses_a_request_or_an_action_it_does_not_know(tmp_path: Path) -> None:
    require("torch")
    from contrai.engine import Engine, Job

    engine = Engine(Job(), tmp_path / "run", contrai.default_recipe(), "r.toml", classes=2)
    with pytest.raises(RuntimeError, match=r"asked for 'Spam', which the PyTorch engine does not carry out \(it knows "
                                           r"CheckPipeline, Distil, Evaluate, Export, Fail, Finish, .*Train\)"):
        # Deliberately no request of the protocol.
        engine.run({"actions": [], "request": {"Spam": {}}})  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"the action 'Eggs', .*\(it knows Checkpoint, DropSamples, MergeAdapters, Quarantine, "):
        # Deliberately no action of the protocol.
        engine.run({"actions": [{"Eggs": 1}], "request": "RoundTrip"})  # type: ignore[arg-type]
    engine.run({"actions": [{"SetPhase": {"phase": "contract", "restart_order": False}}],
                "request": {"Fail": {"Diverged": "test"}}})
    assert (engine.phase, engine.failed) == ("contract", "Diverged: test"), "each table's entry carries it out"


def test_the_sensitivity_scan_takes_evenly_spread_whole_batches() -> None:
    require("torch")
    import torch
    from torch.utils.data import BatchSampler, DataLoader, Dataset, SequentialSampler

    from contrai.engine import spread_batches

    class Numbers(Dataset[torch.Tensor]):
        def __len__(self) -> int:
            return 40

        def __getitem__(self, i: int) -> torch.Tensor:
            return torch.tensor(i)

    loader: DataLoader[torch.Tensor] = DataLoader(Numbers(), batch_size=4)
    picked = spread_batches(loader, 8)
    assert [b.tolist() for b in picked] == [[0, 1, 2, 3], [20, 21, 22, 23]]
    assert [b[0].item() for b in spread_batches(loader, 9)] == [0, 12, 24], "whole batches: 3 of 4"
    assert spread_batches(loader, None) is loader and spread_batches(loader, 40) is loader
    # The batch size of a loader built on a batch sampler (accelerate's in a Trainer) is the sampler's.
    sampled = DataLoader(Numbers(), batch_sampler=BatchSampler(SequentialSampler(range(40)), 4, False))
    assert sampled.batch_size is None
    assert [b.tolist() for b in spread_batches(sampled, 8)] == [[0, 1, 2, 3], [20, 21, 22, 23]]


def stub_signatures() -> dict[str, list[str]]:
    """What ``_core.pyi`` declares: each function and method (``Class.method``) with its
    parameter names, ``self`` left out; each class as a name with no parameters."""
    import ast

    stub = Path(_core.__file__).with_name("_core.pyi")
    if not stub.is_file():
        stub = Path(contrai.__file__).with_name("_core.pyi")
    tree = ast.parse(stub.read_text())
    out: dict[str, list[str]] = {}

    def params(f: ast.FunctionDef) -> list[str]:
        names = [a.arg for a in f.args.posonlyargs + f.args.args + f.args.kwonlyargs]
        return [n for n in names if n != "self"]

    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = params(node)
        elif isinstance(node, ast.ClassDef):
            out[node.name] = []
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and not (f.name.startswith("__") and f.name != "__init__"):
                    out[f"{node.name}.{f.name}"] = params(f)
    return out


def core_signatures() -> dict[str, list[str]]:
    """What the built extension exports, read the same way from its text signatures (a class's
    constructor from the class's own)."""
    import inspect

    out: dict[str, list[str]] = {}

    def params(obj: Any) -> list[str]:
        if getattr(obj, "__text_signature__", None) is None:
            return []
        return [p for p in inspect.signature(obj).parameters if p not in ("self", "cls")]

    for name, obj in vars(_core).items():
        if name.startswith("_") or not callable(obj):
            continue
        if isinstance(obj, type):
            out[name] = []
            if getattr(obj, "__text_signature__", None) is not None:
                out[f"{name}.__init__"] = params(obj)
            for m, f in vars(obj).items():
                if not m.startswith("_") and callable(getattr(obj, m)):
                    out[f"{name}.{m}"] = params(getattr(obj, m))
        else:
            out[name] = params(obj)
    return out


def test_the_stub_declares_what_the_extension_exports() -> None:
    """``_core.pyi`` is written by hand for its types; its names and parameter names are checked
    against the built extension, so the two cannot drift apart."""
    stub, core = stub_signatures(), core_signatures()
    assert sorted(set(core) - set(stub)) == [], "exported but not in _core.pyi"
    assert sorted(set(stub) - set(core)) == [], "in _core.pyi but not exported"
    differ = {k: (stub[k], core[k]) for k in stub if stub[k] != core[k]}
    assert differ == {}, "parameters differ (stub, extension)"
