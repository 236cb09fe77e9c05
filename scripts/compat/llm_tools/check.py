"""What a run under LLaMA-Factory or Axolotl must have written — ``check.py RUN_DIR MODEL``: every
phase to the holdout, contraction's decisions carried out (none substituted), the pruned
feed-forward units cut out of ``final/``; prints the decisions and the cut."""

import json
import sys
from pathlib import Path

run, model = Path(sys.argv[1]), Path(sys.argv[2])
decisions = [json.loads(line) for line in (run / "decisions.jsonl").read_text().split("\n") if line]
kinds = [d["kind"] for d in decisions]
print(f"{run}: {', '.join(kinds)}")
substituted = [d["reason"] for d in decisions if d["kind"] == "engine_substitute"]
size = json.loads((model / "config.json").read_text())["intermediate_size"]
cut = json.loads((run / "final" / "config.json").read_text())["intermediate_size"]
print(f"intermediate_size {size} -> {cut}")
problems = [p for p, bad in (
    ("the run did not end with the holdout", kinds[-1:] != ["holdout"]),
    ("contraction was not entered", "enter_contract" not in kinds),
    (f"decisions substituted: {substituted}", bool(substituted)),
    ("no pruned unit was cut out of final/", cut >= size),
) if bad]
if problems:
    sys.exit("; ".join(problems))
