//! The default recipe as commented TOML: what `contrai recipe init` prints.

use crate::choice::{Dedup, ModelKind, OnConflict, PruneSchedule, PruneScope, Quantizations, choices};
use crate::schedule::Decay;

/// The default recipe, every key with a comment; it parses to [`crate::Recipe::default`]. The
/// lists of allowed values come from the types that define them.
pub fn default_recipe() -> String {
    fill(TEMPLATE)
}

/// `main.steps` as the default recipe writes it.
const MAIN_STEPS: &str = "steps = 400              # optimizer steps\n";

/// The default recipe for a PyTorch job (`contrai recipe init --for hf|lightning`): `main.steps`
/// left out, so the job's own step limit holds the plan (main, contract and refine at their
/// shares; written, it wins).
pub fn job_recipe() -> String {
    default_recipe().replacen(
        MAIN_STEPS,
        "# steps = 400            # left to the job: its max_steps (or epochs × batches) hold main, contract and refine\n\
         #                          at their shares; write it to fix main's steps yourself\n",
        1,
    )
}

/// What [`pretrained_recipe`] needs to know of a checkpoint (read from its `config.json`).
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The model directory, as the recipe will name it.
    pub dir: String,
    /// Its `max_position_embeddings`.
    pub max_positions: usize,
    /// Its `hidden_dropout_prob`.
    pub dropout: f64,
    /// A sentence encoder (sentence-transformers' `modules.json` beside it): mean pooling.
    pub sentence_encoder: bool,
}

/// The default recipe fitted to fine-tuning `ck`: `kind = "bert"` with its directory, pooling,
/// sequence length (128, or fewer positions if it has fewer) and dropout; the LRs of a
/// fine-tune (main 5e-5 with 6 % warmup, validate 1e-4); contraction pruning its feed-forward and
/// attention matrices by their Hugging Face names. With `lora`, a `[model.lora]` section and
/// LoRA's LR (main [`LORA_LR`](crate::recipe::LORA_LR); validate's check runs at `adapter_lr`). It parses to what it says.
pub fn pretrained_recipe(ck: &Checkpoint, lora: bool) -> String {
    let pooling = if ck.sentence_encoder { "mean" } else { "cls" };
    let model = format!(
        "[model]\n\
         kind = \"bert\"            # a pretrained BERT-family encoder with a fresh classification head\n\
         pretrained = {dir:?}\n\
         pooling = \"{pooling}\"{pad}# cls: the checkpoint's pooler | mean: the real tokens' mean (sentence encoders)\n\
         seq_len = {seq}            # tokens a sample, special tokens included (the checkpoint has {max} positions)\n\
         dropout = {dropout}            # hidden and attention dropout (the checkpoint's {dropout})\n\
         # gradient_checkpointing = true  # recompute each layer's activations in the backward pass\n\
         #                          (less memory for long sequences, one more forward pass a step)\n\
         # precision = \"bf16\"     # the matrix products in bf16, summed in f32 (CPUs with AVX512-BF16)\n\
         # vocab, d_model, layers, heads and ffn come from the checkpoint's config.json\n{lora}",
        dir = ck.dir,
        pad = " ".repeat(13 - pooling.len()),
        seq = ck.max_positions.min(128),
        max = ck.max_positions,
        dropout = ck.dropout,
        lora = if lora { LORA_SECTION } else { "" },
    );
    let (validate_lr, main_lr) = match lora {
        true => (
            "lr = 1e-3                # constant LR of the check when every weight trains".to_string(),
            format!(
                "lr = {:e}                # peak learning rate: 1e-4 … 5e-4 trains LoRA adapters",
                crate::recipe::LORA_LR
            ),
        ),
        false => (
            "lr = 1e-4                # constant LR of the check".to_string(),
            "lr = 5e-5                # peak learning rate: 2e-5 … 5e-5 fine-tunes a pretrained encoder"
                .to_string(),
        ),
    };
    let start = TEMPLATE.find("[model]").unwrap_or(0);
    let end = TEMPLATE.find("[validate]").unwrap_or(start);
    let text = format!("{}{model}\n{}", &TEMPLATE[..start], &TEMPLATE[end..]);
    let text = text
        .replace(
            "lr = 1e-3                # constant LR of the check (mlp: 3e-3)",
            &validate_lr,
        )
        .replace("lr = 5e-4                # peak learning rate (mlp: 1e-3)", &main_lr)
        .replace("warmup = 0.03            # linear warmup, as a fraction of the steps (2–5 %)",
                 "warmup = 0.06            # linear warmup, as a fraction of the steps (6–10 % for a fine-tune)")
        .replace(
            "    { params = \"blocks.*.attn.*\", init = 0.1, final = 0.2 },\n    { params = \"blocks.*.ffn.*\", init = 0.1, final = 0.5 },\n",
            &crate::recipe::BERT_PRUNE
                .iter()
                .map(|(p, f)| format!("    {{ params = {p:?}, init = {}, final = {f} }},\n", crate::recipe::PRUNE_INIT))
                .collect::<String>(),
        );
    fill(&text)
}

