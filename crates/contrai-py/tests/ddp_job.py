"""A job for torchrun (``--nproc_per_node 2``, gloo on CPU): the tiny BERT task under
ContraiCallback, each rank logging the turns it carried out. Arguments: OUT_DIR (holding
recipe.toml)."""

import sys
from pathlib import Path

from conftest import tiny_bert, token_task
from transformers import Trainer, TrainingArguments

from contrai import DroppableDataset
from contrai.hf import ContraiCallback

out = Path(sys.argv[1])
recipe = out / "recipe.toml"  # written by the test before the ranks start
args = TrainingArguments(output_dir=str(out / "trainer"), per_device_train_batch_size=8, per_device_eval_batch_size=32,
                         max_steps=80, report_to=[], save_strategy="no", eval_strategy="no", use_cpu=True,
                         ddp_backend="gloo", seed=0, disable_tqdm=True)
cb = ContraiCallback(recipe, run_dir=out / "run", holdout_dataset=token_task(60, 3), turn_log=out / "turns")
Trainer(model=tiny_bert(), args=args, train_dataset=DroppableDataset(token_task(400, 1)),
        eval_dataset=token_task(100, 2), callbacks=[cb]).train()
