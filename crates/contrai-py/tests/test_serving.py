"""Weight-only quantization and the serving exports, each read back by its consumer: the
compressed-tensors folder by ``transformers`` (with the ``compressed-tensors`` package), GGUF by
``llama-cpp-python``. A tiny Llama built from a config checks the layouts, the restore and the
refusals in seconds; the real pretrained model (SmolLM2-135M, ``scripts/fixtures/smollm2.py``,
found through ``CONTRAI_LLM``) checks that llama.cpp computes what Contrai evaluated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import pytest
from conftest import emails, real_llm, require

require("torch", "transformers")

import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from contrai.quant.serving import ExportError, umask, write_compressed_tensors, write_gguf
from contrai.quant.weights import QuantizeError, Scheme, each_pass, quantized_in_place

TEXT = ("Subject: meeting moved\n\nHi Bob, the 10am call moved to Tuesday; bring the Q3 numbers. "
        "Free money!!! Click http://win.example now to claim 1,000,000 dollars. ") * 20


def tokenizer(tmp: Path) -> Any:
    """A byte-level BPE tokenizer of 300 tokens trained on TEXT, as transformers loads one."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([TEXT], trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",  # type: ignore[no-untyped-call]
                                   pad_token="<|endoftext|>")


M = TypeVar("M", bound=torch.nn.Module)


def evaluating(model: M) -> M:
    """The model in eval mode, called as a ``torch.nn.Module`` (transformers' own ``eval`` is
    unannotated)."""
    model.eval()
    return model


def tiny_llama(vocab: int, intermediate: int = 128) -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=intermediate, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=False)
    return evaluating(LlamaForCausalLM(cfg))


@torch.no_grad()
def logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = model(input_ids=ids).logits
    return out


def sample_ids(tok: Any, n: int = 4, length: int = 48) -> torch.Tensor:
    ids = tok(TEXT)["input_ids"]
    return torch.tensor([ids[i * length:(i + 1) * length] for i in range(n)])


@pytest.mark.parametrize("bits", [8, 4])
def test_transformers_reads_the_compressed_tensors_export_as_contrai_evaluated_it(tmp_path: Path, bits: int) -> None:
    require("compressed_tensors")
    tok = tokenizer(tmp_path)
    model = tiny_llama(len(tok))
    ids = sample_ids(tok)
    dense = logits(model, ids)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    out = tmp_path / f"int{bits}"
    with quantized_in_place(model, Scheme(bits, 32)) as q:
        variant = logits(model, ids)
        # Shards of 64 KiB: the index and several files, as save_pretrained writes a large model.
        write_compressed_tensors(model, q, out, tok, shard_bytes=1 << 16)
        # Written again: the new export replaces the old, and nothing is left beside it.
        write_compressed_tensors(model, q, out, tok, shard_bytes=1 << 16)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()), "dense weights not restored"
    assert (out.stat().st_mode & 0o777) == 0o777 & ~umask(), "the folder's mode follows the umask"
    assert not torch.equal(variant, dense)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    assert config["format"] == "pack-quantized" and config["quant_method"] == "compressed-tensors"
    weights = config["config_groups"]["group_0"]["weights"]
    assert (weights["num_bits"], weights["group_size"], weights["symmetric"]) == (bits, 32, True)
    loaded = evaluating(AutoModelForCausalLM.from_pretrained(out))
    torch.testing.assert_close(logits(loaded, ids), variant, rtol=1e-4, atol=1e-4)
    # The packed codes take bits / 32 of the float32 weights they replace.
    packed = sum(f.stat().st_size for f in out.glob("*.safetensors"))
    assert packed < 0.6 * sum(p.numel() * 4 for p in model.parameters())


def test_gptq_leaves_less_error_than_rounding_on_the_data_it_saw(tmp_path: Path) -> None:
    tok = tokenizer(tmp_path)
    model = tiny_llama(len(tok))
    ids = sample_ids(tok, n=8)
    dense = logits(model, ids)

    def calibrate() -> None:
        each_pass(lambda b: model(input_ids=b), torch.split(ids, 2))

    errors = {}
    for how, cal in (("rtn", None), ("gptq", calibrate)):
        with quantized_in_place(model, Scheme(4, 32), cal) as q:
            assert q.method == how
            errors[how] = (logits(model, ids) - dense).pow(2).mean().item()
    assert errors["gptq"] < 0.8 * errors["rtn"], errors


