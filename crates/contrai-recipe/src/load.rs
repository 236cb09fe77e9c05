//! Reading and validating a recipe: errors name the key, the line and the nearest valid key.

use std::path::{Path, PathBuf};

use crate::choice::{ModelKind, Phase};
use crate::recipe::Recipe;
use crate::size::{MAX_STEPS, machine_memory, si};

/// Why a recipe was refused.
#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The recipe file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The TOML is malformed or a key is unknown or of the wrong type.
    #[error("{}:{line}: {message}", path.display())]
    Syntax {
        /// The recipe file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What was wrong, with the nearest valid key when one is close.
        message: String,
    },
    /// A value is out of its range.
    #[error("{}:{line}: `{key}` {message}", path.display())]
    Invalid {
        /// The recipe file.
        path: PathBuf,
        /// 1-based line of the key, or 0 when the key was not written (a default).
        line: usize,
        /// The dotted key.
        key: String,
        /// What is expected.
        message: String,
    },
}

impl Recipe {
    /// Reads and validates a recipe file.
    pub fn from_file(path: &Path) -> Result<Recipe, RecipeError> {
        let text = std::fs::read_to_string(path).map_err(|source| RecipeError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Recipe::parse(&text, path)
    }

    /// Parses and validates recipe text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Recipe, RecipeError> {
        let mut recipe: Recipe = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(0, |s| line_of(text, s.start));
            RecipeError::Syntax {
                path: path.to_path_buf(),
                line,
                message: explain(e.message()),
            }
        })?;
        recipe.model_defaults(text);
        recipe.validate().map_err(|(key, message)| RecipeError::Invalid {
            path: path.to_path_buf(),
            line: locate(text, &key),
            key,
            message,
        })?;
        Ok(recipe)
    }

    /// Defaults that depend on the model, for keys `text` does not set: an MLP's hidden layers are
    /// pruned (`layers.*`, 0.1 → 0.5), and it trains at LR 1e-3 (validate 3e-3): a small MLP at
    /// the transformer's 5e-4 barely moves in the validate phase's 30 steps.
    fn model_defaults(&mut self, text: &str) {
        let table: toml::Table = toml::from_str(text).unwrap_or_default();
        let unset = |section: &str, key: &str| table.get(section).and_then(|s| s.get(key)).is_none();
        if self.model.kind == ModelKind::Bert {
            self.bert_defaults(&unset);
            return;
        }
        if self.model.kind != ModelKind::Mlp {
            return;
        }
        if unset("main", "lr") {
            self.main.lr = 1e-3;
        }
        if unset("validate", "lr") {
            self.validate.lr = 3e-3;
        }
        if unset("contract", "prune") {
            self.contract.prune = vec![crate::recipe::Prune::new("layers.*", 0.5)];
        }
    }

    /// A pretrained encoder fine-tunes at a small LR (validate overfits its batch at 1e-4; with
    /// LoRA, [`LORA_LR`](crate::recipe::LORA_LR) and 1e-3), and
    /// contraction prunes its feed-forward matrices (to 30 %) and attention projections (to 20 %)
    /// by their Hugging Face names.
    fn bert_defaults(&mut self, unset: &dyn Fn(&str, &str) -> bool) {
        let lora = self.model.lora.is_some();
        if unset("main", "lr") {
            self.main.lr = if lora { crate::recipe::LORA_LR } else { 5e-5 };
        }
        if unset("validate", "lr") {
            self.validate.lr = if lora { 1e-3 } else { 1e-4 };
        }
        if unset("contract", "prune") {
            self.contract.prune = crate::recipe::BERT_PRUNE
                .iter()
                .map(|(params, final_sparsity)| crate::recipe::Prune::new(*params, *final_sparsity))
                .collect();
        }
    }

    /// The recipe as TOML, every default filled in.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// Step counts within [`MAX_STEPS`] (the plan adds and scales them), and a model this machine
    /// can train: its estimate ([`Recipe::training_memory`]) under the machine's memory.
    fn validate_sizes(&self) -> Result<(), (String, String)> {
        for (k, v) in [
            ("main.steps", self.main.steps),
            ("validate.steps", self.validate.steps),
            ("refine.distill.steps", self.refine.distill.steps),
            ("run.eval_every", self.run.eval_every),
            ("run.checkpoint_every", self.run.checkpoint_every),
        ] {
            if v > MAX_STEPS {
                return Err((
                    k.to_string(),
                    format!("is {v}, expected at most 2^40 = {MAX_STEPS} steps"),
                ));
            }
        }
        let (Some(need), Some(have)) = (self.training_memory(), machine_memory()) else {
            return Ok(());
        };
        if need.total() <= have as f64 {
            return Ok(());
        }
        Err((
            need.key.to_string(),
            format!(
                "makes a model this machine cannot train: about {} parameters ({}B with their \
                 gradients and Adam's two moments, 16 bytes each) and {}B of activations for the \
                 largest batch, {}B in all, against {}B of memory here",
                si(need.params),
                si(16.0 * need.params),
                si(need.activations),
                si(need.total()),
                si(have as f64)
            ),
        ))
    }

    /// Checks the phases, the validate check and the guards.
    fn validate_lifecycle(&self) -> Result<(), (String, String)> {
        let err = |k: &str, m: String| Err((k.to_string(), m));
        let phases = &self.run.phases;
        if !phases.windows(2).all(|w| w[0] < w[1]) || !self.run.has_phase(Phase::Main) {
            let names: Vec<String> = phases.iter().map(Phase::to_string).collect();
            return err(
                "run.phases",
                format!(
                    "is [{}], expected `main` and phases in the order {}, each once",
                    names.join(", "),
                    crate::choice::choices::<Phase>().replace(" |", ",")
                ),
            );
        }
        let v = &self.validate;
        if v.steps == 0 || v.batch == 0 || !(v.lr > 0.0 && v.lr < 1.0) {
            return err(
                "validate.steps",
                "steps and batch must be at least 1 and lr in (0, 1)".into(),
            );
        }
        if !(v.adapter_lr > 0.0 && v.adapter_lr < 1.0) {
            return err(
                "validate.adapter_lr",
                format!("is {}, expected an LR in (0, 1)", v.adapter_lr),
            );
        }
        for (key, share) in [
            ("validate.min_fall", v.min_fall),
            ("validate.adapter_min_fall", v.adapter_min_fall),
        ] {
            if !(0.0..1.0).contains(&share) {
                return err(key, format!("is {share}, expected a share in [0, 1)"));
            }
        }
        let g = &self.guards;
        for (k, f) in [
            ("guards.nan_lr_factor", g.nan_lr_factor),
            ("guards.plateau_lr_factor", g.plateau_lr_factor),
            ("guards.spike_lr_factor", g.spike_lr_factor),
        ] {
            if !(f > 0.0 && f < 1.0) {
                return err(k, format!("is {f}, expected a factor in (0, 1)"));
            }
        }
        if g.overfit_patience == 0 {
            return err("guards.overfit_patience", "must be at least 1".into());
        }
        self.validate_spikes()
    }

    /// Checks the spike detector's keys of `[guards]`.
    fn validate_spikes(&self) -> Result<(), (String, String)> {
        let err = |k: &str, m: String| Err((format!("guards.{k}"), m));
        let g = &self.guards;
        if g.spike_z.is_nan() || g.spike_z <= 0.0 {
            return err(
                "spike_z",
                format!("is {}, expected a z-score > 0 (inf: no spike triage)", g.spike_z),
            );
        }
        for (k, v) in [
            ("spike_ratio", g.spike_ratio),
            ("spike_over_max", g.spike_over_max),
        ] {
            if !(v.is_finite() && v > 1.0) {
                return err(k, format!("is {v}, expected a finite ratio > 1"));
            }
        }
        if g.spike_history < 4 || g.spike_window < g.spike_history {
            return err(
                "spike_history",
                format!(
                    "is {} with spike_window = {}, expected at least 4 losses and no more than the window",
                    g.spike_history, g.spike_window
                ),
            );
        }
        if g.spike_window > 4096 {
            return err(
                "spike_window",
                format!("is {}, expected at most 4096 losses", g.spike_window),
            );
        }
        if !(g.spike_chance > 0.0 && g.spike_chance < 1.0) {
            return err(
                "spike_chance",
                format!("is {}, expected a probability in (0, 1)", g.spike_chance),
            );
        }
        Ok(())
    }

    /// Checks the student of `[refine.distill]`.
    fn validate_distill(&self) -> Result<(), (String, String)> {
        let d = &self.refine.distill;
        let err = |k: &str, m: String| Err((format!("refine.distill.{k}"), m));
        for (k, v) in [
            ("layers", d.layers as u64),
            ("d_model", d.d_model as u64),
            ("heads", d.heads as u64),
            ("ffn", d.ffn as u64),
            ("steps", d.steps),
            ("batch", d.batch as u64),
            ("eval_every", d.eval_every),
        ] {
            if v == 0 {
                return err(k, "must be at least 1".into());
            }
        }
        if !d.d_model.is_multiple_of(d.heads) {
            return err(
                "heads",
                format!("is {}, which does not divide d_model = {}", d.heads, d.d_model),
            );
        }
        if !(d.lr > 0.0 && d.lr < 1.0) {
            return err("lr", format!("is {}, expected a value in (0, 1)", d.lr));
        }
        if !(0.0..0.5).contains(&d.warmup) {
            return err(
                "warmup",
                format!("is {}, expected a fraction in [0, 0.5)", d.warmup),
            );
        }
        if !(d.temperature > 0.0 && d.temperature <= 100.0) {
            return err(
                "temperature",
                format!("is {}, expected a temperature in (0, 100]", d.temperature),
            );
        }
        if d.w_ce < 0.0 || d.w_kd < 0.0 || d.w_ce + d.w_kd <= 0.0 {
            return err(
                "w_kd",
                format!(
                    "w_ce = {} and w_kd = {}: expected weights ≥ 0, not both 0",
                    d.w_ce, d.w_kd
                ),
            );
        }
        Ok(())
    }

    /// Checks every range; the error is (dotted key, what is expected).
    pub fn validate(&self) -> Result<(), (String, String)> {
        let err = |k: &str, m: String| Err((k.to_string(), m));
        let unit = |k: &str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                err(k, format!("is {v}, expected a value in [0, 1]"))
            }
        };
        let positive = |k: &str, v: u64| {
            if v > 0 {
                Ok(())
            } else {
                err(k, "must be at least 1".into())
            }
        };
        let s = &self.data.split;
        for (k, v) in [
            ("data.split.train", s.train),
            ("data.split.val", s.val),
            ("data.split.holdout", s.holdout),
        ] {
            unit(k, v)?;
        }
        if (s.train + s.val + s.holdout - 1.0).abs() > 1e-6 {
            return err(
                "data.split.train",
                format!(
                    "train + val + holdout = {}, expected 1",
                    s.train + s.val + s.holdout
                ),
            );
        }
        if s.val <= 0.0 || s.holdout <= 0.0 {
            return err("data.split.val", "val and holdout must both be above 0".into());
        }
        let near = &self.data.near_duplicates;
        unit("data.near_duplicates.threshold", near.threshold)?;
        if !(0.0..0.5).contains(&near.edit_share) {
            return err(
                "data.near_duplicates.edit_share",
                format!(
                    "is {}, expected a share in [0, 0.5) (0.05: one word in 20)",
                    near.edit_share
                ),
            );
        }
        let m = &self.model;
        for (k, v) in [
            ("model.vocab", m.vocab),
            ("model.seq_len", m.seq_len),
            ("model.d_model", m.d_model),
            ("model.layers", m.layers),
            ("model.heads", m.heads),
            ("model.ffn", m.ffn),
        ] {
            positive(k, v as u64)?;
        }
        if !m.d_model.is_multiple_of(m.heads) {
            return err(
                "model.heads",
                format!("is {}, which does not divide d_model = {}", m.heads, m.d_model),
            );
        }
        match (m.kind, &m.pretrained) {
            (ModelKind::Bert, None) => {
                return err(
                    "model.kind",
                    "is \"bert\", which needs model.pretrained: a Hugging Face model directory (config.json, model.safetensors, tokenizer.json)".into(),
                );
            }
            (k, Some(_)) if k != ModelKind::Bert => {
                return err(
                    "model.pretrained",
                    format!(
                        "is set, but model.kind is \"{k}\"; a pretrained checkpoint needs kind = \"bert\""
                    ),
                );
            }
            _ => {}
        }
        if let Some(l) = &m.lora {
            if m.kind != ModelKind::Bert {
                return err(
                    "model.lora",
                    format!(
                        "is set, but model.kind is \"{}\"; LoRA adapts a pretrained encoder (kind = \"bert\")",
                        m.kind
                    ),
                );
            }
            positive("model.lora.rank", l.rank as u64)?;
            if !(l.alpha > 0.0 && l.alpha.is_finite()) {
                return err(
                    "model.lora.alpha",
                    format!("is {}, expected a positive number", l.alpha),
                );
            }
            if l.targets.is_empty() || l.targets.iter().any(|t| t.trim().is_empty()) {
                return err(
                    "model.lora.targets",
                    "is empty or holds an empty name; expected module names such as [\"query\", \"value\"]"
                        .into(),
                );
            }
        }
        if m.gradient_checkpointing && m.kind == ModelKind::Mlp {
            return err(
                "model.gradient_checkpointing",
                "is true, but model.kind is \"mlp\", which has no transformer blocks to recompute".into(),
            );
        }
        if !(0.0..1.0).contains(&m.dropout) {
            return err(
                "model.dropout",
                format!("is {}, expected a value in [0, 1)", m.dropout),
            );
        }
        let t = &self.main;
        for (k, v) in [
            ("main.steps", t.steps),
            ("main.batch", t.batch as u64),
            ("main.accumulate", t.accumulate as u64),
            ("main.devices", t.devices as u64),
            ("run.eval_every", self.run.eval_every),
            ("run.checkpoint_every", self.run.checkpoint_every),
        ] {
            positive(k, v)?;
        }
        if !(t.lr > 0.0 && t.lr < 1.0) {
            return err("main.lr", format!("is {}, expected a value in (0, 1)", t.lr));
        }
        if !(0.0..=t.lr).contains(&t.min_lr) {
            return err(
                "main.min_lr",
                format!("is {}, expected a value in [0, lr = {}]", t.min_lr, t.lr),
            );
        }
        if !(0.0..0.5).contains(&t.warmup) {
            return err(
                "main.warmup",
                format!(
                    "is {}, expected a fraction in [0, 0.5) (2–5 % recommended)",
                    t.warmup
                ),
            );
        }
        if t.weight_decay < 0.0 || t.clip_norm < 0.0 {
            return err(
                "main.clip_norm",
                "weight_decay and clip_norm must not be negative".into(),
            );
        }
        let c = &self.contract;
        if !(0.15..=0.30).contains(&c.budget) {
            return err(
                "contract.budget",
                format!("is {}, expected a share of all steps in [0.15, 0.30]", c.budget),
            );
        }
        if c.batch.saturating_mul(2) < t.batch {
            return err(
                "contract.batch",
                format!(
                    "is {}, below half of main.batch = {}: a batch that small makes updates too noisy",
                    c.batch, t.batch
                ),
            );
        }
        for (k, v) in [
            ("contract.dropout_scale", c.dropout_scale),
            ("contract.drop_noisiest", c.drop_noisiest),
            ("contract.stable_delta", c.stable_delta),
            ("contract.tolerance", c.tolerance),
        ] {
            unit(k, v)?;
        }
        for p in &c.prune {
            unit("contract.prune", p.init)?;
            unit("contract.prune", p.final_sparsity)?;
            if p.init > p.final_sparsity {
                return err(
                    "contract.prune",
                    format!(
                        "`{}`: init {} is above final {}",
                        p.params, p.init, p.final_sparsity
                    ),
                );
            }
        }
        if !(c.noisy_loss >= 0.0 && c.noisy_loss.is_finite()) {
            return err(
                "contract.noisy_loss",
                format!(
                    "is {}, expected a loss ≥ 0 (ln 2 = 0.693 by default)",
                    c.noisy_loss
                ),
            );
        }
        unit("refine.budget", self.refine.budget)?;
        positive("contract.eval_every", c.eval_every)?;
        positive("contract.prune_every", c.prune_every)?;
        if !(0.0..=100.0).contains(&self.refine.max_drop) {
            return err(
                "refine.max_drop",
                format!(
                    "is {}, expected accuracy points (or perplexity %) in [0, 100]",
                    self.refine.max_drop
                ),
            );
        }
        self.validate_distill()?;
        unit("contract.prune_span", c.prune_span)?;
        unit("contract.divergence", c.divergence)?;
        for p in &c.prune {
            if glob::Pattern::new(&p.params).is_err() {
                return err("contract.prune", format!("`{}` is not a valid glob", p.params));
            }
        }
        self.validate_lifecycle()?;
        self.validate_sizes()?;
        if c.budget + self.refine.budget >= 0.9 {
            return err(
                "refine.budget",
                "contract and refine budgets leave no main phase".into(),
            );
        }
        Ok(())
    }
}

