"""The pre-flight check on real jobs: tiny transformers models built from configs, real PEFT LoRA
wraps, real ``TrainingArguments`` and ``Trainer``s, real Lightning ``Trainer``s. Each finding on
the configuration planted for it (and only it), none on a clean one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import dataset, require, tiny_bert, token_task

require("torch", "transformers", "accelerate", "lightning", "peft")

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader
from transformers import (LlamaConfig, LlamaForCausalLM, PreTrainedModel, Trainer, TrainerCallback, TrainerControl,
                          TrainerState, TrainingArguments, ViTConfig, ViTForImageClassification,
                          get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup)

from contrai import preflight
from contrai.integrations.hf import ContraiCallback
from contrai.integrations.lightning import ContraiCallback as LightningCallback
from contrai.preflight import Finding

import peft

STEPS = 400
# The detector itself, before the fixture below replaces it.
NATIVE_BF16 = preflight.native_bf16


@pytest.fixture(autouse=True)
def bf16_is_native(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every device multiplies bf16 natively here, so no finding follows the CPU the tests run on
    (an AMD Zen 3 has no native bf16, an AVX-512 Xeon has); the tests of ``bf16_not_native`` say
    otherwise."""
    monkeypatch.setattr(preflight, "native_bf16", lambda device: True)


def kinds(findings: list[Finding]) -> list[str]:
    return [f["kind"] for f in findings]


def llama(bf16_config: bool = False) -> LlamaForCausalLM:
    """A 2-layer causal LM with random weights (no download); ``bf16_config``: its config says
    bfloat16, as a checkpoint trained in bf16 says (the weights stay f32 here)."""
    torch.manual_seed(0)
    extra: dict[str, Any] = {"torch_dtype": "bfloat16"} if bf16_config else {}
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=32, **extra)
    return LlamaForCausalLM(cfg)


def lora(model: PreTrainedModel, targets: list[str]) -> Any:
    """``model`` wrapped by PEFT with LoRA adapters on ``targets``."""
    return peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0))


def schedule(kind: str, opt: torch.optim.Optimizer, warmup: int) -> torch.optim.lr_scheduler.LambdaLR:
    """transformers' linear warmup then cosine or linear decay over ``STEPS`` (its makers are untyped)."""
    make: Any = get_cosine_schedule_with_warmup if kind == "cosine" else get_linear_schedule_with_warmup
    made: torch.optim.lr_scheduler.LambdaLR = make(opt, warmup, STEPS)
    return made


def lm_rows(n: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [{"input_ids": (ids := torch.randint(0, 64, (12,), generator=g)), "labels": ids} for _ in range(n)]


def args(tmp_path: Path, **overrides: Any) -> TrainingArguments:
    """Arguments within every rule (cosine, 3 % warmup, effective batch 32, a checkpoint every 50
    steps), with ``overrides``."""
    base: dict[str, Any] = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=16,
                                gradient_accumulation_steps=2, max_steps=STEPS, learning_rate=5e-5,
                                lr_scheduler_type="cosine", warmup_steps=12, save_strategy="steps", save_steps=50,
                                eval_strategy="steps", eval_steps=50, use_cpu=True, report_to=[],
                                disable_tqdm=True)
    return TrainingArguments(**{**base, **overrides})


# --- Hugging Face ---------------------------------------------------------------------------------


def test_a_clean_hf_job_has_no_finding(tmp_path: Path) -> None:
    t = Trainer(model=tiny_bert(), args=args(tmp_path), train_dataset=token_task(64, 1),
                eval_dataset=token_task(16, 2))
    assert preflight.check_hf(t) == []
    facts = preflight.facts_hf(t.args, t.model, t)
    assert facts["total_steps"] == STEPS and facts["warmup_steps"] == 12 and facts["decay"] == "cosine"
    assert facts["checkpoint_every"] == {"Steps": 50} and facts["eval_split"] is True
    assert facts["tuning"] == "full" and facts["token_level_loss"] is False

    class AtTrainBegin(TrainerCallback):
        """Checks the job as the callbacks do, once the Trainer built its optimizer and scheduler."""

        def __init__(self) -> None:
            self.found: list[list[Finding]] = []

        def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                           **kw: Any) -> None:
            assert t.lr_scheduler is not None
            self.found.append(preflight.check_hf(t))
            control.should_training_stop = True

    probe = AtTrainBegin()
    t.add_callback(probe)
    t.train()
    assert probe.found == [[]]


