"""A causal LM written for the servers that load it: the compressed-tensors layout (vLLM, and
``transformers`` with the ``compressed-tensors`` package) with weight-only int8 or int4 codes,
and GGUF (llama.cpp, ``llama-cpp-python``) in Q8_0 or Q4_0.

Both writers quantize and write one tensor at a time (the compressed-tensors files in shards of
at most ``shard_bytes``, GGUF with its tensor table written first), so an export holds the model
once plus one shard, never a second copy. Both write into a folder or file beside the target,
put in place when complete by ``_core.put_in_place`` (forced to disk, one rename: the
workspace's one rule for atomic writes). A model a format cannot represent (an architecture it has no
mapping for, a row its blocks do not divide, a tokenizer it cannot carry) is refused with the
reason, before anything is written.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import torch

from contrai import _core
from contrai.quant.weights import FLOATS, Codes, Quantized, QuantizeError, Scheme


class ExportError(ValueError):
    """A model or tokenizer the asked format cannot represent; the message says why."""


@contextlib.contextmanager
def atomic_dir(out: Path) -> Iterator[Path]:
    """A fresh folder beside ``out``, renamed to ``out`` (replacing it) once the caller is done."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    os.chmod(tmp, 0o777 & ~umask())  # mkdtemp's 0700 would lock the export away from a server's user
    try:
        yield tmp
        # Forced to disk and swapped with the old export in one rename (the workspace's rule).
        _core.put_in_place(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def atomic_file(out: Path) -> Iterator[Path]:
    """A fresh file beside ``out``, renamed to ``out`` (replacing it) once the caller is done."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    os.close(fd)
    tmp = Path(name)
    os.chmod(tmp, 0o666 & ~umask())  # mkstemp's 0600, as atomic_dir's folder
    try:
        yield tmp
        _core.put_in_place(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---- compressed-tensors ---------------------------------------------------------------------

def compressed_tensors_config(scheme: Scheme) -> dict[str, Any]:
    """The ``quantization_config`` a weight-only group scheme has, built and checked by the
    ``compressed-tensors`` package's own models (so the loaders read what they wrote)."""
    try:
        from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme
    except ImportError as e:
        raise ExportError("the compressed-tensors export needs the compressed-tensors package "
                          "(pip install compressed-tensors)") from e
    args = QuantizationArgs(num_bits=scheme.bits, type="int", symmetric=True, strategy="group",
                            group_size=scheme.group, dynamic=False)
    config = QuantizationConfig(
        config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=args)},
        ignore=["lm_head"], format="pack-quantized", quantization_status="compressed")
    out: dict[str, Any] = config.model_dump(mode="json")
    out["quant_method"] = "compressed-tensors"
    return out


def packed(name: str, weight: torch.Tensor, q: Codes, scheme: Scheme) -> dict[str, torch.Tensor]:
    """One linear layer's tensors in the pack-quantized layout: codes packed into int32
    (``weight_packed``), the scales in the weight's dtype, the unpacked shape."""
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    return {f"{name}.weight_packed": pack_to_int32(q.codes.cpu(), scheme.bits).contiguous(),
            f"{name}.weight_scale": q.scale.to(weight.dtype).cpu().contiguous(),
            f"{name}.weight_shape": torch.tensor(list(weight.shape), dtype=torch.int64)}


def write_compressed_tensors(model: Any, quantized: Quantized, out: Path, tokenizer: Any = None,
                             shard_bytes: int = 1 << 28) -> Path:
    """``out`` holding the model with the codes of ``quantized`` (every linear layer but the
    head; ``contrai.quant.weights.quantized_in_place``) in the pack-quantized layout, its config
    with the ``quantization_config`` loaders read, and the tokenizer when given; returns ``out``."""
    scheme = quantized.scheme
    config = model.config.to_dict()
    config["quantization_config"] = compressed_tensors_config(scheme)
    with atomic_dir(out) as tmp:
        shards = ShardWriter(tmp, shard_bytes)
        seen: set[int] = set()
        for key, tensor in model.state_dict(keep_vars=False).items():
            ptr = tensor.data_ptr()
            if ptr in seen:  # a tied weight (the head sharing the embeddings) is written once
                continue
            seen.add(ptr)
            layer = quantized.layer_of(key)
            if layer is not None:
                shards.add(packed(layer, tensor, quantized.codes(layer), scheme))
            else:
                shards.add({key: tensor.detach().cpu().contiguous()})
        shards.close()
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        generation = getattr(model, "generation_config", None)
        if generation is not None:
            generation.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
    return out


