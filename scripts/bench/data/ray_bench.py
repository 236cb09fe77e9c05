#!/usr/bin/env python3
"""The audit's near-duplicate clusters through Ray Data against `contrai data audit` on one
machine: the same clusters (checked), and documents a second a core for each.

    python scripts/bench/data/ray_bench.py FILE.jsonl [FILE.jsonl ...] [--runs 3] [--cpus 2]

Needs the Python package (pip install ./crates/contrai-py), ray[data] and polars, and the release
binary target/release/contrai. Each run is timed on its own: the CLI as a process
(`contrai data audit FILE --json > /dev/null`, its threads on every core), Ray inside one driver
process on a local cluster of --cpus workers started once beforehand (start-up reported apart),
`read_json` through the clusters. The two alternate run by run; medians are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402

from contrai.integrations.ray import _id_order, near_duplicate_clusters  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
CLI = ROOT / "target" / "release" / "contrai"


def cli_clusters(path: Path) -> tuple[float, list[list[str]]]:
    t = time.perf_counter()
    out = subprocess.run([str(CLI), "data", "audit", str(path), "--json"], capture_output=True, text=True)
    wall = time.perf_counter() - t
    report = json.loads(out.stdout)
    clusters = sorted((sorted(c["ids"], key=_id_order) for c in report["clusters"]), key=lambda c: _id_order(c[0]))
    return wall, clusters


def ray_clusters(path: Path, blocks: int) -> tuple[float, list[list[str]]]:
    t = time.perf_counter()
    ds = ray.data.read_json(str(path)).select_columns(["id", "text"]).repartition(blocks)
    clusters = near_duplicate_clusters(ds)
    return time.perf_counter() - t, clusters


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args()
    t = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    print(f"ray.init: {time.perf_counter() - t:.1f} s (not counted)")
    for path in args.files:
        docs = sum(1 for line in path.open() if line.strip())
        cli, rays = [], []
        for _ in range(args.runs):
            w, want = cli_clusters(path)
            cli.append(w)
            w, got = ray_clusters(path, blocks=4 * args.cpus)
            rays.append(w)
            assert got == want, f"{path}: Ray found {len(got)} clusters, the CLI {len(want)}"
        c, r = statistics.median(cli), statistics.median(rays)
        print(json.dumps({"file": path.name, "docs": docs, "clusters": len(want), "runs": args.runs,
                          "cli_wall_s": round(c, 2), "ray_wall_s": round(r, 2),
                          "cli_docs_per_s_per_core": round(docs / c / args.cpus),
                          "ray_docs_per_s_per_core": round(docs / r / args.cpus),
                          "cli_over_ray": round(r / c, 1), "same_clusters": True}))
    ray.shutdown()


if __name__ == "__main__":
    main()
