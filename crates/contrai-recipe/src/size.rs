//! How big a recipe's own model is, and whether this machine can train it: the parameter
//! count the plan quotes, and the memory estimate that loading a recipe checks.

use crate::choice::ModelKind;
use crate::recipe::Recipe;

/// The most steps a phase, an evaluation cadence or a checkpoint cadence may count.
pub const MAX_STEPS: u64 = 1 << 40;

/// What training a recipe's own model takes, as an estimate, and the key that sizes it most.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrainingMemory {
    /// Parameters.
    pub params: f64,
    /// Bytes of activations a training batch keeps for its backward pass.
    pub activations: f64,
    /// The recipe key whose value weighs most in the estimate.
    pub key: &'static str,
}

impl TrainingMemory {
    /// Bytes in all: f32 weights, gradients and Adam's two moments (16 bytes a parameter), and
    /// the activations.
    pub fn total(&self) -> f64 {
        16.0 * self.params + self.activations
    }
}

impl Recipe {
    /// Trainable parameters of the recipe's model for `classes` output classes (saturating: a
    /// size no machine holds counts as `u64::MAX`, not an overflow).
    pub fn parameter_count(&self, classes: u64) -> u64 {
        let m = &self.model;
        let (d, f, l) = (m.d_model as u64, m.ffn as u64, m.layers as u64);
        let (add, mul) = (u64::saturating_add, u64::saturating_mul);
        if m.kind == ModelKind::Mlp {
            // Hidden width is `ffn`; the input width is the feature count, unknown here: count
            // the hidden stack after the first layer and the head.
            let hidden = mul(l.saturating_sub(1), add(mul(f, f), f));
            return add(add(hidden, mul(f, classes)), classes);
        }
        let embeddings = mul(add(m.vocab as u64, m.seq_len as u64), d);
        let attention = mul(4, add(mul(d, d), d));
        let feed_forward = add(add(mul(2, mul(d, f)), f), d);
        let norms = mul(4, d);
        // A pretrained encoder's [CLS] pooler (its extra positions and token types are not
        // counted).
        let pooler = if m.kind == ModelKind::Bert {
            add(mul(d, d), d)
        } else {
            0
        };
        let blocks = mul(l, add(add(attention, feed_forward), norms));
        [blocks, mul(2, d), pooler, mul(d, classes), classes]
            .into_iter()
            .fold(embeddings, add)
    }

    /// The estimate for the recipe's own model (`None` for a pretrained one, sized by its
    /// checkpoint): [`Recipe::parameter_count`], and the activations the largest batch of any
    /// phase keeps, per token and block about 12 d + 2 ffn + 2 heads seq_len floats for a
    /// transformer (one block's with gradient checkpointing), `ffn` per hidden layer for an MLP.
    pub fn training_memory(&self) -> Option<TrainingMemory> {
        let m = &self.model;
        if m.pretrained.is_some() {
            return None;
        }
        let f = |x: usize| x as f64;
        // The largest batch any phase trains on; of equal ones, main's, then contract's, then
        // validate's (`max_by_key` keeps the last).
        let (batch_key, batch) = [
            ("refine.distill.batch", self.refine.distill.batch),
            ("validate.batch", self.validate.batch),
            ("contract.batch", self.contract.batch),
            ("main.batch", self.main.batch),
        ]
        .into_iter()
        .max_by_key(|&(_, b)| b)?;
        let count = self.parameter_count(0);
        let params = count as f64;
        let (d, layers, tokens) = (f(m.d_model), f(m.layers), f(batch) * f(m.seq_len));
        let (per_token, key) = match m.kind {
            ModelKind::Mlp => (layers * f(m.ffn), "model.ffn"),
            _ => {
                let kept = if m.gradient_checkpointing { 1.0 } else { layers };
                let per_token = kept * (12.0 * d + 2.0 * f(m.ffn) + 2.0 * f(m.heads) * f(m.seq_len));
                // Which part weighs most, the embeddings or the blocks (in floats: a count
                // that saturated no longer tells).
                let embed = (f(m.vocab) + f(m.seq_len)) * d;
                let blocks = layers * (4.0 * d * d + 2.0 * d * f(m.ffn));
                (
                    per_token,
                    if embed > blocks {
                        "model.vocab"
                    } else {
                        "model.d_model"
                    },
                )
            }
        };
        let activations = 4.0 * tokens * per_token;
        // A count that saturated is the model's own size past any machine, whatever the batch.
        let key = if activations > 16.0 * params && count < u64::MAX {
            batch_key
        } else {
            key
        };
        Some(TrainingMemory {
            params,
            activations,
            key,
        })
    }
}

/// A count with three significant digits and its SI prefix: `1.23 G`, `456 M`.
pub(crate) fn si(x: f64) -> String {
    let (v, unit) = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(s, _)| x >= *s)
        .map_or((x, ""), |(s, u)| (x / s, u));
    let digits = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {unit}")
}

/// This machine's memory in bytes (`MemTotal` of /proc/meminfo; `None` where there is none).
pub(crate) fn machine_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use crate::recipe::Recipe;

    #[test]
    fn a_size_no_machine_holds_saturates_the_count_instead_of_overflowing() {
        let mut r = Recipe::default();
        let small = r.parameter_count(2);
        assert!((1_000_000..3_000_000).contains(&small), "{small}");
        r.model.d_model = usize::MAX / 2;
        assert_eq!(r.parameter_count(2), u64::MAX);
    }
}