class ShardWriter:
    """safetensors shards of at most ``limit`` bytes, written as they fill, named and indexed
    as ``save_pretrained`` names them once the last is written."""

    def __init__(self, folder: Path, limit: int) -> None:
        self.folder, self.limit = folder, limit
        self.pending: dict[str, torch.Tensor] = {}
        self.size = 0
        self.total = 0
        self.files: list[tuple[Path, list[str]]] = []

    def add(self, tensors: dict[str, torch.Tensor]) -> None:
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        if self.pending and self.size + size > self.limit:
            self.flush()
        self.pending.update(tensors)
        self.size += size
        self.total += size

    def flush(self) -> None:
        from safetensors.torch import save_file

        path = self.folder / f"shard-{len(self.files)}.tmp"
        save_file(self.pending, str(path), metadata={"format": "pt"})
        self.files.append((path, list(self.pending)))
        self.pending, self.size = {}, 0

    def close(self) -> None:
        if self.pending:
            self.flush()
        if len(self.files) == 1:
            self.files[0][0].rename(self.folder / "model.safetensors")
            return
        weight_map = {}
        n = len(self.files)
        for i, (path, keys) in enumerate(self.files):
            name = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            path.rename(self.folder / name)
            weight_map.update({k: name for k in keys})
        index = {"metadata": {"total_size": self.total}, "weight_map": weight_map}
        (self.folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


# ---- GGUF ------------------------------------------------------------------------------------

# Hugging Face Llama parameter names (after ``model.layers.N.``) and the GGUF tensor names
# llama.cpp's loader looks for.
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
# Model types whose GGUF architecture is llama.cpp's ``llama`` (the same tensors and hyper-parameters).
LLAMA_TYPES = ("llama", "mistral")


# GGUF's block types for the weight-only schemes: bits → (name, ggml type name); both hold one
# float16 scale a block of 32 weights.
GGUF_BLOCK = 32
GGUF_TYPES = {8: "Q8_0", 4: "Q4_0"}


def gguf_qtype(scheme: Scheme) -> Any:
    """The ggml type that holds ``scheme``'s codes as they are, or why none does."""
    import gguf

    if scheme.group != GGUF_BLOCK:
        raise ExportError(f"GGUF's {GGUF_TYPES[scheme.bits]} holds a scale every {GGUF_BLOCK} weights; these codes "
                          f"have one every {scheme.group} (quantize with group {GGUF_BLOCK} for GGUF)")
    return getattr(gguf.GGMLQuantizationType, GGUF_TYPES[scheme.bits])


def gguf_name(key: str) -> str | None:
    """The GGUF tensor name of a Hugging Face Llama parameter, or None when it has none."""
    if key in TOP_NAMES:
        return TOP_NAMES[key]
    parts = key.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in LAYER_NAMES:
        return f"blk.{parts[2]}.{LAYER_NAMES[parts[3]]}"
    return None


def rope_order(w: torch.Tensor, heads: int) -> torch.Tensor:
    """A query or key projection's rows from Hugging Face's rotate-half order into the
    interleaved pairs llama.cpp's ``llama`` rotary embedding reads."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(model: Any) -> Iterator[tuple[str, str, torch.Tensor, int | None]]:
    """(Hugging Face key, GGUF name, tensor, heads) of every tensor the file holds, where heads
    is the head count whose rows :func:`rope_order` reorders (query and key) or None; a
    parameter with no GGUF name is refused."""
    cfg = model.config
    heads, kv = cfg.num_attention_heads, getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    seen: set[int] = set()
    for key, t in model.state_dict().items():
        if t.data_ptr() in seen:  # a tied head: llama.cpp reuses token_embd when output is absent
            continue
        seen.add(t.data_ptr())
        name = gguf_name(key)
        if name is None:
            raise ExportError(f"{key}: GGUF's llama architecture has no tensor for this parameter")
        rope = heads if key.endswith("q_proj.weight") else kv if key.endswith("k_proj.weight") else None
        yield key, name, t, rope


def check_gguf(model: Any) -> None:
    """The model is one GGUF's ``llama`` architecture holds and every matrix fills the blocks."""
    cfg = model.config
    if getattr(cfg, "model_type", None) not in LLAMA_TYPES:
        raise ExportError(f"GGUF export knows the Llama architecture (model_type {', '.join(LLAMA_TYPES)}); this "
                          f"model is {getattr(cfg, 'model_type', type(model).__name__)!r}")
    if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        raise ExportError("GGUF's llama architecture as Contrai writes it has no projection biases; this model has")
    for key, _, t, _ in gguf_tensors(model):
        if t.dtype not in FLOATS:
            raise ExportError(f"{key}: dtype {t.dtype} cannot be written (float32, float16 or bfloat16 expected)")
        if t.dim() == 2 and t.shape[1] % GGUF_BLOCK:
            raise ExportError(f"{key}: {t.shape[1]} weights a row do not fill GGUF's blocks of {GGUF_BLOCK} (a pruned "
                              "size must stay a multiple of the block)")


def gguf_file(scheme: Scheme) -> str:
    """The GGUF file's name for ``scheme``'s codes (``model-q8_0.gguf``, ``model-q4_0.gguf``)."""
    return f"model-{GGUF_TYPES[scheme.bits].lower()}.gguf"


def gguf_refusal(model: Any, scheme: Scheme | None = None) -> str | None:
    """Why the model — with ``scheme``'s codes, when given — cannot be written as GGUF, or None."""
    if importlib.util.find_spec("gguf") is None:
        return "the gguf package is not installed"
    if getattr(model, "config", None) is None:
        return f"{type(model).__name__} is no Hugging Face model (no config)"
    try:
        if scheme is not None:
            gguf_qtype(scheme)
        check_gguf(model)
    except ExportError as e:
        return str(e)
    return None


def pre_tokenizer_name(spec: dict[str, Any]) -> str:
    """The name llama.cpp gives a tokenizer.json's pre-tokenization, for the ones Contrai can
    tell apart by structure; any other is refused (llama.cpp would split text differently)."""
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return "gpt-2"
    raise ExportError(f"the tokenizer's pre-tokenizer {json.dumps(pre)[:120]} has no GGUF name Contrai knows "
                      "(it writes GPT-2-style byte-level BPE)")


def add_tokenizer(writer: Any, tokenizer: Any) -> None:
    """A byte-level BPE tokenizer (GPT-2, SmolLM, Qwen style) as GGUF's ``gpt2`` vocabulary."""
    import gguf

    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    model = spec["model"]
    if model.get("type") != "BPE":
        raise ExportError(f"GGUF export writes a BPE tokenizer; this one is {model.get('type')!r}")
    vocab: dict[str, int] = dict(model["vocab"])
    special = set()
    for added in spec.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
        if added.get("special"):
            special.add(added["id"])
    size = max(vocab.values()) + 1
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [gguf.TokenType.UNUSED] * size
    for text, i in vocab.items():
        tokens[i] = text
        types[i] = gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre_tokenizer_name(spec))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for attr, add in (("bos_token_id", writer.add_bos_token_id), ("eos_token_id", writer.add_eos_token_id),
                      ("unk_token_id", writer.add_unk_token_id), ("pad_token_id", writer.add_pad_token_id)):
        if isinstance(getattr(tokenizer, attr, None), int):
            add(getattr(tokenizer, attr))
    writer.add_add_bos_token(False)
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str):
        writer.add_chat_template(template)