def test_fp16_on_a_model_whose_config_says_bf16(tmp_path: Path) -> None:
    model = llama(bf16_config=True)
    found = preflight.check_hf(args(tmp_path, fp16=True), model)
    assert kinds(found) == ["fp16_on_bf16_model"]
    assert found[0]["severity"] == "error" and "bf16=True" in found[0]["message"]
    assert preflight.check_hf(args(tmp_path, bf16=True), model) == []
    assert preflight.check_hf(args(tmp_path, fp16=True), llama()) == []


def test_bf16_on_a_cpu_without_native_bf16_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight, "native_bf16", lambda device: device.type != "cpu")
    found = preflight.check_hf(args(tmp_path, bf16=True), llama())
    assert kinds(found) == ["bf16_not_native"]
    assert found[0]["severity"] == "warning" and "set bf16=False" in found[0]["message"]
    assert preflight.facts_hf(args(tmp_path, bf16=True), llama())["native_bf16"] is False
    assert preflight.check_hf(args(tmp_path), llama()) == []
    assert "native_bf16" not in preflight.facts_hf(args(tmp_path), llama())


def test_the_cpus_bf16_is_native_where_it_has_avx512_or_amx() -> None:
    """PyTorch's oneDNN bf16 matmul needs AVX-512 (BW, VL, DQ), AVX-NE-CONVERT or AMX: the
    detector follows the CPU's own flags (an AMD Zen 3 has none of them)."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists() or "flags" not in cpuinfo.read_text():
        pytest.skip("no x86 /proc/cpuinfo to compare with")
    flags = set(next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")).split())
    avx512 = {"avx512bw", "avx512vl", "avx512dq"} <= flags
    assert NATIVE_BF16(torch.device("cpu")) == (avx512 or bool({"avx_ne_convert", "amx_bf16"} & flags)), flags


def vit() -> ViTForImageClassification:
    torch.manual_seed(0)
    # num_labels is among PreTrainedConfig's extra keyword arguments, which mypy's __init__ does not list.
    cfg = ViTConfig(image_size=8, patch_size=4, hidden_size=16, num_hidden_layers=2,  # type: ignore[call-arg]
                    intermediate_size=32, num_attention_heads=2, num_labels=2)
    return ViTForImageClassification(cfg)


def test_reentrant_checkpointing_of_lora_without_input_grads_is_found_and_fails_as_said(tmp_path: Path) -> None:
    # An image model: transformers hooks no input gradients when the Trainer turns checkpointing on.
    images = [{"pixel_values": torch.randn(3, 8, 8), "labels": torch.tensor(i % 2)} for i in range(64)]
    reentrant = args(tmp_path, gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": True},
                     max_steps=2)
    t = Trainer(model=lora(vit(), ["q_proj", "v_proj"]), args=reentrant, train_dataset=images,
                eval_dataset=images[:8])
    found = preflight.check_hf(t)
    assert kinds(found) == ["checkpointing_without_input_grads", "warmup_outside_range"], found
    assert found[0]["severity"] == "error" and found[0]["evidence"]["input_grads"] is False
    with pytest.raises(RuntimeError, match="does not require grad"):
        t.train()  # what the finding said: the checkpointed blocks give the loss no gradient
    fixed = args(tmp_path, gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": False})
    assert preflight.check_hf(fixed, lora(vit(), ["q_proj", "v_proj"])) == []


def test_reentrant_checkpointing_of_a_text_lora_is_a_warning(tmp_path: Path) -> None:
    # A text model: transformers hooks the input embeddings, so the adapters do get gradients.
    reentrant = args(tmp_path, gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": True})
    found = preflight.check_hf(reentrant, lora(llama(), ["q_proj", "v_proj"]))
    assert kinds(found) == ["reentrant_checkpointing_with_lora"]
    assert found[0]["severity"] == "warning"
    assert preflight.check_hf(reentrant, llama()) == []  # no adapters, nothing frozen to starve


def test_a_token_loss_the_trainer_does_not_normalise_over_the_window(tmp_path: Path) -> None:
    rows = lm_rows(64)
    model = llama()
    assert preflight.check_hf(Trainer(model=model, args=args(tmp_path), train_dataset=rows,
                                      eval_dataset=rows[:8])) == []
    setattr(model, "accepts_loss_kwargs", False)  # as models whose forward cannot take num_items_in_batch declare
    t = Trainer(model=model, args=args(tmp_path), train_dataset=rows, eval_dataset=rows[:8])
    assert t.model_accepts_loss_kwargs is False
    found = preflight.check_hf(t)
    assert kinds(found) == ["loss_not_normalised"]
    assert found[0]["evidence"]["accumulation"] == 2
    one = args(tmp_path, per_device_train_batch_size=32, gradient_accumulation_steps=1)
    assert preflight.check_hf(Trainer(model=model, args=one, train_dataset=rows, eval_dataset=rows[:8])) == []
    classifier = tiny_bert()
    setattr(classifier, "accepts_loss_kwargs", False)
    assert preflight.check_hf(args(tmp_path), classifier) == []  # a loss per sequence


def test_warmup_outside_two_to_five_percent(tmp_path: Path) -> None:
    for warmup, share in [(40, 0.1), (0, 0.0), (0.08, 0.08)]:
        found = preflight.check_hf(args(tmp_path, warmup_steps=warmup), tiny_bert())
        assert kinds(found) == ["warmup_outside_range"], warmup
        assert found[0]["evidence"]["warmup_share"] == pytest.approx(share)
    assert preflight.check_hf(args(tmp_path, warmup_steps=0.04), tiny_bert()) == []


def test_linear_decay_where_the_rules_say_cosine(tmp_path: Path) -> None:
    found = preflight.check_hf(args(tmp_path, lr_scheduler_type="linear"), tiny_bert())
    assert kinds(found) == ["decay_not_cosine"]
    assert 'lr_scheduler_type="cosine"' in found[0]["message"]


def test_the_seed_articles_lora_job(tmp_path: Path) -> None:
    article = args(tmp_path, learning_rate=2e-4, lr_scheduler_type="linear", warmup_steps=0.1)
    found = preflight.check_hf(article, lora(llama(), ["q_proj", "v_proj"]))
    assert kinds(found) == ["seed_article_failure"]
    assert found[0]["severity"] == "error"
    assert kinds(preflight.check_hf(article, llama())) == ["warmup_outside_range", "decay_not_cosine"]


def test_the_effective_batch_counts_accumulation(tmp_path: Path) -> None:
    small = args(tmp_path, per_device_train_batch_size=8, gradient_accumulation_steps=1)
    found = preflight.check_hf(small, tiny_bert())
    assert kinds(found) == ["effective_batch_outside_range"]
    assert found[0]["evidence"]["effective_batch"] == 8
    assert "gradient_accumulation_steps=4" in found[0]["message"]
    large = args(tmp_path, per_device_train_batch_size=64, gradient_accumulation_steps=2)
    assert kinds(preflight.check_hf(large, tiny_bert())) == ["effective_batch_outside_range"]


def test_checkpoints_rarer_than_every_50_steps(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, Any], Any]] = [({"save_steps": 500}, {"Steps": 500}), ({"save_strategy": "no"}, "Never")]
    for overrides, cadence in cases:
        found = preflight.check_hf(args(tmp_path, **overrides), tiny_bert())
        assert kinds(found) == ["sparse_checkpoints"], overrides
        assert found[0]["evidence"]["checkpoint_every"] == cadence
    # Once an epoch of 1,600 samples at 16 × 2 a step: every 50 steps (fine), or 100 at 3,200.
    for samples, found_one in [(1600, False), (3200, True)]:
        epochs = args(tmp_path, save_strategy="epoch", eval_strategy="epoch")
        t = Trainer(model=tiny_bert(), args=epochs, train_dataset=token_task(samples, 1),
                    eval_dataset=token_task(16, 2))
        assert kinds(preflight.check_hf(t)) == (["sparse_checkpoints"] if found_one else []), samples


def test_no_eval_dataset(tmp_path: Path) -> None:
    t = Trainer(model=tiny_bert(), args=args(tmp_path, eval_strategy="no"), train_dataset=token_task(64, 1))
    found = preflight.check_hf(t)
    assert kinds(found) == ["no_eval_split"]
    assert found[0]["severity"] == "error" and "eval_dataset=" in found[0]["message"]


def test_a_scheduler_given_to_the_trainer_is_read_off_its_curve(tmp_path: Path) -> None:
    model = tiny_bert()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5)
    linear = schedule("linear", opt, 40)
    t = Trainer(model=model, args=args(tmp_path), train_dataset=token_task(64, 1), eval_dataset=token_task(16, 2),
                optimizers=(opt, linear))
    found = preflight.check_hf(t)
    assert kinds(found) == ["warmup_outside_range", "decay_not_cosine"]
    assert found[0]["evidence"]["warmup_share"] == pytest.approx(0.1)
    assert opt.param_groups[0]["lr"] == 0.0 and linear.last_epoch == 0  # the job's own left untouched
    cosine = schedule("cosine", opt, 12)
    t = Trainer(model=model, args=args(tmp_path), train_dataset=token_task(64, 1), eval_dataset=token_task(16, 2),
                optimizers=(opt, cosine))
    assert preflight.check_hf(t) == []


def test_report_prints_one_line_a_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    preflight.report(preflight.check_hf(args(tmp_path, save_steps=500, lr_scheduler_type="linear"), tiny_bert()))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.startswith("[contrai] pre-flight: ") for line in lines), lines


def test_facts_of_the_wrong_form_are_refused() -> None:
    with pytest.raises(ValueError, match="job facts"):
        preflight.check({"warmup": 0.1})  # type: ignore[typeddict-unknown-key]


# --- Lightning ------------------------------------------------------------------------------------


def batches(n: int, size: int = 16) -> DataLoader[Any]:
    g = torch.Generator().manual_seed(n)
    rows = [(torch.randn(8, generator=g), torch.tensor(i % 2)) for i in range(n)]
    return DataLoader(dataset(rows), batch_size=size)


class Classifier(pl.LightningModule):
    """A small classifier with a cosine schedule and 3 % warmup (``schedule`` changes it)."""

    def __init__(self, schedule: str | None = "cosine") -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 2)
        self.schedule = schedule

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=1e-3)
        if self.schedule is None:
            return opt
        return {"optimizer": opt, "lr_scheduler": {"scheduler": schedule(self.schedule, opt, 12), "interval": "step"}}


class NoValidation(Classifier):
    validation_step = None  # type: ignore[assignment]


class CausalLm(pl.LightningModule):
    """A causal LM (its loss a mean over tokens), LoRA-wrapped when asked."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss: torch.Tensor = self.model(**batch).loss
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.model(**batch).loss)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=1e-4)
        return {"optimizer": opt,
                "lr_scheduler": {"scheduler": schedule("cosine", opt, 12), "interval": "step"}}


