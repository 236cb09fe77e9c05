//! The recipe: every setting of a run, with defaults, validated before any work.

use contrai_base::Format;
use serde::{Deserialize, Serialize};

use crate::choice::{
    Dedup, ModelKind, OnConflict, Phase, PruneSchedule, PruneScope, Quantizations, Quantize,
};
use crate::schedule::Decay;

/// A whole run's settings (`contrai recipe init` prints the default with comments).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Recipe {
    /// Name, seed, output and cadence.
    pub run: Run,
    /// The dataset and its split.
    pub data: Data,
    /// The model.
    pub model: Model,
    /// The pipeline check before the main compute.
    pub validate: Validate,
    /// The main training phase.
    pub main: Main,
    /// The contraction phase.
    pub contract: Contract,
    /// The final polish.
    pub refine: Refine,
    /// The live guards and the controller's rules.
    pub guards: Guards,
}

/// `[run]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Run {
    /// The run's name: its directory is `<out>/<name>`.
    pub name: String,
    /// Seed of every random choice (split, initialisation, batches, dropout).
    pub seed: u64,
    /// Parent directory of runs.
    pub out: String,
    /// Evaluate on the validation partition every this many optimizer steps.
    pub eval_every: u64,
    /// Write a checkpoint every this many optimizer steps.
    pub checkpoint_every: u64,
    /// Checkpoints kept besides the best one.
    pub keep_last: u32,
    /// Phases to run, a subsequence of `validate, main, diagnose, contract, refine` holding `main`.
    pub phases: Vec<Phase>,
}

impl Run {
    /// Whether `phase` runs.
    pub fn has_phase(&self, phase: Phase) -> bool {
        self.phases.contains(&phase)
    }

    /// The phase that runs after `phase` (diagnose included), if any.
    pub fn after(&self, phase: Phase) -> Option<Phase> {
        self.phases.iter().copied().find(|p| *p > phase)
    }
}

impl Default for Run {
    fn default() -> Self {
        Run {
            name: "demo".into(),
            seed: 42,
            out: "runs".into(),
            eval_every: 50,
            checkpoint_every: 50,
            keep_last: 3,
            phases: Phase::all(),
        }
    }
}

/// `[data]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Data {
    /// A JSONL, CSV, TSV or Parquet file, or a split directory with a manifest; empty: the
    /// built-in demo.
    pub path: String,
    /// Field holding the text.
    pub text: String,
    /// Field holding the label.
    pub label: String,
    /// Field holding a unique id.
    pub id: String,
    /// The file's format when its extension does not tell it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    /// A CSV/TSV file without a header row: its columns' names, in order (empty: the first line
    /// names them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<String>,
    /// Partition shares.
    pub split: Split,
    /// Near-duplicate detection.
    pub near_duplicates: NearDuplicates,
    /// Duplicate clusters whose labels disagree.
    pub on_label_conflict: OnConflict,
    /// Duplicates dropped before training.
    pub dedup: Dedup,
}

impl Default for Data {
    fn default() -> Self {
        Data {
            path: String::new(),
            text: "text".into(),
            label: "label".into(),
            id: "id".into(),
            format: None,
            columns: Vec::new(),
            split: Split::default(),
            near_duplicates: NearDuplicates::default(),
            on_label_conflict: OnConflict::Drop,
            dedup: Dedup::Exact,
        }
    }
}

/// `[data.split]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Split {
    /// Share of train.
    pub train: f64,
    /// Share of validation.
    pub val: f64,
    /// Share of the holdout, evaluated once at the very end.
    pub holdout: f64,
}

impl Default for Split {
    fn default() -> Self {
        Split {
            train: 0.85,
            val: 0.10,
            holdout: 0.05,
        }
    }
}

/// `[data.near_duplicates]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NearDuplicates {
    /// Jaccard similarity of shingles at or above which two texts are near-copies.
    pub threshold: f64,
    /// Texts whose words differ by at most this share of the longer one's (at least one word,
    /// from 8 words) are near-copies too; 0 turns that rule off.
    pub edit_share: f64,
}

impl Default for NearDuplicates {
    fn default() -> Self {
        NearDuplicates {
            threshold: 0.8,
            edit_share: 0.05,
        }
    }
}

/// What contraction prunes in a pretrained BERT-family encoder when the recipe does not say:
/// parameter-path globs and their final sparsity (attention capped lower, as for the transformer).
pub const BERT_PRUNE: [(&str, f64); 3] = [
    ("bert.encoder.layer.*.attention.self_attn.*", 0.2),
    ("bert.encoder.layer.*.intermediate.dense.*", 0.3),
    ("bert.encoder.layer.*.output.dense.*", 0.3),
];

