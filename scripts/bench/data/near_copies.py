#!/usr/bin/env python3
"""Near-copy recall at every text length: planted edits of real text, each tool on the same pairs.

    near_copies.py make SPAMASSASSIN.jsonl OUT_DIR [--per-band 300] [--seed 2026]
    near_copies.py score OUT_DIR TOOL CLUSTERS.json      (prints one Markdown row a band)

`make` cuts windows of 8 to 400 words out of distinct SpamAssassin e-mails (normalised: NFKC,
case-folded, whitespace collapsed), `--per-band` originals in each length band, and writes for
each original two copies: one with one word edited, one with max(1, 5 % of its words) edited (a
word replaced by another word of the corpus, or by itself with "un" before it, a word inserted,
or a word deleted, at distinct places). OUT_DIR gets `planted.jsonl` (id, text, label) and
`pairs.json` (band, kind, original id, copy id). The windows, edits and seed differ from the
test suite's (`crates/contrai-data/tests/it/near_copies.rs`, seed 48): these pairs were not tuned on.

`score` reads a tool's clusters (a JSON list of lists of ids, every cluster of two or more, or
datasketch_audit.py's output) and
prints the share of pairs whose two texts share a cluster, per band and kind.
"""

import argparse
import json
import random
import sys
import unicodedata

BANDS = [(8, 15), (15, 30), (30, 60), (60, 120), (120, 400)]


def normalize(text):
    return " ".join(w.lower() for w in unicodedata.normalize("NFKC", text).split())


def edited(words, n, vocab, rng):
    places = set(rng.sample(range(len(words)), n))
    out = []
    for i, w in enumerate(words):
        if i not in places:
            out.append(w)
            continue
        fresh = w
        while fresh == w:
            fresh = rng.choice(vocab)
        op = rng.randrange(4)
        if op == 0:
            out.append("un" + w)
        elif op == 1:
            out.append(fresh)
        elif op == 2:
            out += [fresh, w]
    return out


def make(args):
    rng = random.Random(args.seed)
    mails = [normalize(json.loads(line)["text"]).split(" ") for line in open(args.corpus)]
    vocab = [w for m in mails[:400] for w in m if len(w) > 2 and w.isalpha()]
    order = list(range(len(mails)))
    rng.shuffle(order)
    rows, pairs = [], []
    it = iter(order)
    for band, (lo, hi) in enumerate(BANDS):
        made = 0
        while made < args.per_band:
            mail = mails[next(it)]
            length = rng.randrange(lo, hi)
            if len(mail) < length + 20:
                continue
            start = rng.randrange(len(mail) - length)
            original = mail[start:start + length]
            for kind, n in (("one word", 1), ("5 %", max(1, length // 20))):
                a, b = f"o{len(rows):06d}", f"c{len(rows):06d}"
                rows.append({"id": a, "text": " ".join(original), "label": "x"})
                rows.append({"id": b, "text": " ".join(edited(original, n, vocab, rng)), "label": "x"})
                pairs.append({"band": f"{lo}–{hi}", "kind": kind, "a": a, "b": b})
            made += 1
    with open(f"{args.out}/planted.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    with open(f"{args.out}/pairs.json", "w") as f:
        json.dump(pairs, f)
    print(f"{len(rows)} texts, {len(pairs)} planted pairs in {args.out}", file=sys.stderr)


def score(args):
    pairs = json.load(open(f"{args.out}/pairs.json"))
    cluster = {}
    clusters = json.load(open(args.clusters))
    if isinstance(clusters, dict):  # datasketch_audit.py's output
        clusters = clusters["clusters"]
    for k, members in enumerate(clusters):
        for m in members:
            cluster[str(m)] = k
    found = {}
    for p in pairs:
        key = (p["band"], p["kind"])
        hit = p["a"] in cluster and cluster.get(p["a"]) == cluster.get(p["b"])
        n, h = found.get(key, (0, 0))
        found[key] = (n + 1, h + int(hit))
    cells = [f"{h / n:.3f}" for (n, h) in found.values()]
    print(f"| {args.tool} | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("corpus")
    m.add_argument("out")
    m.add_argument("--per-band", type=int, default=300)
    m.add_argument("--seed", type=int, default=2026)
    s = sub.add_parser("score")
    s.add_argument("out")
    s.add_argument("tool")
    s.add_argument("clusters")
    args = ap.parse_args()
    make(args) if args.cmd == "make" else score(args)


if __name__ == "__main__":
    main()
