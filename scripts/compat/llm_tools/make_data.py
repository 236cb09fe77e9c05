"""Alpaca rows (instruction, input, output) of real e-mails, spam and ham in turn: 40 to train,
12 to validate, 8 held out — ``make_data.py SPAMASSASSIN_JSONL OUT_DIR`` writes
``spam_{train,val,holdout}.json`` and LLaMA-Factory's ``dataset_info.json`` there."""

import json
import sys
from pathlib import Path

source, out = Path(sys.argv[1]), Path(sys.argv[2])
rows = [json.loads(line) for line in source.read_text().split("\n") if line.strip()]
spam = [r for r in rows if r["label"] == "spam"][:30]
ham = [r for r in rows if r["label"] == "ham"][:30]
alpaca = [{"instruction": "Is this e-mail spam? Answer spam or ham.",
           "input": f"Subject: {r['subject'][:60]}\n{' '.join(r['text'].split())[:110]}", "output": r["label"]}
          for pair in zip(spam, ham) for r in pair]
out.mkdir(parents=True, exist_ok=True)
for name, part in (("train", alpaca[:40]), ("val", alpaca[40:52]), ("holdout", alpaca[52:60])):
    (out / f"spam_{name}.json").write_text(json.dumps(part, indent=1))
columns = {"prompt": "instruction", "query": "input", "response": "output"}
(out / "dataset_info.json").write_text(json.dumps(
    {f"spam_{n}": {"file_name": f"spam_{n}.json", "columns": columns} for n in ("train", "val", "holdout")}, indent=1))
