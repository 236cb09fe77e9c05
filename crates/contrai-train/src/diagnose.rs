//! The `diagnose` phase's measurements: per-sample losses (which samples are noisiest) and the
//! per-module pruning sensitivity that sets each module's sparsity cap.

use std::collections::BTreeMap;

use burn::tensor::Device;
use serde::Serialize;

use crate::batch::Encoded;
use crate::lifecycle::{ATTENTION_CAP, SENSITIVITY_LEVELS};
use crate::model::{Classifier, per_sample_cross_entropy};
use crate::prune::{
    Masks, Scope, Target, apply_masks, module_of, prunable_modules, prune_module, update_masks,
};
use crate::trainer::{eval_batches, evaluate};

/// The loss of every sample of `data` under `model` (no dropout), in row order.
pub fn per_sample_losses(model: &Classifier, data: &Encoded, batch: usize, device: &Device) -> Vec<f32> {
    let mut out = Vec::with_capacity(data.len());
    for b in eval_batches(data, batch, device) {
        let losses = per_sample_cross_entropy(model.forward(&b, None), b.labels());
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
    model: &Classifier,
    val: &Encoded,
    batch: usize,
    device: &Device,
    base: f32,
) -> BTreeMap<String, Vec<Sensitivity>> {
    let mut out = BTreeMap::new();
    for module in prunable_modules(model) {
        let rows = SENSITIVITY_LEVELS
            .iter()
            .map(|&level| {
                let pruned = prune_module(model.clone(), &module, level);
                let (val_loss, _) = evaluate(&pruned, val, batch, device);
                let increase = relative_increase(val_loss, base);
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

/// How much `val_loss` is above `base`, relative to `base`.
fn relative_increase(val_loss: f32, base: f32) -> f64 {
    (f64::from(val_loss) - f64::from(base)) / f64::from(base).abs().max(1e-12)
}

/// One evaluation of all modules pruned together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Joint {
    /// Each module's sparsity in this evaluation.
    pub sparsity: BTreeMap<String, f64>,
    /// Validation loss with all of them pruned at once.
    pub val_loss: f32,
    /// Relative increase over the unpruned validation loss.
    pub increase: f64,
}

/// The sparsities contraction will reach (`planned`, each within its cap), checked together: the
/// modules were measured one at a time, and their costs add up when all are pruned at once. While
/// the joint validation-loss increase exceeds `tolerance`, every module steps down one level of
/// [`SENSITIVITY_LEVELS`]. Returns the caps that pass (all 0 if none does) and each evaluation.
pub fn joint_caps(
    model: &Classifier,
    val: &Encoded,
    planned: BTreeMap<String, f64>,
    tolerance: f64,
    (batch, device, base): (usize, &Device, f32),
) -> (BTreeMap<String, f64>, Vec<Joint>) {
    let mut caps = planned;
    let mut tried = Vec::new();
    loop {
        let mut masks = Masks::default();
        let target = |p: &str| caps.get(&module_of(p)).map(|&c| Target::uncapped(c));
        update_masks(model, &mut masks, &target, Scope::Module);
        let (val_loss, _) = evaluate(&apply_masks(model.clone(), &masks), val, batch, device);
        let increase = relative_increase(val_loss, base);
        tried.push(Joint {
            sparsity: caps.clone(),
            val_loss,
            increase,
        });
        if increase <= tolerance || caps.values().all(|c| *c <= 0.0) {
            return (caps, tried);
        }
        for c in caps.values_mut() {
            *c = SENSITIVITY_LEVELS
                .iter()
                .rev()
                .copied()
                .find(|l| *l < *c - 1e-9)
                .unwrap_or(0.0);
        }
    }
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

    #[test]
    fn joint_caps_step_every_module_down_until_the_joint_cost_fits() {
        let device = Device::flex();
        let spec = contrai_recipe::recipe::Model {
            vocab: 64,
            seq_len: 8,
            d_model: 16,
            layers: 1,
            heads: 2,
            ffn: 32,
            ..Default::default()
        };
        let model = Classifier::new(&spec, 2, 0, 5, &device).unwrap();
        let val = Encoded {
            inputs: crate::batch::Inputs::Tokens((0..8 * 40).map(|i| i * 7 % 63 + 1).collect()),
            labels: (0..40).map(|i| i % 2).collect(),
            width: 8,
        };
        let (base, _) = evaluate(&model, &val, 16, &device);
        let planned: BTreeMap<String, f64> = [
            ("blocks.0.attn".to_string(), 0.2),
            ("blocks.0.ffn".to_string(), 0.5),
        ]
        .into();
        let (caps, tried) = joint_caps(&model, &val, planned.clone(), 10.0, (16, &device, base));
        assert_eq!(
            (caps, tried.len()),
            (planned.clone(), 1),
            "within a loose tolerance at once"
        );
        let (caps, tried) = joint_caps(&model, &val, planned, -1.0, (16, &device, base));
        let steps: Vec<(f64, f64)> = tried
            .iter()
            .map(|j| (j.sparsity["blocks.0.attn"], j.sparsity["blocks.0.ffn"]))
            .collect();
        assert_eq!(
            steps,
            [(0.2, 0.5), (0.1, 0.3), (0.0, 0.2), (0.0, 0.1), (0.0, 0.0)]
        );
        assert!(
            caps.values().all(|c| *c == 0.0),
            "nothing fits a negative tolerance"
        );
        assert!((tried[4].increase).abs() < 1e-6, "unpruned: no increase");
    }
}
