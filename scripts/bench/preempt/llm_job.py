"""A LoRA fine-tune of a small Llama (SmolLM-135M's shape: 30 layers, hidden 576, 9 heads, 3
key-value heads; random weights, no download) on SpamAssassin as byte ids (seq 256, batch 4),
adapters r 8 on q and v, under ContraiCallback in a Hugging Face Trainer: the LLM job
`save_on_signal.py --llm` stops. Arguments: DATA_JSONL OUT_DIR."""

import json
import sys
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from contrai import DroppableDataset
from contrai.integrations.hf import ContraiCallback

data, out = Path(sys.argv[1]), Path(sys.argv[2])
torch.set_num_threads(2)
torch.manual_seed(0)
SEQ = 256
texts = [json.loads(x)["text"] for x in data.read_text().split("\n")[:-1][::5][:600]]
ids = [list(t.encode("utf-8", "replace")[:SEQ].ljust(SEQ, b" ")) for t in texts]
examples = [{"input_ids": torch.tensor(i), "attention_mask": torch.ones(SEQ, dtype=torch.long),
             "labels": torch.tensor(i)} for i in ids]
cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                  num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048, tie_word_embeddings=True)
model = get_peft_model(LlamaForCausalLM(cfg), LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                          lora_dropout=0.0, task_type="CAUSAL_LM"))
args = TrainingArguments(output_dir=str(out / "trainer"), per_device_train_batch_size=4, per_device_eval_batch_size=8,
                         max_steps=400, report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True)
trainer = Trainer(model=model, args=args, train_dataset=DroppableDataset(examples[:560]), eval_dataset=examples[560:576])
ContraiCallback(out / "recipe.toml", run_dir=out / "run", classes=cfg.vocab_size).attach(trainer)
trainer.train()
