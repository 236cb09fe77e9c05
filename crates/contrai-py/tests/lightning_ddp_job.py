"""A Lightning job for torchrun (``--nproc_per_node 2``, gloo on CPU): the small MLP task of
test_lightning under ContraiCallback with ``strategy="ddp"``, each rank logging the turns it
carried out and writing what its model ended with. Arguments: OUT_DIR (holding recipe.toml)."""

import json
import sys
from pathlib import Path

import lightning.pytorch as pl
from conftest import ServedRows, dataset
from test_lightning import Mlp, first_weight, task
from torch.utils.data import DataLoader

from contrai.integrations.lightning import ContraiCallback

out = Path(sys.argv[1])
recipe = out / "recipe.toml"  # written by the test before the ranks start
data = ServedRows(task(512, 1))
cb = ContraiCallback(recipe, out / "run", holdout_dataset=task(64, 3), turn_log=out / "turns")
trainer = pl.Trainer(max_steps=110, accelerator="cpu", devices=2, strategy="ddp", callbacks=[cb], logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0)
module = Mlp()
trainer.fit(module, DataLoader(dataset(data), batch_size=16, shuffle=True),
            DataLoader(dataset(task(128, 2)), batch_size=32))
w = first_weight(module).detach()
(out / f"model.rank{trainer.global_rank}").write_text(json.dumps({
    "weights": [float(x) for x in w.flatten()],
    "sparsity": float((w == 0).float().mean()),
    "dropout": module.net[2].p,
    "dropped": data.dropped,
    "served_after_drop": sorted(set(data.after_drop)),
}))