/// The closest of `candidates` to `word` by edit distance, if it is close enough to be a likely
/// typo or a truncation (`batchsize` → `batch`).
pub fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (strsim::damerau_levenshtein(word, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3) || word.starts_with(c) || c.starts_with(word))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Adds "did you mean" to serde's unknown-field and unknown-variant messages.
fn explain(message: &str) -> String {
    let ticked = |s: &str| -> Vec<String> { s.split('`').skip(1).step_by(2).map(str::to_string).collect() };
    let msg = message.trim();
    if let Some(rest) = msg
        .strip_prefix("unknown field ")
        .or_else(|| msg.strip_prefix("unknown variant "))
    {
        let words = ticked(rest);
        if let Some((bad, valid)) = words.split_first() {
            let valid: Vec<&str> = valid.iter().map(String::as_str).collect();
            if let Some(n) = nearest(bad, &valid) {
                return format!("{msg}; did you mean `{n}`?");
            }
        }
    }
    msg.to_string()
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// The line where a dotted key is set (`main.lr` → `lr = …` under `[main]`), 0 if nowhere.
fn locate(text: &str, dotted: &str) -> usize {
    let (table, key) = dotted.rsplit_once('.').unwrap_or(("", dotted));
    let mut current = String::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if let Some(h) = l.strip_prefix('[').and_then(|h| h.split(']').next()) {
            current = h.trim().trim_matches('[').to_string();
            continue;
        }
        let lhs = l.split('=').next().unwrap_or("").trim();
        if l.contains('=') && current == table && lhs == key {
            return i + 1;
        }
    }
    0
}

#[cfg(test)]
mod tests;