/// `[model.lora]` with its defaults, as [`pretrained_recipe`] writes it.
const LORA_SECTION: &str = "\n[model.lora]              # LoRA: the encoder frozen through main, low-rank adapters and the head trained;\n\
                            # the adapters are merged into the weights when main ends (contraction prunes them)\n\
rank = 8                  # rank of each adapter\n\
alpha = 16.0              # adapters' updates scaled by alpha / rank\n\
targets = [\"query\", \"value\"]   # linear layers adapted, by the end of their module path\n";

/// The template's lists of allowed values, filled in from the types that define them.
fn fill(text: &str) -> String {
    text.replace("@ON_CONFLICT@", &choices::<OnConflict>())
        .replace("@DEDUP@", &choices::<Dedup>())
        .replace("@MODEL_KIND@", &choices::<ModelKind>())
        .replace("@DECAY@", &choices::<Decay>())
        .replace("@PRUNE_SCHEDULE@", &choices::<PruneSchedule>())
        .replace("@PRUNE_SCOPE@", &choices::<PruneScope>())
        .replace("@QUANTIZE@", &Quantizations::choices())
}

const TEMPLATE: &str = r#"# Contrai recipe. Every key below is shown with its default; delete what you do not change.

[run]
name = "demo"            # the run directory is <out>/<name>
seed = 42                # seeds the split, initialisation, batch order and dropout
out = "runs"             # parent directory of runs
eval_every = 50          # evaluate on validation every N optimizer steps
checkpoint_every = 50    # checkpoint every N steps: a preempted run loses minutes, not days
keep_last = 3            # checkpoints kept besides the best
phases = ["validate", "main", "diagnose", "contract", "refine"]   # drop any but main

[data]
path = ""                # JSONL / CSV / TSV / Parquet file, or a split directory; "" = built-in demo
text = "text"            # field holding the text (mlp: numeric features, [1.5, 0, 2] or "1.5 0 2")
label = "label"          # field holding the label
id = "id"                # field holding a unique id (line numbers when absent)
# format = "tsv"         # when the extension does not tell it: jsonl, csv, tsv or parquet
# columns = ["label", "text"]   # a CSV/TSV file without a header row: its columns' names
on_label_conflict = "drop"   # duplicate clusters with disagreeing labels: @ON_CONFLICT@
dedup = "exact"          # duplicates dropped before training: @DEDUP@

[data.split]             # shares of each partition; the holdout is evaluated once, at the end
train = 0.85
val = 0.10
holdout = 0.05

[data.near_duplicates]
threshold = 0.8          # Jaccard similarity of word 5-grams (character 5-grams under 20 words) that makes two texts near-copies
edit_share = 0.05        # or: words changed, inserted or deleted, as a share of the longer text (at least one, from 8 words; 0: off)

[model]
kind = "transformer"     # @MODEL_KIND@ (mlp: numeric features, standardised on train)
vocab = 8192             # tokenizer vocabulary, fitted on the train partition only
seq_len = 128            # tokens a sample
d_model = 128            # width
layers = 2               # pre-LayerNorm blocks (mlp: hidden GELU layers)
heads = 4                # attention heads
ffn = 512                # feed-forward width (mlp: hidden width)
dropout = 0.1
# pretrained = "DIR"     # kind = "bert": a Hugging Face model directory; its config sets the sizes
# pooling = "cls"        # kind = "bert": cls (the checkpoint's pooler) or mean (sentence encoders)
# gradient_checkpointing = true  # recompute each block's activations in the backward pass: less
#                          memory for long sequences and big encoders, one more forward pass a step
# precision = "bf16"     # the matrix products in bf16, summed in f32 (CPUs with AVX512-BF16;
#                          refused elsewhere); master weights, optimizer and the rest stay f32

[validate]               # prove the pipeline before the main compute is spent
steps = 30               # steps of overfitting one batch ...
batch = 8                # ... of this many samples, dropout off
lr = 1e-3                # constant LR of the check (mlp: 3e-3)
min_fall = 0.9           # the fall expected of the batch's loss (short of it, a warning; no fall beyond its noise stops the run)
adapter_lr = 5e-3        # a job that trains adapters on a frozen model (LoRA): the check's LR ...
adapter_min_fall = 0.5   # ... and the fall it must reach; every adapter must receive a gradient