def test_gptq_carried_block_to_block_makes_the_codes_of_running_the_model_to_each_block(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The calibration inputs of each decoder layer, carried from the one before (each layer run
    alone on them), are those a whole pass of the model gives it: GPTQ makes the same codes, with
    the model run once instead of once a layer."""
    from contrai import weightquant

    tok = tokenizer(tmp_path)
    model = tiny_llama(len(tok))
    ids = sample_ids(tok, n=6)
    passes = []

    def calibrate() -> None:
        passes.append(1)
        each_pass(lambda b: model(input_ids=b, attention_mask=torch.ones_like(b)), torch.split(ids, 3))

    def codes(cal: weightquant.Calibrate) -> dict[str, weightquant.Codes]:
        passes.clear()
        with quantized_in_place(model, Scheme(4, 32), cal) as q:
            return {n: q.codes(n) for n in q.files}

    carried = codes(calibrate)
    assert len(passes) == 1, "one pass of the calibration batches, to the first layer"
    monkeypatch.setattr(weightquant.Chain, "start", classmethod(lambda *_: None))
    whole = codes(calibrate)
    assert len(passes) == 2, "without the chain, a pass for each of the two layers"
    assert carried.keys() == whole.keys() and len(carried) == 14
    for n in carried:
        assert torch.equal(carried[n].codes, whole[n].codes) and torch.equal(carried[n].scale, whole[n].scale), n
    # Codes made once are put in place again as they were (``again``), without calibrating.
    monkeypatch.undo()
    passes.clear()
    with quantized_in_place(model, Scheme(4, 32), calibrate, into=tmp_path / "codes") as q:
        first = logits(model, ids)
    with quantized_in_place(model, Scheme(4, 32), again=q):
        assert torch.equal(logits(model, ids), first) and len(passes) == 1


def test_a_layer_the_scheme_cannot_serve_is_refused_by_name(tmp_path: Path) -> None:
    tok = tokenizer(tmp_path)
    model = tiny_llama(len(tok), intermediate=96)
    with pytest.raises(QuantizeError, match=r"model\.layers\.0\.mlp\.down_proj\.weight: 96 input weights a row is "
                                            r"not a multiple of the group of 64"):
        with quantized_in_place(model, Scheme(4, 64)):
            pass
    model.model.layers[1].mlp.up_proj.weight = torch.nn.Parameter(
        torch.zeros(96, 64, dtype=torch.int8), requires_grad=False)
    with pytest.raises(QuantizeError, match=r"model\.layers\.1\.mlp\.up_proj\.weight: dtype torch\.int8"):
        with quantized_in_place(model, Scheme(8, 32)):
            pass
    with pytest.raises(QuantizeError, match="4 or 8 bits, not 3"):
        Scheme(3)


def test_gguf_refuses_what_it_cannot_hold_and_writes_nothing(tmp_path: Path) -> None:
    require("gguf")
    tok = tokenizer(tmp_path)
    out = tmp_path / "m.gguf"
    model = tiny_llama(len(tok))
    with quantized_in_place(model, Scheme(4, 64)) as q:
        with pytest.raises(ExportError, match="Q4_0 holds a scale every 32 weights; these codes have one every 64"):
            write_gguf(model, q, tok, out)
    # A pruned feed-forward width of 48 fills no 32-weight blocks: refused before any code.
    pruned = tiny_llama(len(tok), intermediate=48)
    with pytest.raises(QuantizeError, match=r"layers\.0\.mlp\.down_proj\.weight: 48 input weights .* group of 32"):
        with quantized_in_place(pruned, Scheme(8, 32)):
            pass
    gpt2 = evaluating(GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=64, n_layer=1, n_head=2)))
    with quantized_in_place(gpt2, Scheme(8, 32)) as q:
        with pytest.raises(ExportError, match="knows the Llama architecture .* this model is 'gpt2'"):
            write_gguf(gpt2, q, tok, out)
    assert list(tmp_path.glob("*.gguf*")) == [] and not out.exists()


def email_ids(tok: Any, n: int, length: int) -> torch.Tensor:
    """Token blocks of real e-mails (../shared/data)."""
    ids = [i for i in (tok(t)["input_ids"][:length] for t in emails()[:200]) if len(i) == length]
    return torch.tensor(ids[:n])


@pytest.mark.parametrize("bits", [8, 4])
def test_llama_cpp_computes_the_gguf_variant_contrai_evaluated(tmp_path: Path, bits: int) -> None:
    llama_cpp = require("llama_cpp")
    from transformers import AutoTokenizer

    path = real_llm()
    tok = AutoTokenizer.from_pretrained(path)
    model = evaluating(AutoModelForCausalLM.from_pretrained(path))
    ids = email_ids(tok, 6, 64)
    out = tmp_path / f"model-q{bits}.gguf"
    with quantized_in_place(model, Scheme(bits, 32)) as q:
        variant = logits(model, ids).argmax(-1)
        write_gguf(model, q, tok, out)
    llm = llama_cpp.Llama(model_path=str(out), n_ctx=128, logits_all=True, verbose=False, n_threads=2)
    try:
        same = 0
        for row, want in zip(ids.tolist(), variant):
            llm.reset()
            llm.eval(row)
            got = torch.tensor(llm.scores[:len(row)]).argmax(-1)
            same += int((got == want).sum())
        text = "Subject: meeting moved\n\nHi Bob, the 10am call moved to Tuesday (bring 1,234 copies): http://x.example"
        assert llm.tokenize(text.encode(), add_bos=False, special=False) == tok(text)["input_ids"]
    finally:
        llm.close()
    # llama.cpp multiplies with its activations in 8-bit blocks and its embeddings in Q8_0: on
    # raw e-mail text (many near ties) its greedy token is the variant's on most positions.
    assert same / ids.numel() >= 0.9, same / ids.numel()


def test_a_gguf_file_llama_cpp_cannot_run_leaves_the_card_without_latency_and_the_run_alive(tmp_path: Path) -> None:
    """The card times a GGUF file in a child process: a file llama.cpp fails on (here a header
    and nothing else) gives no figure and the reason, and the process that asked goes on."""
    require("llama_cpp")
    from contrai.engine.card import llama_cpp_latency_ms

    bad = tmp_path / "model-q8_0.gguf"
    bad.write_bytes(b"GGUF" + bytes(60))
    ms, why = llama_cpp_latency_ms(bad, [[1, 2, 3]])
    assert ms is None and why.startswith("no latency: llama.cpp failed on it ("), why
    assert llama_cpp_latency_ms(bad, None) == (None, "no latency: the card's batch holds no token ids")