/// The main phase's peak LR of a LoRA fine-tune when the recipe does not say: adapters start at
/// zero and need an LR about ten times a full fine-tune's (1e-4 … 5e-4 is usual).
pub const LORA_LR: f64 = 5e-4;

/// `[model]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Model {
    /// The transformer (text) or the MLP (numeric features).
    pub kind: ModelKind,
    /// Tokenizer vocabulary size.
    pub vocab: usize,
    /// Tokens a sample (longer texts are cut, shorter padded).
    pub seq_len: usize,
    /// Width of the residual stream.
    pub d_model: usize,
    /// Transformer blocks (or hidden layers of the MLP).
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Width of the feed-forward layer.
    pub ffn: usize,
    /// Dropout probability (`bert`: hidden and attention dropout alike, replacing the config's).
    pub dropout: f64,
    /// `bert`: the Hugging Face model directory (config.json, model.safetensors, tokenizer.json);
    /// its config sets the sizes above and its tokenizer the vocabulary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pretrained: Option<String>,
    /// `bert`: how the head's input is pooled [default: cls].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pooling: Option<crate::choice::Pooling>,
    /// `bert`: fine-tune through low-rank adapters instead of every weight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora: Option<Lora>,
    /// Activation checkpointing: each transformer block's activations recomputed in the backward
    /// pass instead of kept from the forward (less memory for one more forward pass a step).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub gradient_checkpointing: bool,
    /// The matrix products' arithmetic: `f32`, or `bf16` where the CPU multiplies in it.
    #[serde(skip_serializing_if = "crate::choice::Precision::is_f32")]
    pub precision: crate::choice::Precision,
}

/// `[model.lora]`: LoRA adapters on a pretrained encoder's linear layers. The encoder's own weights
/// stay frozen through validate and main, the adapters and the head train; at the end of main
/// the adapters are merged into the weights, which contraction then prunes and fine-tunes whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Lora {
    /// Rank of each adapter's two factors.
    pub rank: usize,
    /// The adapters' scale numerator: their update is scaled by `alpha / rank`.
    pub alpha: f64,
    /// The linear layers that get an adapter, by the end of their module path (`query` matches
    /// every `...attention.self_attn.query`).
    pub targets: Vec<String>,
}

impl Default for Lora {
    fn default() -> Self {
        Lora {
            rank: 8,
            alpha: 16.0,
            targets: vec!["query".into(), "value".into()],
        }
    }
}

impl Default for Model {
    fn default() -> Self {
        Model {
            kind: ModelKind::Transformer,
            vocab: 8192,
            seq_len: 128,
            d_model: 128,
            layers: 2,
            heads: 4,
            ffn: 512,
            dropout: 0.1,
            pretrained: None,
            pooling: None,
            lora: None,
            gradient_checkpointing: false,
            precision: crate::choice::Precision::F32,
        }
    }
}

/// `[validate]`: overfit one small batch before the main compute is spent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Validate {
    /// Optimizer steps on the one batch.
    pub steps: u64,
    /// Samples in the batch.
    pub batch: usize,
    /// Constant learning rate of the check.
    pub lr: f64,
    /// Share by which the batch's loss must fall (0.9 = by more than 90 %).
    pub min_fall: f64,
    /// The check's LR when the job trains adapters on a frozen model (LoRA): they start at zero
    /// and hold few weights, so they need a higher LR to move one batch's loss in a few steps.
    pub adapter_lr: f64,
    /// The fall an adapter job's check must reach: a rank-8 adapter cannot memorise a batch of
    /// token sequences as a whole model can (SmolLM2-135M, LoRA r 8 on q/v, 30 steps at 5e-3:
    /// −97 %; at 1e-3: −56 %).
    pub adapter_min_fall: f64,
}

impl Default for Validate {
    fn default() -> Self {
        Validate {
            steps: 30,
            batch: 8,
            lr: 1e-3,
            min_fall: 0.9,
            adapter_lr: 5e-3,
            adapter_min_fall: 0.5,
        }
    }
}

/// `[main]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Main {
    /// Optimizer steps.
    pub steps: u64,
    /// Samples a micro-batch, per device.
    pub batch: usize,
    /// Micro-batches accumulated into one optimizer step.
    pub accumulate: usize,
    /// Devices (data parallel).
    pub devices: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Floor of the decay.
    pub min_lr: f64,
    /// Warmup as a fraction of the phase's steps (2–5 % recommended).
    pub warmup: f64,
    /// `cosine`, `linear` or `constant`.
    pub schedule: Decay,
    /// AdamW weight decay.
    pub weight_decay: f64,
    /// Global gradient-norm clip; 0 disables it.
    pub clip_norm: f64,
}

