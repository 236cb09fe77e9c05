"""Both engines prune alike: the PyTorch engine's masks on the weights and targets the Burn engine
wrote (``data/masks.json``, from ``contrai-train``'s ``prune::engines_agree``) equal the Burn
engine's masks bit for bit — per module, under one global threshold with caps, and by whole
heads and feed-forward units."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import require

require("torch")

import torch

from contrai.engine.masks import Masks

FIXTURE = Path(__file__).parent / "data" / "masks.json"


def hf_name(burn_path: str) -> str:
    """The Hugging Face name of a Burn BERT parameter (Burn names the attention ``self_attn``)."""
    return burn_path.replace(".attention.self_attn.", ".attention.self.")


def model_with(weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A module tree whose parameters are exactly ``weights``, by dotted name."""
    root = torch.nn.Module()
    for name, value in weights.items():
        *parents, leaf = name.split(".")
        node = root
        for part in parents:
            if not hasattr(node, part):
                node.add_module(part, torch.nn.Module())
            node = getattr(node, part)
        node.register_parameter(leaf, torch.nn.Parameter(value))
    return root


@pytest.mark.parametrize("case", ["module", "global", "heads_and_units"])
def test_the_pytorch_engines_masks_are_the_burn_engines_bit_for_bit(case: str) -> None:
    fixture = json.loads(FIXTURE.read_text())
    # Burn stores a linear layer's weight as [in, out]; PyTorch as [out, in].
    weights = {hf_name(p): torch.tensor(w["values"], dtype=torch.float32).view(*w["shape"]).t().contiguous()
               for p, w in fixture["weights"].items()}
    model = model_with(weights)
    (c,) = [c for c in fixture["cases"] if c["name"] == case]
    order = {"targets": {hf_name(p): t for p, t in c["targets"].items()}, "scope": c["scope"],
             "heads": c["heads"], "units": c["units"]}
    masks = Masks()
    whole = masks.update(model, order)
    assert whole == ({"heads", "units"} if c["heads"] else set())
    for path, bits in c["keep"].items():
        shape = fixture["weights"][path]["shape"]
        burn = torch.tensor([b == "1" for b in bits]).view(*shape)
        ours = masks.keep[hf_name(path)].t()
        assert torch.equal(ours, burn), f"{case}: {path}: {int((ours != burn).sum())} entries differ"
