"""Runs where trackers keep them, written by the trackers' own packages: a run on an MLflow
tracking server (``mlflow server``, started here and stopped after) read over its REST API and
followed by ``contrai doctor --follow`` while new points arrive, and the same run read from the
server's database; a Trackio project's database."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import require

require("mlflow", "trackio")

import contrai

# An overfitting run: train loss falls throughout; eval loss (every 25 steps) is lowest at step
# BEST and rises after it.
BEST = 300


def train_loss(step: int) -> float:
    return 1.2 * math.exp(-step / 150) + 0.05


def eval_loss(step: int) -> float:
    return 0.6 + 0.5 * ((step - BEST) / 300) ** 2


def labels(report: dict[str, Any]) -> dict[str, int | None]:
    return {f["label"]: f.get("step") for f in report["findings"]}


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[str]:
    """A local ``mlflow server`` (SQLite behind it) on a free port: its http URI."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                               "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
                               "--default-artifact-root", str(tmp_path / "artifacts")],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "mlflow server did not come up in 120 s"
            time.sleep(0.5)
        yield uri
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
        log.close()


def log_points(client: Any, run_id: str, steps: range) -> None:
    """The train loss every 5 steps and the eval loss every 25, as a Trainer's MLflowCallback logs them."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    metrics = [Metric("train_loss", train_loss(s), now + s, s) for s in steps if s % 5 == 0]
    metrics += [Metric("eval_loss", eval_loss(s), now + s, s) for s in steps if s % 25 == 0 and s > 0]
    for i in range(0, len(metrics), 500):
        client.log_batch(run_id, metrics=metrics[i:i + 500])


def test_a_run_on_a_tracking_server_is_read_and_followed(mlflow_server: str, tmp_path: Path) -> None:
    import mlflow
    from mlflow.entities import Param

    client = mlflow.MlflowClient(tracking_uri=mlflow_server)
    experiment = client.create_experiment("sst2")
    run = client.create_run(experiment, run_name="bert-sst2").info.run_id
    client.log_batch(run, params=[Param("learning_rate", "5e-05"), Param("lr_scheduler_type", "cosine"),
                                  Param("warmup_ratio", "0.03"), Param("per_device_train_batch_size", "32")])
    log_points(client, run, range(0, BEST + 1))
    host = mlflow_server.removeprefix("http://")

    # Read once: the run by its id, as the doctor reads any log; healthy so far.
    [report] = contrai.doctor(f"mlflow://{host}/{run}")
    assert report["name"] == "bert-sst2"
    assert report["source"] == f"{mlflow_server}/#/experiments/{experiment}/runs/{run}"
    setup = report["setup"]
    assert (setup["peak_lr"], setup["batch_size"], setup["schedule"]) == (5e-05, 32, "cosine"), setup
    assert "overfitting" not in labels(report), report["findings"]

    # Followed: the points logged after the doctor started are read as they arrive, and the
    # overfitting they show is said while the run goes on. The experiment by its name, the
    # server from MLFLOW_TRACKING_URI.
    bin_ = contrai.find_contrai_bin()
    # `--watch`, the old name of `--follow`, still accepted.
    watch = subprocess.Popen([bin_, "doctor", "--watch", "--json", "--idle-secs", "10", "mlflow:sst2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "MLFLOW_TRACKING_URI": mlflow_server})
    try:
        time.sleep(3)
        for start in range(BEST + 1, 601, 50):
            log_points(client, run, range(start, start + 50))
            time.sleep(0.5)
        out, err = watch.communicate(timeout=120)
    finally:
        watch.kill()
    assert watch.returncode in (0, 1, 2), err
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    said = [line for line in lines if "runs" not in line]
    assert any(line["finding"]["label"] == "overfitting" for line in said), (said, err)
    [final] = lines[-1]["runs"]
    assert labels(final)["overfitting"] is not None
    # The last report is the doctor's on the whole run, read once.
    [whole] = contrai.doctor(f"mlflow://{host}/{run}")
    assert labels(whole) == labels(final)
    # The database behind the server, read as a file (MLflow 3's default local store), says the same.
    [from_db] = contrai.doctor(tmp_path / "mlflow.db")
    assert (from_db["name"], from_db["setup"], from_db["findings"]) == (whole["name"], whole["setup"], whole["findings"])


# A job logging to Trackio, in a process of its own: Trackio reads TRACKIO_DIR when imported.
TRACKIO_JOB = """
import sys, trackio
from test_tracking_servers import eval_loss, train_loss
trackio.init(project="sst2", name="bert-sst2",
             config={"learning_rate": 5e-05, "lr_scheduler_type": "constant", "per_device_train_batch_size": 32})
for s in range(0, 601, 5):
    row = {"train/loss": train_loss(s), "train/learning_rate": 5e-05}
    if s % 25 == 0 and s > 0:
        row["eval/loss"] = eval_loss(s)
    trackio.log(row, step=s)
trackio.finish()
"""


def test_a_trackio_project_reads_as_its_runs(tmp_path: Path) -> None:
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    job = subprocess.run([sys.executable, "-c", TRACKIO_JOB], capture_output=True, text=True, env=env, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    db = tmp_path / "trackio" / "sst2.db"
    [report] = contrai.doctor(db)
    assert report["name"] == "bert-sst2"
    assert {s["file"] for s in report["setup"]["settings"]} == {"Trackio config"}
    found = labels(report)
    assert "overfitting" in found and "lr_no_decay" in found, report["findings"]
    # By the project's name, where Trackio keeps it.
    by_name = subprocess.run([contrai.find_contrai_bin(), "doctor", "--json", "trackio:sst2"], capture_output=True,
                             text=True, env=env)
    assert json.loads(by_name.stdout)["runs"] == [report], by_name.stderr
