#!/usr/bin/env python3
"""Python anchor for `contrai data audit`: the same near-duplicate work with datasketch or rensa.

    datasketch_audit.py FILE.jsonl [--impl datasketch|rensa|none] [--out clusters.json] [--seed N]

(`--impl none` is a diagnostic: reading, normalising and shingling only, no sketches.)

Does what Contrai's audit does for near-duplicates, step for step:
  * read JSONL (`text`, `id`; a missing id becomes the 1-based line number),
  * normalise: Unicode NFKC, lowercase, whitespace collapsed to one space, trimmed,
  * group identical normalised texts first (empty texts stay alone, as in Contrai),
  * shingle each distinct text: word 5-grams, or character 5-grams when the text has fewer
    than 20 words; a text no longer than n is one shingle,
  * MinHash with 256 permutations, LSH with 23 bands x 11 rows (threshold 0.8),
  * query every distinct text for candidates, verify each candidate pair by the exact Jaccard
    similarity of the shingle sets (>= threshold), union-find over the verified pairs.

datasketch: MinHash(num_perm=256).update_batch(shingle bytes), MinHashLSH(threshold=0.8,
num_perm=256, params=(23, 11)); each text is queried, then inserted, so every candidate pair
is found once, from its later member (the same pairs as inserting all, then querying all).
rensa 0.5: RMinHashLSH requires num_perm divisible by num_bands, so 256 permutations with 23
bands is refused; the anchor uses num_perm=253 with 23 bands, i.e. 23 bands x 11 rows, the
same banding (Contrai and datasketch also band only the first 253 of their 256 values).
RMinHash.from_token_sets builds the sketches in bulk (4,096 texts a call), insert_pairs and
query_all do the LSH. Only normalised texts and the LSH index are kept; the shingle sets of
texts in candidate pairs are rebuilt for verification, as Contrai re-reads them.

Prints one line `RESULT impl=... docs=... seconds=... docs_per_s=...` (seconds measured from
the start of reading to the clusters, excluding interpreter start-up and imports; the
benchmark driver also measures the whole process), and writes the clusters (every cluster with
at least two members, as lists of ids) to --out.
"""

import argparse
import json
import sys
import time
import unicodedata

THRESHOLD = 0.8
NUM_PERM = 256
BANDS, ROWS = 23, 11
WORD_N, CHAR_N, SHORT_WORDS = 5, 5, 20


def normalize(text):
    return " ".join(w.lower() for w in unicodedata.normalize("NFKC", text).split())


def shingles(norm):
    """The set of shingles (str) of a normalised text, as in contrai-data text.rs."""
    if not norm:
        return set()
    words = norm.split(" ")
    if len(words) >= SHORT_WORDS:
        n = WORD_N
        if len(words) <= n:
            return {norm}
        return {" ".join(words[k:k + n]) for k in range(len(words) - n + 1)}
    n = CHAR_N
    if len(norm) <= n:
        return {norm}
    return {norm[k:k + n] for k in range(len(norm) - n + 1)}


def jaccard(a, b):
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


class UnionFind:
    def __init__(self, n):
        self.parent = list(range(n))

    def find(self, x):
        p = self.parent
        while p[x] != x:
            p[x] = p[p[x]]
            x = p[x]
        return x

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def read_groups(path):
    """Ids of every row, and the exact groups: (normalised text, [row indices])."""
    ids, groups, by_text = [], [], {}
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            text = row.get("text")
            if text is None:
                continue
            i = len(ids)
            ids.append(str(row["id"]) if row.get("id") is not None else str(line_no))
            norm = normalize(text)
            if not norm:
                groups.append((norm, [i]))  # empty texts stay alone
                continue
            g = by_text.get(norm)
            if g is None:
                by_text[norm] = g = len(groups)
                groups.append((norm, []))
            groups[g][1].append(i)
    return ids, groups


def candidates_datasketch(groups, live, seed=None):
    """Query each text before inserting it: every candidate pair is found once, from its later
    member, and no sketch is kept beyond the index."""
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM, params=(BANDS, ROWS))
    pairs = set()
    for g in live:
        m = MinHash(num_perm=NUM_PERM) if seed is None else MinHash(num_perm=NUM_PERM, seed=seed)
        m.update_batch([s.encode("utf-8") for s in shingles(groups[g][0])])
        for h in lsh.query(m):
            pairs.add((h, g) if h < g else (g, h))
        lsh.insert(g, m)
    return pairs


def candidates_rensa(groups, live, seed=None, chunk=4096):
    """Bulk sketches a chunk at a time; insert the chunk, then query it (pairs with all texts
    inserted so far, so every pair is found from its later member's chunk)."""
    from rensa import RMinHash, RMinHashLSH

    num_perm = BANDS * ROWS  # 253: rensa needs num_perm % num_bands == 0
    lsh = RMinHashLSH(THRESHOLD, num_perm, BANDS)
    pairs = set()
    for start in range(0, len(live), chunk):
        keys = live[start:start + chunk]
        sketches = RMinHash.from_token_sets([list(shingles(groups[g][0])) for g in keys], num_perm, 42 if seed is None else seed)
        lsh.insert_pairs(list(zip(keys, sketches)))
        for g, found in zip(keys, lsh.query_all(sketches)):
            for h in found:
                if h != g:
                    pairs.add((h, g) if h < g else (g, h))
    return pairs


def candidates_none(groups, live, seed=None):
    """Diagnostic: read, normalise and shingle every text, no sketches (the Python floor)."""
    for g in live:
        shingles(groups[g][0])
    return set()


def audit(path, impl, seed=None):
    ids, groups = read_groups(path)
    live = [g for g, (norm, _) in enumerate(groups) if norm]
    find = {"datasketch": candidates_datasketch, "rensa": candidates_rensa, "none": candidates_none}[impl]
    cand = find(groups, live, seed)
    # Verification: the shingle sets of the texts in candidate pairs only (as Contrai does).
    needed = {g for pair in cand for g in pair}
    sets = {g: shingles(groups[g][0]) for g in needed}
    uf = UnionFind(len(groups))
    verified = 0
    for a, b in cand:
        if jaccard(sets[a], sets[b]) >= THRESHOLD:
            verified += 1
            uf.union(a, b)
    members = {}
    for g, (_, rows) in enumerate(groups):
        members.setdefault(uf.find(g), []).extend(rows)
    clusters = sorted(
        (sorted(ids[i] for i in rows) for rows in members.values() if len(rows) > 1),
        key=lambda c: c[0],
    )
    stats = {"docs": len(ids), "distinct": len(live), "candidate_pairs": len(cand), "verified_pairs": verified}
    return clusters, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path")
    ap.add_argument("--impl", choices=["datasketch", "rensa", "none"], default="datasketch")
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, help="MinHash seed (default: datasketch 1, rensa 42)")
    args = ap.parse_args()
    # Import outside the timed region, so `seconds` is the work alone.
    if args.impl == "datasketch":
        import datasketch  # noqa: F401
    elif args.impl == "rensa":
        import rensa  # noqa: F401
    t0 = time.perf_counter()
    clusters, stats = audit(args.path, args.impl, args.seed)
    dt = time.perf_counter() - t0
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"impl": args.impl, "stats": stats, "clusters": clusters}, f)
    print(
        f"RESULT impl={args.impl} docs={stats['docs']} distinct={stats['distinct']} "
        f"candidate_pairs={stats['candidate_pairs']} verified_pairs={stats['verified_pairs']} "
        f"clusters={len(clusters)} seconds={dt:.3f} docs_per_s={stats['docs'] / dt:.1f}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
