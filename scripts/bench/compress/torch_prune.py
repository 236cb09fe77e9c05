"""The quality anchor of `contrai compress`: PyTorch's `torch.nn.utils.prune` on the same model.

Loads the dense checkpoint Contrai pruned (compress/source.safetensors) into the same architecture
in PyTorch, checks that it scores what Contrai scores on the same token ids (export_tokens), then
prunes the same weight matrices with global L1 unstructured pruning to the same sparsity and
fine-tunes with the same protocol as `contrai compress` (AdamW, LR linear to 0, batch, clipping,
dropout, validation every steps/5 keeping the best) before the holdout.

    python torch_prune.py SOURCE.safetensors TOKENS.json --sparsity 0.5 --steps 100 --lr 5e-5 \
        --heads 4 --batch 32 --seed 42
"""

import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.numpy import load_file
from torch.nn.utils import prune


class Block(nn.Module):
    def __init__(self, d, heads, ffn, p):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.query, self.key, self.value, self.output = (nn.Linear(d, d) for _ in range(4))
        self.up, self.down = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.heads, self.drop = heads, nn.Dropout(p)

    def forward(self, x, key_bias):
        b, s, d = x.shape
        dk = d // self.heads
        h = self.ln1(x)
        split = lambda t: t.view(b, s, self.heads, dk).transpose(1, 2)
        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        w = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(dk) + key_bias, dim=3)
        ctx = (w @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.drop(self.output(ctx))
        return x + self.drop(self.down(F.gelu(self.up(self.ln2(x)))))


class TextClassifier(nn.Module):
    def __init__(self, vocab, seq, d, layers, heads, ffn, classes, p):
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, ffn, p) for _ in range(layers))
        self.norm, self.head, self.drop = nn.LayerNorm(d), nn.Linear(d, classes), nn.Dropout(p)

    def forward(self, ids):
        keep = (ids != 0).float().unsqueeze(2)
        key_bias = ((ids != 0).float() - 1.0)[:, None, None, :] * 1e4
        x = self.drop(self.embed(ids) + self.pos.weight[: ids.shape[1]][None])
        for blk in self.blocks:
            x = blk(x, key_bias)
        x = self.norm(x)
        pooled = (x * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.head(pooled)

    def prunable(self):
        return [(getattr(b, n), "weight") for b in self.blocks
                for n in ("query", "key", "value", "output", "up", "down")]


def load(path, heads, dropout):
    w = {k: torch.from_numpy(v.copy()) for k, v in load_file(path).items()}
    layers = 1 + max(int(k.split(".")[1]) for k in w if k.startswith("blocks."))
    vocab, d = w["embed.weight"].shape
    m = TextClassifier(vocab, w["pos.weight"].shape[0], d, layers, heads,
                       w["blocks.0.ffn.up.weight"].shape[1], w["head.weight"].shape[1], dropout)
    sd = {"embed.weight": w["embed.weight"], "pos.weight": w["pos.weight"],
          "norm.weight": w["norm.gamma"], "norm.bias": w["norm.beta"],
          "head.weight": w["head.weight"].T, "head.bias": w["head.bias"]}
    for i in range(layers):
        for ours, theirs in [("attn.query", "query"), ("attn.key", "key"), ("attn.value", "value"),
                             ("attn.output", "output"), ("ffn.up", "up"), ("ffn.down", "down")]:
            sd[f"blocks.{i}.{theirs}.weight"] = w[f"blocks.{i}.{ours}.weight"].T  # Burn: [in, out]
            sd[f"blocks.{i}.{theirs}.bias"] = w[f"blocks.{i}.{ours}.bias"]
        for ln in ("ln1", "ln2"):
            sd[f"blocks.{i}.{ln}.weight"] = w[f"blocks.{i}.{ln}.gamma"]
            sd[f"blocks.{i}.{ln}.bias"] = w[f"blocks.{i}.{ln}.beta"]
    m.load_state_dict({k: v.contiguous() for k, v in sd.items()})
    return m


def part(tokens, name):
    p, seq = tokens[name], tokens["seq"]
    ids = torch.tensor(p["ids"], dtype=torch.long).view(-1, seq)
    return ids, torch.tensor(p["labels"], dtype=torch.long)


@torch.no_grad()
def evaluate(m, ids, labels, batch=64):
    m.eval()
    loss, correct = 0.0, 0
    for s in range(0, len(labels), batch):
        logits = m(ids[s:s + batch])
        loss += F.cross_entropy(logits, labels[s:s + batch], reduction="sum").item()
        correct += (logits.argmax(1) == labels[s:s + batch]).sum().item()
    return loss / len(labels), correct / len(labels)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("tokens")
    ap.add_argument("--sparsity", type=float, default=0.5)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(2)
    tokens = json.load(open(a.tokens))
    train, val, hold = (part(tokens, n) for n in ("train", "val", "holdout"))
    m = load(a.source, a.heads, a.dropout)
    dense_val, dense_hold = evaluate(m, *val), evaluate(m, *hold)
    prune.global_unstructured(m.prunable(), pruning_method=prune.L1Unstructured, amount=a.sparsity)
    opt = torch.optim.AdamW(m.parameters(), lr=a.lr, weight_decay=a.weight_decay, eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 - k / max(1, a.steps - 1))
    every = max(1, a.steps // 5)
    best = (evaluate(m, *val)[0], 0, {k: v.clone() for k, v in m.state_dict().items()})
    g = torch.Generator().manual_seed(a.seed)
    perm, pos = torch.randperm(len(train[1]), generator=g), 0
    t0 = time.time()
    for k in range(a.steps):
        if pos + a.batch > len(perm):
            perm, pos = torch.randperm(len(train[1]), generator=g), 0
        rows = perm[pos:pos + a.batch]
        pos += a.batch
        m.train()
        loss = F.cross_entropy(m(train[0][rows]), train[1][rows])
        opt.zero_grad()
        loss.backward()
        if a.clip > 0:
            nn.utils.clip_grad_norm_(m.parameters(), a.clip)
        opt.step()
        sched.step()
        if (k + 1) % every == 0 or k + 1 == a.steps:
            vl = evaluate(m, *val)[0]
            if vl < best[0]:
                best = (vl, k + 1, {kk: v.clone() for kk, v in m.state_dict().items()})
    tune_s = time.time() - t0
    m.load_state_dict(best[2])
    for mod, name in m.prunable():
        prune.remove(mod, name)
    weights = [mod.weight for mod, _ in m.prunable()]
    zeros = sum((w == 0).sum().item() for w in weights) / sum(w.numel() for w in weights)
    val_loss, val_acc = evaluate(m, *val)
    hold_loss, hold_acc = evaluate(m, *hold)
    print(json.dumps({
        "torch": torch.__version__, "sparsity_of_prunable": zeros, "best_step": best[1],
        "dense": {"val_accuracy": dense_val[1], "holdout_accuracy": dense_hold[1], "holdout_loss": dense_hold[0]},
        "pruned": {"val_accuracy": val_acc, "holdout_accuracy": hold_acc, "holdout_loss": hold_loss},
        "fine_tune_s": tune_s,
    }))


if __name__ == "__main__":
    main()