def trainer(**overrides: Any) -> pl.Trainer:
    """A Trainer within every rule (400 steps, 16 × 2 a step, a checkpoint every 50), with ``overrides``."""
    base: dict[str, Any] = dict(accelerator="cpu", devices=1, max_steps=STEPS, accumulate_grad_batches=2,
                                callbacks=[ModelCheckpoint(every_n_train_steps=50)], logger=False,
                                enable_progress_bar=False, enable_model_summary=False)
    return pl.Trainer(**{**base, **overrides})


def test_a_clean_lightning_job_has_no_finding_before_fit_and_inside_it(tmp_path: Path) -> None:
    module = Classifier()
    assert preflight.check_lightning(trainer(), module, batches(256), batches(32)) == []

    seen: list[list[Finding]] = []

    class Check(pl.Callback):
        def on_train_start(self, t: pl.Trainer, m: pl.LightningModule) -> None:
            seen.append(preflight.check_lightning(t, m))
            t.should_stop = True

    t = trainer(default_root_dir=str(tmp_path), callbacks=[ModelCheckpoint(every_n_train_steps=50), Check()])
    t.fit(module, batches(256), batches(32))
    assert seen == [[]]
    facts = preflight.facts_lightning(trainer(), module, batches(256), batches(32))
    assert facts["decay"] == "cosine" and facts["warmup_ratio"] == pytest.approx(0.03)
    assert facts["per_device_batch"] == 16 and facts["checkpoint_every"] == {"Steps": 50}


