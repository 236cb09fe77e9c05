#!/usr/bin/env python3
"""Exact ground truth and recall for near-duplicate clustering.

    recall.py FILE.jsonl --tool NAME=CLUSTERS.json [--tool ...] [--cache GT.json]

Ground truth: every pair of distinct normalised texts whose shingle sets (the same
normalisation and shingles as Contrai and datasketch_audit.py) have exact Jaccard >= 0.8.
It is computed exactly with an all-pairs similarity join with prefix filtering (Bayardo et
al., "Scaling up all pairs similarity search", 2007): shingles are ordered by document
frequency, rarest first; a pair with Jaccard >= t must share a shingle among the first
|x| - ceil(t|x|) + 1 shingles of each set, so only pairs sharing such a prefix shingle (and
passing the size filter |y| >= t|x|) are compared, and every compared pair gets its exact
Jaccard. Thresholds are compared as exact fractions (4/5, 17/20), as Contrai's f64 division
of two integers compares equal at the boundary.

A tool finds a ground-truth pair when both texts' documents are in the same cluster of the
tool's output (Contrai's `--json` report, or the anchor's --out file). Recall is reported at
Jaccard >= 0.8 and >= 0.85, with the pairs each tool missed binned by similarity.
"""

import argparse
import json
import os
import sys
import time
from fractions import Fraction

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from datasketch_audit import read_groups, shingles  # noqa: E402

T = Fraction(4, 5)


def ceil_frac(f):
    return -((-f.numerator) // f.denominator)


def all_pairs(sets, t=T):
    """Pairs (i, j, inter, union) of sets (lists of hashable) with Jaccard >= t, exactly."""
    df = {}
    for s in sets:
        for tok in s:
            df[tok] = df.get(tok, 0) + 1
    # Rank tokens rarest first, ties broken by the token itself, so the order is total.
    rank = {tok: r for r, tok in enumerate(sorted(df, key=lambda k: (df[k], k)))}
    del df
    ordered = [sorted(rank[tok] for tok in s) for s in sets]
    order = sorted(range(len(sets)), key=lambda i: len(ordered[i]))
    index = {}
    out = []
    compared = 0
    for i in order:
        x = ordered[i]
        n = len(x)
        if n == 0:
            continue
        prefix = n - ceil_frac(t * n) + 1
        min_size = ceil_frac(t * n)
        cands = set()
        for tok in x[:prefix]:
            for j in index.get(tok, ()):
                if len(ordered[j]) >= min_size:
                    cands.add(j)
        if cands:
            xs = set(x)
            for j in cands:
                compared += 1
                y = ordered[j]
                inter = sum(1 for tok in y if tok in xs)
                union = n + len(y) - inter
                if Fraction(inter, union) >= t:
                    out.append((min(i, j), max(i, j), inter, union))
        for tok in x[:prefix]:
            index.setdefault(tok, []).append(i)
    return out, compared


def ground_truth(path, cache=None):
    if cache and os.path.exists(cache):
        with open(cache) as f:
            gt = json.load(f)
        if gt.get("path") == os.path.abspath(path) and gt.get("size") == os.path.getsize(path):
            return gt
    t0 = time.perf_counter()
    ids, groups = read_groups(path)
    live = [g for g, (norm, _) in enumerate(groups) if norm]
    sets = [shingles(groups[g][0]) for g in live]
    pairs, compared = all_pairs(sets)
    gt = {
        "path": os.path.abspath(path),
        "size": os.path.getsize(path),
        "docs": len(ids),
        "distinct": len(live),
        "compared": compared,
        "seconds": time.perf_counter() - t0,
        # One document id per text (its group's first row), and the pair's exact counts.
        "pairs": [[ids[groups[live[i]][1][0]], ids[groups[live[j]][1][0]], a, b] for i, j, a, b in pairs],
    }
    if cache:
        with open(cache, "w") as f:
            json.dump(gt, f)
    return gt


def cluster_of(path):
    with open(path) as f:
        rep = json.load(f)
    out = {}
    for c, cl in enumerate(rep["clusters"]):
        for i in cl["ids"] if isinstance(cl, dict) else cl:
            out[i] = c
    return out, len(rep["clusters"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path")
    ap.add_argument("--tool", action="append", default=[], help="NAME=CLUSTERS.json")
    ap.add_argument("--cache")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    gt = ground_truth(args.path, args.cache)
    print(
        f"ground truth: {gt['docs']} docs, {gt['distinct']} distinct texts, "
        f"{gt['compared']} pairs compared exactly after prefix filtering, "
        f"{len(gt['pairs'])} pairs with J >= 0.8 ({gt['seconds']:.1f} s)",
        file=sys.stderr,
    )
    results = {}
    bins = [(Fraction(4, 5), Fraction(17, 20)), (Fraction(17, 20), Fraction(9, 10)), (Fraction(9, 10), Fraction(1, 1) + 1)]
    for spec in args.tool:
        name, path = spec.split("=", 1)
        cof, n_clusters = cluster_of(path)
        res = {"clusters": n_clusters}
        for label, t in (("0.80", Fraction(4, 5)), ("0.85", Fraction(17, 20))):
            sel = [p for p in gt["pairs"] if Fraction(p[2], p[3]) >= t]
            found = sum(1 for a, b, _, _ in sel if a in cof and cof.get(a) == cof.get(b))
            res[label] = {"pairs": len(sel), "found": found, "recall": found / len(sel) if sel else 1.0}
        res["missed_by_bin"] = {}
        for lo, hi in bins:
            sel = [p for p in gt["pairs"] if lo <= Fraction(p[2], p[3]) < hi]
            miss = sum(1 for a, b, _, _ in sel if not (a in cof and cof.get(a) == cof.get(b)))
            res["missed_by_bin"][f"[{float(lo):.2f},{min(float(hi), 1.0):.2f}{')' if hi <= 1 else ']'}"] = [miss, len(sel)]
        results[name] = res
        print(
            f"RECALL tool={name} clusters={n_clusters} "
            f"r80={res['0.80']['found']}/{res['0.80']['pairs']}={res['0.80']['recall']:.4f} "
            f"r85={res['0.85']['found']}/{res['0.85']['pairs']}={res['0.85']['recall']:.4f} "
            f"missed_by_bin={res['missed_by_bin']}",
        )
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"ground_truth": {k: v for k, v in gt.items() if k != "pairs"}, "tools": results}, f, indent=1)


if __name__ == "__main__":
    main()
