"""The audit sharded over a local Ray cluster (two workers): signatures on the workers, band
keys grouped by Ray, candidate pairs verified, clusters built on the driver — the same clusters
as ``contrai data audit`` on the same file."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import require, shared

import contrai
from contrai.integrations.ray import _id_order, near_duplicate_clusters, signatures

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no network at run time
# Ray is an optional dependency (its join needs polars): without them these tests are skipped and
# say why, instead of stopping the whole collection.
require("ray", "polars")
import ray  # noqa: E402


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def corpus(path: Path) -> Path:
    """600 texts with planted exact copies, near copies (one word changed) and empty ones."""
    rng = random.Random(3)
    vocab = [f"w{i}" for i in range(3000)]
    rows = [" ".join(rng.choice(vocab) for _ in range(rng.randint(25, 60))) for _ in range(520)]
    for k in range(40):
        words = rows[k].split(" ")
        words[-1] = "changed"
        rows.append(" ".join(words))
    rows += [rows[100 + k] for k in range(30)] + ["", "  "] * 5
    rng.shuffle(rows)
    path.write_text("".join(json.dumps({"id": f"r{i:04d}", "text": t, "label": "x"}) + "\n"
                            for i, t in enumerate(rows)))
    return path


def audited(path: Path) -> list[list[str]]:
    clusters = [sorted(c["ids"], key=_id_order) for c in contrai.audit(path)["clusters"]]
    return sorted(clusters, key=lambda c: _id_order(c[0]))


def test_the_clusters_through_ray_equal_the_audits(cluster: Any, tmp_path: Path) -> None:
    path = corpus(tmp_path / "corpus.jsonl")
    ds = ray.data.read_json(str(path)).repartition(6)
    got = near_duplicate_clusters(ds)
    want = audited(path)
    assert len(want) >= 60, "the planted copies are clusters"
    assert got == want


def test_the_real_corpus_clusters_the_same_through_ray(cluster: Any) -> None:
    path = shared("data/spamassassin.jsonl")
    ds = ray.data.read_json(str(path)).select_columns(["id", "text"]).repartition(8)
    assert near_duplicate_clusters(ds) == audited(path)


def test_a_batch_without_ids_is_refused_with_the_fields_it_has() -> None:
    import pyarrow as pa

    with pytest.raises(ValueError, match="no id field `id`.*body.*give each row an id"):
        signatures(pa.table({"body": ["a b c"]}), text="body")