def test_lightning_schedules_read_off_their_curves() -> None:
    found = preflight.check_lightning(trainer(), Classifier("linear"), batches(256), batches(32))
    assert kinds(found) == ["decay_not_cosine"]
    found = preflight.check_lightning(trainer(), Classifier(None), batches(256), batches(32))
    assert kinds(found) == ["warmup_outside_range", "decay_not_cosine"]


def test_lightning_fp16_on_a_bf16_model() -> None:
    rows = DataLoader(dataset(lm_rows(64)), batch_size=16)
    module = CausalLm(llama(bf16_config=True))
    found = preflight.check_lightning(trainer(precision="16-true"), module, rows, rows,
                                      loss_over_window=True)
    assert kinds(found) == ["fp16_on_bf16_model"]
    assert 'precision="bf16-mixed"' in found[0]["message"]
    assert preflight.check_lightning(trainer(precision="bf16-mixed"), module, rows, rows,
                                     loss_over_window=True) == []


def test_lightning_bf16_on_a_cpu_without_native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight, "native_bf16", lambda device: False)
    rows = DataLoader(dataset(lm_rows(64)), batch_size=16)
    found = preflight.check_lightning(trainer(precision="bf16-mixed"), CausalLm(llama()), rows, rows,
                                      loss_over_window=True)
    assert kinds(found) == ["bf16_not_native"]
    assert 'precision="32-true"' in found[0]["message"]


