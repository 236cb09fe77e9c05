"""A mean-pooled BERT fine-tune as Contrai exports it (``final/hf``: the weights, a config whose
``auto_map`` names ``modeling_contrai.py``) through transformers' standard loaders: they compute
the masked mean pooling Contrai trained with, not ``BertForSequenceClassification``'s [CLS]
pooler, and refuse to load without ``trust_remote_code`` rather than compute something else."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import require

require("torch", "transformers")

import torch
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer, BertForSequenceClassification, pipeline

CRATES = Path(__file__).resolve().parents[2]
MODELING = CRATES / "contrai-bert" / "python" / "modeling_contrai.py"
TINY = CRATES / "contrai-bert" / "tests" / "fixtures" / "tiny-bert"
TEXTS = ["Free money!!! Click here now to claim your prize.", "Hi Bob, the meeting moved to Tuesday.", "ok"]


def mean_pooled_export(out: Path) -> Path:
    """The tiny checkpoint laid out as ``contrai-bert``'s export writes a mean-pooled classifier."""
    shutil.copytree(TINY, out)
    config = json.loads((out / "config.json").read_text())
    config.update(
        architectures=["ContraiBertForSequenceClassification"],
        model_type="contrai_bert",
        auto_map={
            "AutoConfig": "modeling_contrai.ContraiBertConfig",
            "AutoModelForSequenceClassification": "modeling_contrai.ContraiBertForSequenceClassification",
        },
        id2label={"0": "ham", "1": "spam"},
        label2id={"ham": 0, "spam": 1},
    )
    (out / "config.json").write_text(json.dumps(config))
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer"}))
    shutil.copy(MODELING, out / "modeling_contrai.py")
    return out


def by_hand(path: Path, enc: dict[str, torch.Tensor]) -> torch.Tensor:
    """Contrai's head on the same weights: the encoder, the masked mean, the classifier."""
    bert = BertForSequenceClassification.from_pretrained(path, num_labels=2)
    bert.eval()  # type: ignore[no-untyped-call]  # unannotated in transformers
    w = load_file(str(path / "model.safetensors"))
    h = bert.bert(**enc).last_hidden_state
    m = enc["attention_mask"].unsqueeze(-1).float()
    pooled = (h * m).sum(1) / m.sum(1).clamp_min(1.0)
    out: torch.Tensor = pooled @ w["classifier.weight"].T + w["classifier.bias"]
    return out


def test_the_standard_loader_computes_the_mean_pooled_head(tmp_path: Path) -> None:
    path = mean_pooled_export(tmp_path / "hf")
    model = AutoModelForSequenceClassification.from_pretrained(path, trust_remote_code=True).eval()
    assert type(model).__name__ == "ContraiBertForSequenceClassification"
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    enc = tok(TEXTS, padding="max_length", max_length=32, truncation=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
        want = by_hand(path, dict(enc))
        cls_model = BertForSequenceClassification.from_pretrained(path, num_labels=2)
        cls_model.eval()  # type: ignore[no-untyped-call]
        cls = cls_model(**enc).logits
    assert torch.allclose(logits, want, atol=1e-5), (logits, want)
    assert not torch.allclose(logits, cls, atol=1e-3), "the [CLS] pooler computes something else"
    # The pipeline a newcomer reaches for gives the same labels.
    clf = pipeline("text-classification", model=str(path), trust_remote_code=True)
    got = [r["label"] for r in clf(TEXTS)]
    assert got == [model.config.id2label[int(i)] for i in logits.argmax(-1)]


def test_without_trust_remote_code_the_loader_refuses_rather_than_pool_cls(tmp_path: Path) -> None:
    path = mean_pooled_export(tmp_path / "hf")
    for trust in (None, False):
        with pytest.raises(ValueError, match="trust_remote_code"):
            AutoModelForSequenceClassification.from_pretrained(path, trust_remote_code=trust)