[main]
steps = 400              # optimizer steps
batch = 32               # samples a micro-batch, per device
accumulate = 1           # micro-batches an optimizer step (effective batch 16–64 recommended)
devices = 1
lr = 5e-4                # peak learning rate (mlp: 1e-3)
min_lr = 1e-5            # floor of the decay
warmup = 0.03            # linear warmup, as a fraction of the steps (2–5 %)
schedule = "cosine"      # @DECAY@
weight_decay = 0.01      # AdamW
clip_norm = 1.0          # global gradient-norm clipping; 0 disables it

[contract]
budget = 0.2             # share of all steps (15–30 %)
batch = 16               # never below half of main's batch
dropout_scale = 0.5
drop_noisiest = 0.02     # at most this share of training samples, highest loss first, dropped ...
noisy_loss = 0.6931471805599453  # ... if above this loss (ln 2: their label gets less than even odds)
stable_delta = 0.02      # enter when validation loss changes less than this between checkpoints ...
stable_checkpoints = 2   # ... this many times in a row
tolerance = 0.02         # roll back when validation loss worsens by more than this ...
patience = 3             # ... for this many evaluations
eval_every = 20          # evaluate and checkpoint this often while contracting
prune_every = 10         # gradual magnitude pruning: masks updated every N steps ...
prune_schedule = "cubic" # ... sparsity grows from init to final: @PRUNE_SCHEDULE@ ...
prune_span = 0.75        # ... over this share of contract; the rest recovers
divergence = 0.1         # a module stops being pruned when (val − train loss) grows by this × val loss
prune_scope = "module"   # @PRUNE_SCOPE@: a threshold a module, or one over all
prune_heads = false      # prune attention by whole heads (their q/k/v columns and output rows)
prune_units = false      # prune feed-forward layers by whole units (exported smaller and faster)
prune = [                # weight matrices by glob over parameter paths (an MLP's default: "layers.*", 0.1 → 0.5); caps: attention 20 %, and diagnose's
    { params = "blocks.*.attn.*", init = 0.1, final = 0.2 },
    { params = "blocks.*.ffn.*", init = 0.1, final = 0.5 },
]

[refine]
budget = 0.05            # share of all steps for the final anneal
quantize = "int8"        # @QUANTIZE@, or a list: ["int8", "int4"] (each judged on its own)
max_drop = 1.0           # accuracy points (a language model: perplexity %) a quantized variant may lose
quantize_block = 0       # 0: one scale a weight matrix | N (≤ 255): a scale every N weights

[refine.distill]         # a smaller student taught by the refined model (final/student.safetensors)
enabled = true
layers = 1               # the student's blocks, width, heads and feed-forward width
d_model = 64
heads = 2
ffn = 256
steps = 500              # its own schedule (warmup, then cosine to 0); ~ the teacher's samples
batch = 32
lr = 2e-3
warmup = 0.05
temperature = 2.0        # T: both logits divided by T in the KD term
w_ce = 0.5               # loss = w_ce · CE(student, labels)
w_kd = 0.5               #      + w_kd · T² · KL(softmax(teacher/T) ‖ softmax(student/T))
eval_every = 50          # validation this often; the best student is kept

[guards]                 # the live controller
enabled = true           # act on the live doctor (false: record only, a plain run)
nan_retries = 3          # non-finite loss or gradient: roll back to the last checkpoint, retry ...
nan_lr_factor = 0.5      # ... with the LR times this
plateau_lr_factor = 0.5  # a plateau in main cuts the LR by this factor ...
plateau_cooldown = 100   # ... at most once every this many steps
overfit_patience = 300   # validation flat this many steps while train loss falls ends main early
spike_z = 10.0           # a training loss this many robust deviations above the recent window (log loss) ...
spike_over_max = 4.0     # ... or this many times the window's highest loss ...
spike_ratio = 2.0        # ... and, either way, this many times its median is a spike: back to the last checkpoint,
                         #     its batch skipped and written to quarantine.jsonl (spike_z = inf: no spike triage)
spike_window = 64        # recent finite training losses the detector remembers ...
spike_history = 16       # ... and how many it needs before it judges
spike_retries = 8        # spike rollbacks before the run stops with the evidence
spike_lr_factor = 0.5    # other batches spiking cut the LR by this factor (an optimisation cause)
spike_chance = 0.05      # samples that spike again leave the training set (a data cause) unless a random batch
                         #     would share that many rows with the earlier spikes at least this often
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_recipe_leaves_main_steps_to_the_job_and_parses() {
        let text = job_recipe();
        let doc: toml::Table = text.parse().unwrap();
        assert!(doc["main"].get("steps").is_none(), "main.steps left out");
        assert!(text.contains("# steps = 400"), "and said where it would go");
        let r = crate::Recipe::parse(&text, std::path::Path::new("job.toml")).unwrap();
        assert_eq!(
            r,
            crate::Recipe::default(),
            "everything else is the default recipe"
        );
    }
}