def test_lightning_accumulates_a_token_loss_per_micro_batch() -> None:
    rows = DataLoader(dataset(lm_rows(64)), batch_size=16)
    module = CausalLm(llama())
    assert kinds(preflight.check_lightning(trainer(), module, rows, rows)) == ["loss_not_normalised"]
    assert preflight.check_lightning(trainer(), module, rows, rows, loss_over_window=True) == []
    one = DataLoader(dataset(lm_rows(64)), batch_size=32)
    assert preflight.check_lightning(trainer(accumulate_grad_batches=1), module, one, one) == []


def test_lightning_reentrant_checkpointing_of_lora() -> None:
    rows = DataLoader(dataset(lm_rows(64)), batch_size=16)
    model = lora(llama(), ["q_proj", "v_proj"])
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    module = CausalLm(model)
    found = preflight.check_lightning(trainer(), module, rows, rows, loss_over_window=True)
    assert kinds(found) == ["reentrant_checkpointing_with_lora"]
    model.base_model.model.disable_input_require_grads()
    found = preflight.check_lightning(trainer(), module, rows, rows, loss_over_window=True)
    assert kinds(found) == ["checkpointing_without_input_grads"]


def test_lightning_effective_batch_and_checkpoints() -> None:
    found = preflight.check_lightning(trainer(accumulate_grad_batches=1), Classifier(), batches(256, 8), batches(32))
    assert kinds(found) == ["effective_batch_outside_range"]
    assert "accumulate_grad_batches=4" in found[0]["message"]
    # The default ModelCheckpoint saves after each validation: once an epoch of 256 batches of 16
    # (128 steps at 2 a step), or four times an epoch (32 steps).
    long_epoch = batches(256 * 16)
    found = preflight.check_lightning(trainer(callbacks=[]), Classifier(), long_epoch, batches(32))
    assert kinds(found) == ["sparse_checkpoints"] and found[0]["evidence"]["checkpoint_every"] == {"Steps": 128}
    assert preflight.check_lightning(trainer(callbacks=[], val_check_interval=0.25), Classifier(), long_epoch,
                                     batches(32)) == []
    found = preflight.check_lightning(trainer(callbacks=[], enable_checkpointing=False), Classifier(),
                                      batches(256), batches(32))
    assert kinds(found) == ["sparse_checkpoints"] and found[0]["evidence"]["checkpoint_every"] == "Never"
    found = preflight.check_lightning(trainer(callbacks=[ModelCheckpoint(every_n_train_steps=200)]), Classifier(),
                                      batches(256), batches(32))
    assert kinds(found) == ["sparse_checkpoints"]


def test_lightning_without_validation() -> None:
    found = preflight.check_lightning(trainer(), Classifier(), batches(256))
    assert kinds(found) == ["no_eval_split"]
    assert "val_dataloaders" in found[0]["message"]
    assert kinds(preflight.check_lightning(trainer(), NoValidation(), batches(256), batches(32))) == ["no_eval_split"]
    assert kinds(preflight.check_lightning(trainer(limit_val_batches=0), Classifier(), batches(256),
                                           batches(32))) == ["no_eval_split"]


# --- Run by the callbacks -------------------------------------------------------------------------