def add_hyperparameters(writer: Any, model: Any, scheme: Scheme) -> None:
    import gguf

    cfg = model.config
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    rope = getattr(cfg, "rope_parameters", None) or {}
    writer.add_name(getattr(cfg, "_name_or_path", "") or "contrai export")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(getattr(cfg, "num_key_value_heads", None) or heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    writer.add_vocab_size(cfg.vocab_size)
    writer.add_file_type(getattr(gguf.LlamaFileType, f"MOSTLY_{GGUF_TYPES[scheme.bits]}"))
    writer.add_quantization_version(2)


def blocks_q8_0(q: Codes) -> Any:
    """int8 codes with a scale every 32 as ggml's Q8_0 blocks (a float16 scale, 32 int8)."""
    import numpy as np

    rows, cols = q.codes.shape
    d = q.scale.half().numpy().view(np.uint8).reshape(rows, -1, 2)
    qs = q.codes.numpy().view(np.uint8).reshape(rows, -1, GGUF_BLOCK)
    return np.concatenate([d, qs], axis=-1).reshape(rows, -1)


def blocks_q4_0(q: Codes) -> Any:
    """int4 codes with a scale every 32 as ggml's Q4_0 blocks (a float16 scale, then byte j
    holding code j + 8 in its low half and code j + 16 + 8 in its high half)."""
    import numpy as np

    rows, cols = q.codes.shape
    d = q.scale.half().numpy().view(np.uint8).reshape(rows, -1, 2)
    u = (q.codes.to(torch.int16) + 8).to(torch.uint8).numpy().reshape(rows, -1, GGUF_BLOCK)
    qs = u[..., :16] | (u[..., 16:] << 4)
    return np.concatenate([d, qs], axis=-1).reshape(rows, -1)


def gguf_data(key: str, t: torch.Tensor, heads: int | None, quantized: Quantized) -> Any:
    """A tensor's bytes as the file holds them: vectors in float32; the quantized layers' codes
    in their blocks; other matrices (embeddings, an untied head) in Q8_0."""
    import gguf

    layer = quantized.layer_of(key)
    if layer is None:
        a = t.detach().float().cpu()
        a = a if heads is None else rope_order(a, heads)
        return a.numpy() if t.dim() == 1 else gguf.quants.quantize(a.numpy(), gguf.GGMLQuantizationType.Q8_0)
    q = quantized.codes(layer)
    if heads is not None:
        q = Codes(rope_order(q.codes, heads), rope_order(q.scale, heads))
    return blocks_q8_0(q) if quantized.scheme.bits == 8 else blocks_q4_0(q)


def write_gguf(model: Any, quantized: Quantized, tokenizer: Any, out: Path) -> Path:
    """``out``: the model (a Llama-architecture causal LM) with the codes of ``quantized`` (group
    32: Q8_0 for int8, Q4_0 for int4, exactly those codes) and its tokenizer, as one GGUF file;
    returns ``out``."""
    import gguf
    import numpy as np

    qtype = gguf_qtype(quantized.scheme)
    check_gguf(model)
    with atomic_file(out) as tmp:
        writer = gguf.GGUFWriter(tmp, "llama")
        add_hyperparameters(writer, model, quantized.scheme)
        add_tokenizer(writer, tokenizer)
        for key, name, t, _ in gguf_tensors(model):
            if t.dim() == 1:
                writer.add_tensor_info(name, t.shape, np.dtype(np.float32), t.numel() * 4)
                continue
            kind = qtype if quantized.layer_of(key) else gguf.GGMLQuantizationType.Q8_0
            block, block_bytes = gguf.GGML_QUANT_SIZES[kind]
            rows, cols = t.shape
            writer.add_tensor_info(name, (rows, cols // block * block_bytes), np.dtype(np.uint8),
                                   rows * cols // block * block_bytes, raw_dtype=kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for key, _, t, heads in gguf_tensors(model):
            writer.write_tensor_data(gguf_data(key, t, heads, quantized))
        writer.close()
    return out


# ---- the codes as they are -------------------------------------------------------------------

def save_codes(model: torch.nn.Module, quantized: Quantized, path: Path) -> None:
    """The quantized model as one ``torch.save`` file: each target's ``weight`` replaced by
    ``weight_codes`` (int8) and ``weight_scale`` (float32, a scale a group), every other tensor
    as it is; written beside ``path`` and renamed into place."""
    state: dict[str, torch.Tensor] = {}
    for key, value in model.state_dict().items():
        layer = quantized.layer_of(key)
        if layer is not None:
            q = quantized.codes(layer)
            state[f"{layer}.weight_codes"], state[f"{layer}.weight_scale"] = q.codes, q.scale
        else:
            state[key] = value.detach().cpu()
    with atomic_file(path) as tmp:
        torch.save({"scheme": quantized.scheme.name, "method": quantized.method, "state_dict": state}, tmp)


__all__ = ["ExportError", "QuantizeError", "Scheme", "write_compressed_tensors", "write_gguf"]
