#!/usr/bin/env python3
"""Decontamination: `contrai data audit --against` against datatrove's n-gram filter
(NGramsDecontIndexer's hashes + NGramsDecontFilter) on the same files, with planted overlaps.

    python scripts/bench/data/decontam.py [--sa ../shared/data/spamassassin.jsonl] [--runs 3] [--work DIR]

Needs datatrove (with regex, xxhash, spacy; the index hashes are written by hand as its indexer
does, which otherwise loads lighteval tasks from the network) and target/release/contrai.

The files: SpamAssassin's e-mails, 400 of them held out as the evaluation set, the other 5,646
the training data, in which 150 e-mails get a 20-word passage of an evaluation e-mail inserted
mid-text and 50 are replaced by an evaluation e-mail whose first word is capitalised and whose
last word is changed. Both tools compare 13-grams. Recall is over the 200 planted samples; the
e-mails each finds besides (the corpus holds real copies across the split) are compared too.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
CLI = ROOT / "target" / "release" / "contrai"
N = 13


def make(sa: Path, work: Path) -> tuple[Path, Path, set[str]]:
    rows = [json.loads(x) for x in sa.read_text().split("\n") if x.strip()]
    rng = random.Random(7)
    rng.shuffle(rows)
    evals, train = rows[:400], rows[400:]
    long_evals = [e for e in evals if len(e["text"].split()) >= 60]
    planted: set[str] = set()
    for t in rng.sample(train, 200):
        src = rng.choice(long_evals)["text"].split()
        if len(planted) < 150:
            start = rng.randrange(0, len(src) - 20)
            words = t["text"].split()
            mid = len(words) // 2
            t["text"] = " ".join(words[:mid] + src[start:start + 20] + words[mid:])
        else:
            t["text"] = " ".join([src[0].capitalize()] + src[1:-1] + ["changed"])
        planted.add(t["id"])
    train_path, eval_path = work / "train.jsonl", work / "eval.jsonl"
    train_path.write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}) + "\n" for r in train))
    eval_path.write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}) + "\n" for r in evals))
    return train_path, eval_path, planted


def contrai(train: Path, evals: Path) -> tuple[float, set[str]]:
    t = time.perf_counter()
    out = subprocess.run([str(CLI), "data", "audit", str(train), "--against", str(evals), "--ngram", str(N), "--json"],
                         capture_output=True, text=True)
    wall = time.perf_counter() - t
    return wall, {h["id"] for h in json.loads(out.stdout)["contamination"]["hits"]}


def datatrove(train: Path, evals: Path) -> tuple[float, set[str]]:
    from datatrove.data import Document
    from datatrove.pipeline.decont.n_grams import NGramsDecontConfig, NGramsDecontFilter, NGramsDecontIndexer
    from datatrove.utils.hashing import HashConfig

    # datatrove 0.10's default xxhash path hashes str, which xxhash 3 refuses: sha1 it is.
    cfg = NGramsDecontConfig(n_grams=N, hash_config=HashConfig(hash_fc="sha1"))
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as index:
        indexer = NGramsDecontIndexer(index, lighteval_tasks=[], config=cfg)
        hashes: set[int] = set()
        for line in evals.read_text().split("\n")[:-1]:
            hashes.update(indexer.compute_hashes(json.loads(line)["text"]))
        np.array(sorted(hashes), dtype=cfg.hash_config.np_descr).tofile(f"{index}/eval.index.hashes")
        filt = NGramsDecontFilter(index, config=cfg)
        found = set()
        for line in train.read_text().split("\n")[:-1]:
            r = json.loads(line)
            if filt.filter(Document(text=r["text"], id=r["id"])) is not True:
                found.add(r["id"])
    return time.perf_counter() - t, found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sa", type=Path, default=ROOT.parent / "shared" / "data" / "spamassassin.jsonl")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "contrai-bench-decont")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    train, evals, planted = make(args.sa, args.work)
    times: dict[str, list[float]] = {"contrai": [], "datatrove": []}
    found: dict[str, set[str]] = {}
    for _ in range(args.runs):
        for name, tool in (("contrai", contrai), ("datatrove", datatrove)):
            wall, ids = tool(train, evals)
            times[name].append(wall)
            found[name] = ids
    for name, ids in found.items():
        print(json.dumps({"tool": name, "runs": args.runs, "median_wall_s": round(statistics.median(times[name]), 2),
                          "planted_found": len(ids & planted), "planted": len(planted),
                          "recall": round(len(ids & planted) / len(planted), 3),
                          "other_found": len(ids - planted)}))
    c, d = found["contrai"] - planted, found["datatrove"] - planted
    print(json.dumps({"other_found_by_both": len(c & d), "only_contrai": len(c - d), "only_datatrove": len(d - c),
                      "only_contrai_examples": sorted(c - d)[:5], "only_datatrove_examples": sorted(d - c)[:5]}))


if __name__ == "__main__":
    main()
