"""A MiniLM-L6 fine-tune (SpamAssassin, seq 128, batch 16) under ContraiCallback in a Hugging
Face Trainer: the job `save_on_signal.py` stops. Arguments: MODEL_DIR DATA_JSONL OUT_DIR."""

import json
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer, BertForSequenceClassification, Trainer, TrainingArguments

from contrai import DroppableDataset
from contrai.integrations.hf import ContraiCallback

model_dir, data, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
torch.set_num_threads(2)
rows = [json.loads(x) for x in data.read_text().split("\n")[:-1][::5][:1200]]  # both labels (the file is grouped by label)
tok = AutoTokenizer.from_pretrained(model_dir)
enc = tok([r["text"] for r in rows], truncation=True, max_length=128, padding="max_length", return_tensors="pt")
labels = sorted({r["label"] for r in rows})
examples = [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i],
             "labels": torch.tensor(labels.index(r["label"]))} for i, r in enumerate(rows)]
model = BertForSequenceClassification.from_pretrained(model_dir, num_labels=len(labels))
args = TrainingArguments(output_dir=str(out / "trainer"), per_device_train_batch_size=16, per_device_eval_batch_size=64,
                         max_steps=400, report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True)
trainer = Trainer(model=model, args=args, train_dataset=DroppableDataset(examples[:1000]), eval_dataset=examples[1000:1100])
ContraiCallback(out / "recipe.toml", run_dir=out / "run").attach(trainer)
trainer.train()
