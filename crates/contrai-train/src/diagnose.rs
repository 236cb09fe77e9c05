//! The `diagnose` phase's measurements: per-sample losses (which samples are noisiest) and the
//! per-module pruning sensitivity that sets each module's sparsity cap.

use std::collections::BTreeMap;

use burn::tensor::Device;
use serde::Serialize;

use crate::batch::Encoded;
use crate::lifecycle::{ATTENTION_CAP, SENSITIVITY_LEVELS};
use crate::model::{TextClassifier, per_sample_cross_entropy};
use crate::prune::{prunable_modules, prune_module};
use crate::trainer::{eval_batches, evaluate};

/// The loss of every sample of `data` under `model` (no dropout), in row order.
pub fn per_sample_losses(model: &TextClassifier, data: &Encoded, batch: usize, device: &Device) -> Vec<f32> {
    let mut out = Vec::with_capacity(data.len());
    for b in eval_batches(data, batch, device) {
        let losses = per_sample_cross_entropy(model.forward(&b, None), b.labels);
        out.extend(losses.into_data().try_to_vec::<f32>().unwrap_or_default());
    }
    out
}

/// The validation-loss increase of one module pruned to one level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sensitivity {
    /// Share of the module's weights zeroed.
    pub level: f64,
    /// Validation loss with the module pruned.
    pub val_loss: f32,
    /// Relative increase over the unpruned validation loss.
    pub increase: f64,
}

/// Prunes each module alone, on a copy, to every level of [`SENSITIVITY_LEVELS`] and measures the
/// validation loss against `base` (the unpruned model's).
pub fn sensitivity(
    model: &TextClassifier,
    val: &Encoded,
    layers: usize,
    batch: usize,
    device: &Device,
    base: f32,
) -> BTreeMap<String, Vec<Sensitivity>> {
    let mut out = BTreeMap::new();
    for module in prunable_modules(layers) {
        let rows = SENSITIVITY_LEVELS
            .iter()
            .map(|&level| {
                let pruned = prune_module(model.clone(), &module, level);
                let (val_loss, _) = evaluate(&pruned, val, batch, device);
                let increase = (f64::from(val_loss) - f64::from(base)) / f64::from(base).abs().max(1e-12);
                Sensitivity {
                    level,
                    val_loss,
                    increase,
                }
            })
            .collect();
        out.insert(module, rows);
    }
    out
}

/// Each module's cap: the highest level whose loss increase stays within `tolerance` (levels
/// above the first one that does not are not trusted); attention never above [`ATTENTION_CAP`].
pub fn caps(sens: &BTreeMap<String, Vec<Sensitivity>>, tolerance: f64) -> BTreeMap<String, f64> {
    sens.iter()
        .map(|(module, rows)| {
            let cap = rows
                .iter()
                .take_while(|s| s.increase <= tolerance)
                .map(|s| s.level)
                .last()
                .unwrap_or(0.0);
            let cap = if module.ends_with(".attn") {
                cap.min(ATTENTION_CAP)
            } else {
                cap
            };
            (module.clone(), cap)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(incs: &[f64]) -> Vec<Sensitivity> {
        SENSITIVITY_LEVELS
            .iter()
            .zip(incs)
            .map(|(&level, &increase)| Sensitivity {
                level,
                val_loss: 0.0,
                increase,
            })
            .collect()
    }

    #[test]
    fn caps_stop_at_the_first_level_beyond_tolerance_and_cap_attention() {
        let mut s = BTreeMap::new();
        s.insert("blocks.0.ffn".to_string(), rows(&[0.001, 0.01, 0.05, 0.01]));
        s.insert("blocks.0.attn".to_string(), rows(&[0.0, 0.0, 0.0, 0.0]));
        s.insert("blocks.1.ffn".to_string(), rows(&[0.5, 0.6, 0.7, 0.8]));
        let c = caps(&s, 0.02);
        assert_eq!(
            c["blocks.0.ffn"], 0.2,
            "30 % costs 5 %; 50 % is not trusted after it"
        );
        assert_eq!(c["blocks.0.attn"], ATTENTION_CAP);
        assert_eq!(c["blocks.1.ffn"], 0.0);
    }
}
