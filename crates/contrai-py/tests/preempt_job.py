"""A Hugging Face job that a stop signal may interrupt, run as its own process (alone, or on two
ranks under torchrun): the tiny BERT task under ContraiCallback, resumed from the newest sealed
checkpoint when there is one — the script a Slurm requeue runs again unchanged.

Arguments: OUT_DIR (holding recipe.toml), then options:
  kill=STEP        this process sends itself SIGTERM during Trainer step STEP (mid-step)
  kill-eval=N      ... during the N-th evaluation forward pass (an evaluation under way)
  signal=NAME      the signal (default SIGTERM)
  rank=R           only rank R signals itself (default: every rank)
  twice=1          the signal sent twice in a row (the second exits at once)
  data_seed=N      TrainingArguments(data_seed=N): another sample order than the stopped job's
"""

import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from conftest import tiny_bert, token_task
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from contrai import DroppableDataset
from contrai.integrations.hf import ContraiCallback, last_checkpoint

out = Path(sys.argv[1])
options = dict(o.split("=", 1) for o in sys.argv[2:])
distributed = "WORLD_SIZE" in os.environ
args = TrainingArguments(output_dir=str(out / "trainer"), per_device_train_batch_size=16, per_device_eval_batch_size=32,
                         max_steps=80, report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True,
                         ddp_backend="gloo" if distributed else None,
                         data_seed=int(options["data_seed"]) if "data_seed" in options else None)
signum = signal.Signals[options.get("signal", "SIGTERM")]
mine = "rank" not in options or int(options["rank"]) == args.process_index


def kill() -> None:
    for _ in range(2 if "twice" in options else 1):
        os.kill(os.getpid(), signum)


class KillAt(TrainerCallback):
    """The signal during a training step: after its forward pass began (``on_step_begin``)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                      **kw: Any) -> None:
        if state.global_step + 1 == self.step:
            kill()


model = tiny_bert()
callbacks: list[TrainerCallback] = []
if mine and "kill" in options:
    callbacks.append(KillAt(int(options["kill"])))
if mine and "kill-eval" in options:
    evals = [0, int(options["kill-eval"])]

    def in_evaluation(module: torch.nn.Module, inputs: tuple[Any, ...], output: Any) -> Any:
        if not module.training:
            evals[0] += 1
            if evals[0] == evals[1]:
                kill()
        return output

    model.register_forward_hook(in_evaluation)
trainer = Trainer(model=model, args=args, train_dataset=DroppableDataset(token_task(400, 1)),
                  eval_dataset=token_task(100, 2), callbacks=callbacks)
ContraiCallback(out / "recipe.toml", run_dir=out / "run", holdout_dataset=token_task(60, 3)).attach(trainer)
trainer.train(resume_from_checkpoint=last_checkpoint(out / "trainer"))
# The process group torchrun's ranks share, torn down before the interpreter exits: left to exit,
# gloo's threads can abort a rank ("terminate called without an active exception").
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