impl Default for Main {
    fn default() -> Self {
        Main {
            steps: 400,
            batch: 32,
            accumulate: 1,
            devices: 1,
            lr: 5e-4,
            min_lr: 1e-5,
            warmup: 0.03,
            schedule: Decay::Cosine,
            weight_decay: 0.01,
            clip_norm: 1.0,
        }
    }
}

impl Main {
    /// Samples an optimizer step sees: per-device batch × devices × accumulation steps.
    pub fn effective_batch(&self) -> usize {
        self.batch * self.devices * self.accumulate
    }
}

/// `[contract]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Contract {
    /// Share of all steps given to contraction (0.15–0.30).
    pub budget: f64,
    /// Batch size; never below half of main's.
    pub batch: usize,
    /// Dropout multiplier.
    pub dropout_scale: f64,
    /// Share of the training samples with the highest loss dropped (at most).
    pub drop_noisiest: f64,
    /// Only samples whose loss is above this count as noisy (ln 2: the model gives their label
    /// less than even odds).
    pub noisy_loss: f64,
    /// Relative change of validation loss between checkpoints that counts as stable.
    pub stable_delta: f64,
    /// Stable checkpoints in a row required to enter.
    pub stable_checkpoints: u32,
    /// Relative worsening of validation loss tolerated before rolling back.
    pub tolerance: f64,
    /// Evaluations in a row beyond tolerance before rolling back.
    pub patience: u32,
    /// Evaluate (and checkpoint) every this many steps while contracting.
    pub eval_every: u64,
    /// Pruning targets by parameter glob.
    pub prune: Vec<Prune>,
    /// Update the pruning masks every this many steps.
    pub prune_every: u64,
    /// Growth of sparsity from `init` to `final`.
    pub prune_schedule: PruneSchedule,
    /// Share of the contraction over which sparsity grows to `final` (the rest recovers).
    pub prune_span: f64,
    /// A module stops being pruned when the validation − training loss gap has grown by more
    /// than this share of the validation loss since contraction began.
    pub divergence: f64,
    /// One magnitude threshold a module, or one over all selected weights (modules' caps hold).
    pub prune_scope: PruneScope,
    /// Prune attention by whole heads (the weakest heads' query/key/value columns and output rows)
    /// instead of single weights.
    pub prune_heads: bool,
    /// Prune feed-forward layers by whole units (a unit's expansion column and its projection
    /// row) instead of single weights: the exported model then really is smaller and faster.
    pub prune_units: bool,
}

impl Default for Contract {
    fn default() -> Self {
        Contract {
            budget: 0.2,
            batch: 16,
            dropout_scale: 0.5,
            drop_noisiest: 0.02,
            noisy_loss: std::f64::consts::LN_2,
            stable_delta: 0.02,
            stable_checkpoints: 2,
            tolerance: 0.02,
            patience: 3,
            eval_every: 20,
            prune_every: 10,
            prune_schedule: PruneSchedule::Cubic,
            prune_span: 0.75,
            divergence: 0.1,
            prune_scope: PruneScope::Module,
            prune_heads: false,
            prune_units: false,
            prune: vec![
                Prune::new("blocks.*.attn.*", 0.2),
                Prune::new("blocks.*.ffn.*", 0.5),
            ],
        }
    }
}

/// One pruning target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prune {
    /// Glob over parameter paths.
    pub params: String,
    /// Sparsity when pruning starts.
    #[serde(default = "default_prune_init")]
    pub init: f64,
    /// Sparsity reached at the end of contraction.
    #[serde(rename = "final")]
    pub final_sparsity: f64,
}

/// The sparsity a pruned matrix starts at (gradual pruning: gentle first, then to its final).
pub const PRUNE_INIT: f64 = 0.1;

fn default_prune_init() -> f64 {
    PRUNE_INIT
}

impl Prune {
    /// Matrices matching `params`, pruned from [`PRUNE_INIT`] to `final_sparsity`.
    pub fn new(params: impl Into<String>, final_sparsity: f64) -> Prune {
        Prune {
            params: params.into(),
            init: PRUNE_INIT,
            final_sparsity,
        }
    }
}

