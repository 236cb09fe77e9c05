"""Contrai's mean-pooled BERT classifier, computed as ``contrai`` trained it: the encoder's last
hidden states averaged over the real tokens (the attention mask), then dropout and the linear
classifier. ``BertForSequenceClassification`` pools the [CLS] state through a tanh layer instead,
so a mean-pooled fine-tune exported under that class would load without error and compute
something else; this file is written beside the weights and named by ``config.json``'s
``auto_map``, so that

    AutoModelForSequenceClassification.from_pretrained(path, trust_remote_code=True)
    pipeline("text-classification", model=path, trust_remote_code=True)

compute what ``contrai predict`` computes, and loading without ``trust_remote_code`` refuses
(the config's ``model_type`` is ``contrai_bert``, which transformers has no class of its own for).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import BertConfig, BertModel, BertPreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput


class ContraiBertConfig(BertConfig):  # type: ignore[misc]
    """BERT's configuration under a model type of its own: transformers knows no local class for
    it, so a loader without ``trust_remote_code`` refuses instead of building the [CLS]-pooled
    ``BertForSequenceClassification``."""

    model_type = "contrai_bert"


class ContraiBertForSequenceClassification(BertPreTrainedModel):  # type: ignore[misc]
    """BERT with a masked-mean pooling and a linear classifier (no [CLS] pooler)."""

    config_class = ContraiBertConfig
    # The checkpoint keeps BERT's pooler weights; mean pooling does not use them.
    _keys_to_ignore_on_load_unexpected = [r"pooler"]

    def __init__(self, config: ContraiBertConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertModel(config, add_pooling_layer=False)
        p = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(p)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> SequenceClassifierOutput:
        out = self.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                        return_dict=True, **kwargs)
        hidden = out.last_hidden_state
        mask = attention_mask if attention_mask is not None else torch.ones(hidden.shape[:2], device=hidden.device)
        keep = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * keep).sum(1) / keep.sum(1).clamp_min(1.0)
        logits = self.classifier(self.dropout(pooled))
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states,
                                        attentions=out.attentions)
