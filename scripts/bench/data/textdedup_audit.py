#!/usr/bin/env python3
"""Anchor: text-dedup 0.4's MinHash near-deduplication, with its own defaults, on a JSONL file.

    textdedup_audit.py FILE.jsonl --out clusters.json

Runs the steps of `python -m text_dedup.minhash` with its own functions and defaults (word
5-grams of the text split on non-word characters, documents under 5 tokens left out, 250
permutations of SHA-1's 32-bit hashes, LSH bands and rows from its `optimal_param` at threshold
0.7, no verification: texts that share a band are one cluster), in memory instead of through a
Hugging Face dataset on disk (its loader reads the Hub). Writes every cluster of two or more, as
lists of ids. Needs `pip install text-dedup --no-deps` plus datasets, click,
click-option-group<0.6, rich<14, scipy, xxhash, numpy, tqdm, ftfy, regex.
"""

import argparse
import json
from collections import defaultdict

import numpy as np
from text_dedup.minhash import NON_ALPHA, embed_func
from text_dedup.utils import UnionFind, optimal_param, sha1_hash

NGRAM, MIN_LENGTH, NUM_PERM, THRESHOLD, SEED = 5, 5, 250, 0.7, 42


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows = [json.loads(line) for line in open(args.file)]
    # As its main(): 64-bit arithmetic over 32-bit SHA-1 hashes, permutations from seed 42.
    dtype, max_hash, prime = np.uint64, np.uint32((1 << 32) - 1), np.uint64((1 << 61) - 1)
    rng = np.random.RandomState(SEED)
    perms = (rng.randint(1, prime, size=(NUM_PERM,), dtype=dtype), rng.randint(0, prime, size=(NUM_PERM,), dtype=dtype))
    b, r = optimal_param(THRESHOLD, NUM_PERM, false_positive_weight=0.5, false_negative_weight=0.5)
    ranges = [(i * r, (i + 1) * r) for i in range(b)]
    tables = [defaultdict(set) for _ in range(b)]
    for idx, row in enumerate(rows):
        if len(NON_ALPHA.split(row["text"].lower())) < MIN_LENGTH:
            continue
        sig = embed_func(row["text"], idx, num_perm=NUM_PERM, ngram_size=NGRAM, min_length=MIN_LENGTH,
                         hashranges=ranges, permutations=perms, hash_func=lambda d: sha1_hash(d, d=32),
                         dtype=dtype, max_hash=max_hash, modulo_prime=prime)
        for i, h in enumerate(sig["__signatures__"]):
            tables[i][h].add(idx)
    uf = UnionFind()
    for table in tables:
        for bucket in table.values():
            if len(bucket) > 1:
                first = min(bucket)
                for x in bucket:
                    uf.union(x, first)
    clusters = defaultdict(list)
    for idx, row in enumerate(rows):
        clusters[uf.find(idx)].append(str(row["id"]))
    json.dump([c for c in clusters.values() if len(c) > 1], open(args.out, "w"))
    print(f"text-dedup: {b} bands x {r} rows, {sum(len(c) > 1 for c in clusters.values())} clusters")


if __name__ == "__main__":
    main()