/// `[refine]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Refine {
    /// Share of all steps given to the final anneal.
    pub budget: f64,
    /// The weight-only quantized variants made after training, each judged on its own.
    pub quantize: Quantizations,
    /// Largest drop a quantized variant may cost before it is refused: validation accuracy
    /// points, or for a language model its validation perplexity's rise in percent.
    pub max_drop: f64,
    /// 0: one int8 scale a weight matrix; N (1–255): a scale every N weights of a row.
    pub quantize_block: u8,
    /// Knowledge distillation of the refined model into a smaller student.
    pub distill: Distill,
}

impl Default for Refine {
    fn default() -> Self {
        Refine {
            budget: 0.05,
            quantize: Quantizations::new([Quantize::Int8]),
            max_drop: 1.0,
            quantize_block: 0,
            distill: Distill::default(),
        }
    }
}

/// `[refine.distill]`: a smaller student trained on the teacher's softened outputs, with the loss
/// `w_ce · CE(student, labels) + w_kd · T² · KL(softmax(teacher/T) ‖ softmax(student/T))`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Distill {
    /// Train a student after refine.
    pub enabled: bool,
    /// The student's transformer blocks.
    pub layers: usize,
    /// The student's width.
    pub d_model: usize,
    /// The student's attention heads.
    pub heads: usize,
    /// The student's feed-forward width.
    pub ffn: usize,
    /// The student's optimizer steps (its own schedule: warmup, then cosine to 0).
    pub steps: u64,
    /// The student's batch.
    pub batch: usize,
    /// The student's peak LR.
    pub lr: f64,
    /// Share of the student's steps spent warming up.
    pub warmup: f64,
    /// Softmax temperature T of both teacher and student in the KD term.
    pub temperature: f64,
    /// Weight of the cross-entropy with the labels.
    pub w_ce: f64,
    /// Weight of the T²-scaled KL divergence from the teacher.
    pub w_kd: f64,
    /// Evaluate the student on validation this often (the best evaluation is kept).
    pub eval_every: u64,
}

impl Default for Distill {
    fn default() -> Self {
        Distill {
            enabled: true,
            layers: 1,
            d_model: 64,
            heads: 2,
            ffn: 256,
            steps: 500,
            batch: 32,
            lr: 2e-3,
            warmup: 0.05,
            temperature: 2.0,
            w_ce: 0.5,
            w_kd: 0.5,
            eval_every: 50,
        }
    }
}

/// `[guards]`: what the live controller watches and how it acts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Guards {
    /// Act on the live doctor's findings (false: a plain run that only records).
    pub enabled: bool,
    /// Rollbacks after a non-finite loss or gradient before the run gives up.
    pub nan_retries: u32,
    /// LR multiplier after each non-finite rollback.
    pub nan_lr_factor: f64,
    /// LR multiplier when the main phase plateaus.
    pub plateau_lr_factor: f64,
    /// Steps after an LR cut before the plateau rule may cut again.
    pub plateau_cooldown: u64,
    /// Steps of validation without improvement, while training loss falls, that end main early.
    pub overfit_patience: u64,
    /// A training loss is a spike at this robust z-score (log loss against the median and spread
    /// of the recent window); `inf` turns spike triage off.
    pub spike_z: f64,
    /// ... or at least this many times the highest loss of the window (a jump beyond anything
    /// recent, where heavy-tailed batch noise keeps the z-score low) ...
    pub spike_over_max: f64,
    /// ... and, either way, at least this many times the window's median loss (the floor a flat
    /// curve's tiny spread cannot undercut).
    pub spike_ratio: f64,
    /// Finite training losses the spike detector remembers.
    pub spike_window: usize,
    /// Losses it needs before it judges.
    pub spike_history: usize,
    /// Spike rollbacks before the run gives up.
    pub spike_retries: u32,
    /// LR multiplier when other batches spike (an optimisation cause).
    pub spike_lr_factor: f64,
    /// The samples of a spike count as the same as an earlier spike's when a random batch would
    /// share that many rows with the earlier ones less often than this.
    pub spike_chance: f64,
}

impl Default for Guards {
    fn default() -> Self {
        Guards {
            enabled: true,
            nan_retries: 3,
            nan_lr_factor: 0.5,
            plateau_lr_factor: 0.5,
            plateau_cooldown: 100,
            overfit_patience: 300,
            spike_z: 10.0,
            spike_over_max: 4.0,
            spike_ratio: 2.0,
            spike_window: 64,
            spike_history: 16,
            spike_retries: 8,
            spike_lr_factor: 0.5,
            spike_chance: 0.05,
        }
    }
}