CALLBACK_RECIPE = """
[run]
phases = ["main"]
eval_every = 10
checkpoint_every = 10
[main]
steps = 20
batch = 16
lr = {lr}
warmup = {warmup}
schedule = "{schedule}"
"""


def under_callback(tmp_path: Path, model: Any, recipe: str, **kw: Any) -> Trainer:
    """An HF job on ``model`` under ContraiCallback with ``recipe`` (its Trainer told a linear
    schedule with 10 % warmup, which the conductor overrides)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "recipe.toml").write_text(recipe)
    t = Trainer(model=model, args=args(tmp_path, max_steps=20, lr_scheduler_type="linear", warmup_steps=2,
                                       save_strategy="no", gradient_accumulation_steps=1),
                train_dataset=lm_rows(64), eval_dataset=lm_rows(16))
    ContraiCallback(tmp_path / "recipe.toml", run_dir=tmp_path / "run", **kw).attach(t)
    return t


def test_the_hf_callback_refuses_the_seed_articles_recipe_and_judges_the_recipes_schedule(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    article = CALLBACK_RECIPE.format(lr=2e-4, warmup=0.1, schedule="linear")
    t = under_callback(tmp_path, lora(llama(), ["q_proj", "v_proj"]), article)
    with pytest.raises(ValueError, match="seed article") as refused:
        t.train()
    # The fix names the recipe's keys: the recipe, not TrainingArguments, sets the schedule.
    assert "main.warmup" in str(refused.value) and 'preflight="warn"' in str(refused.value)
    assert not (tmp_path / "run" / "metrics.jsonl").exists(), "refused before the run began"
    capsys.readouterr()
    # A recipe within the rules trains, whatever schedule TrainingArguments names; the missing
    # holdout is said, not refused.
    clean = CALLBACK_RECIPE.format(lr=2e-4, warmup=0.03, schedule="cosine")
    under_callback(tmp_path / "clean", lora(llama(), ["q_proj", "v_proj"]), clean).train()
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[contrai] pre-flight:")]
    assert len(said) == 1 and "holdout" in said[0], said
    assert (tmp_path / "clean" / "run" / "final" / "eval.json").exists()


def test_preflight_warn_trains_anyway_and_off_says_nothing(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    article = CALLBACK_RECIPE.format(lr=2e-4, warmup=0.1, schedule="linear")
    under_callback(tmp_path / "warn", lora(llama(), ["q_proj", "v_proj"]), article, preflight="warn").train()
    assert "seed article" in capsys.readouterr().out
    under_callback(tmp_path / "off", lora(llama(), ["q_proj", "v_proj"]), article, preflight="off").train()
    assert "pre-flight" not in capsys.readouterr().out


def test_a_recipe_asking_bf16_of_an_fp32_job_says_the_job_decides(tmp_path: Path) -> None:
    # model.precision sets Contrai's own engine; a PyTorch job trains in what its arguments say.
    clean = CALLBACK_RECIPE.format(lr=2e-4, warmup=0.03, schedule="cosine")
    bf16 = clean + '[model]\nprecision = "bf16"\n'
    fp32_job = preflight.facts_hf(args(tmp_path), tiny_bert())
    found = preflight.under_recipe(fp32_job, bf16, "recipe.toml", holdout=True)
    assert kinds(found) == ["precision_not_applied"]
    assert "bf16=True" in found[0]["message"] and "trains in fp32" in found[0]["message"], found[0]["message"]
    bf16_job = preflight.facts_hf(args(tmp_path, bf16=True), tiny_bert())
    assert kinds(preflight.under_recipe(bf16_job, bf16, "recipe.toml", holdout=True)) == []
    assert kinds(preflight.under_recipe(fp32_job, clean, "recipe.toml", holdout=True)) == []


def test_the_lightning_callback_runs_the_check(tmp_path: Path) -> None:
    (tmp_path / "recipe.toml").write_text(CALLBACK_RECIPE.format(lr=1e-3, warmup=0.03, schedule="cosine"))
    rows = DataLoader(dataset(lm_rows(64)), batch_size=16)
    job = LightningCallback(tmp_path / "recipe.toml", tmp_path / "run", holdout_dataset=lm_rows(8))
    with pytest.raises(ValueError, match="fp16"):
        trainer(max_steps=20, precision="16-true", callbacks=[job]).fit(CausalLm(llama(bf16_config=True)), rows, rows)
