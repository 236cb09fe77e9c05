"""A job for torchrun (``--nproc_per_node 2``, gloo on CPU): the tiny BERT task under
ContraiCallback, each rank logging the turns it carried out. Arguments: OUT_DIR (holding
recipe.toml)."""

import hashlib
import sys
from pathlib import Path
from typing import Any

import torch
from conftest import tiny_bert, token_task
from transformers import Trainer, TrainingArguments
from transformers.modeling_outputs import SequenceClassifierOutput

from contrai import DroppableDataset
from contrai.integrations.hf import ContraiCallback

out = Path(sys.argv[1])
recipe = out / "recipe.toml"  # written by the test before the ranks start
args = TrainingArguments(output_dir=str(out / "trainer"), per_device_train_batch_size=8, per_device_eval_batch_size=32,
                         max_steps=80, report_to=[], save_strategy="no", use_cpu=True,
                         ddp_backend="gloo", seed=0, disable_tqdm=True)
options = sys.argv[2:]
run_dir = out / "node1" if "node-local" in options and args.process_index == 1 else out / "run"
model = tiny_bert()
nan_at = next((int(o[7:]) for o in options if o.startswith("nan-at=")), None)
if nan_at is not None:
    calls = [0]

    def poison(module: torch.nn.Module, inputs: tuple[Any, ...],
               output: SequenceClassifierOutput) -> SequenceClassifierOutput:
        if module.training:
            calls[0] += 1
            if calls[0] == nan_at:
                assert output.loss is not None, "a training batch has labels"
                output.loss = output.loss * float("nan")
        return output

    model.register_forward_hook(poison)
trainer = Trainer(model=model, args=args, train_dataset=DroppableDataset(token_task(400, 1)),
                  eval_dataset=token_task(100, 2))
ContraiCallback(recipe, run_dir=run_dir, holdout_dataset=token_task(60, 3), turn_log=out / "turns").attach(trainer)
trainer.train()
digest = hashlib.sha256()
assert trainer.model is not None
for _, p in sorted(trainer.model.state_dict().items()):
    digest.update(p.detach().cpu().numpy().tobytes())
(out / f"weights.rank{args.process_index}").write_text(digest.hexdigest())
# The process group torchrun's ranks share, torn down before the interpreter exits: left to exit,
# gloo's threads can abort a rank ("terminate called without an active exception").
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
