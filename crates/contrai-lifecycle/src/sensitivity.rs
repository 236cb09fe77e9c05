//! What diagnose measures and the caps it sets from it: each module's validation-loss increase
//! pruned alone at each level of [`SENSITIVITY_LEVELS`], the cap that keeps it within
//! `contract.tolerance`, and the joint check's step down (`diagnose.rs` drives the measurements);
//! and what the scan may cost.
//!
//! | rule | value |
//! | --- | --- |
//! | the scan's cost | at most [`SCAN_SHARE`] of main's, counted in sample passes (a training sample is [`PASSES_PER_TRAINING_SAMPLE`] forward passes) |
//! | how it is taken ([`plan`]) | measured when that budget gives every evaluation (the unpruned loss, every module at every level) at least [`MIN_SCAN_SAMPLES`] samples of one fixed, evenly spread validation subsample; otherwise linearized ([`Scan::Linearized`]): every module and level estimated at once from each sample's logit gradients, and the joint check run on the same subsample |
//! | a module's levels | measured in rising order and stopped after the first whose increase is above `contract.tolerance` (the levels above it are not trusted by [`caps`] anyway) |

use std::collections::BTreeMap;

use serde::Serialize;

use crate::prune_policy::{ATTENTION_CAP, SENSITIVITY_LEVELS, is_attention};

/// The validation-loss increase of one module pruned to one level.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sensitivity {
    /// Share of the module's weights zeroed.
    pub level: f64,
    /// Validation loss with the module pruned.
    pub val_loss: f32,
    /// Relative increase over the unpruned validation loss.
    pub increase: f64,
}

/// One evaluation of all modules pruned together.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Joint {
    /// Each module's sparsity in this evaluation.
    pub sparsity: BTreeMap<String, f64>,
    /// Validation loss with all of them pruned at once.
    pub val_loss: f32,
    /// Relative increase over the unpruned validation loss.
    pub increase: f64,
}

/// The share of main's compute diagnose's sensitivity scan may take.
pub const SCAN_SHARE: f64 = 0.15;
/// Forward passes a training sample costs (its forward and a backward of about twice that).
pub const PASSES_PER_TRAINING_SAMPLE: f64 = 3.0;
/// The fewest validation samples the scan evaluates on (a short main's budget would leave a
/// handful, whose noise hides a 2 % change); the joint check, on the whole validation set,
/// catches caps a noisy scan set too high.
pub const MIN_SCAN_SAMPLES: usize = 32;

/// Sample passes a linearized scan spends on each of its samples: the forward and the backward
/// of its logit margins (two classes: one margin) on the sample alone, which cost about twice a
/// training sample's share of a batched step (BENCHMARKS.md), and the joint checks on the same
/// samples.
pub const LINEARIZED_PASSES_PER_SAMPLE: f64 = 2.0 * PASSES_PER_TRAINING_SAMPLE + 2.0;

/// How diagnose's sensitivity scan is taken, on how many evenly spread validation samples (an
/// engine uses all of its validation set when it has fewer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// Each module pruned to each level on a copy and evaluated (the unpruned loss first); the
    /// joint check on the whole validation set.
    Measured {
        /// Validation samples each evaluation uses.
        samples: usize,
    },
    /// Each sample's logits and the gradients of their margins taken once; every module's loss
    /// at every level estimated from the logits moved by the gradient times the weights the
    /// level removes (cross-entropy itself computed exactly); the joint check on these samples.
    Linearized {
        /// Validation samples the gradients are taken on.
        samples: usize,
    },
}

impl Scan {
    /// The validation samples the scan uses.
    pub fn samples(self) -> usize {
        match self {
            Scan::Measured { samples } | Scan::Linearized { samples } => samples,
        }
    }
}

/// How the scan is taken when main trained on `main_samples` samples and a measured scan needs
/// `evaluations` evaluations: measured if [`SCAN_SHARE`] of main's passes gives each at least
/// [`MIN_SCAN_SAMPLES`] samples, linearized on the samples the same budget pays for otherwise
/// (at least [`MIN_SCAN_SAMPLES`]).
pub fn plan(main_samples: u64, evaluations: usize) -> Scan {
    // Whole passes: 0.15 × 3 is a hair under 0.45 in binary.
    let budget = (SCAN_SHARE * PASSES_PER_TRAINING_SAMPLE * main_samples as f64).round();
    let each = (budget / evaluations.max(1) as f64) as usize;
    if each >= MIN_SCAN_SAMPLES {
        return Scan::Measured { samples: each };
    }
    let samples = (budget / LINEARIZED_PASSES_PER_SAMPLE) as usize;
    Scan::Linearized {
        samples: samples.max(MIN_SCAN_SAMPLES),
    }
}

/// Each module's cap: the highest level whose loss increase stays within `tolerance` (levels
/// above the first one that does not are not trusted); attention pruned one weight at a time
/// never above [`ATTENTION_CAP`] (whole heads are not capped).
pub fn caps(
    sens: &BTreeMap<String, Vec<Sensitivity>>,
    tolerance: f64,
    by_heads: bool,
) -> BTreeMap<String, f64> {
    sens.iter()
        .map(|(module, rows)| {
            let cap = rows
                .iter()
                .take_while(|s| s.increase <= tolerance)
                .map(|s| s.level)
                .last()
                .unwrap_or(0.0);
            let cap = if is_attention(module) && !by_heads {
                cap.min(ATTENTION_CAP)
            } else {
                cap
            };
            (module.clone(), cap)
        })
        .collect()
}

/// Every cap one level of [`SENSITIVITY_LEVELS`] lower (0 below the lowest).
pub fn step_down(caps: &mut BTreeMap<String, f64>) {
    for c in caps.values_mut() {
        *c = SENSITIVITY_LEVELS
            .iter()
            .rev()
            .copied()
            .find(|l| *l < *c - 1e-9)
            .unwrap_or(0.0);
    }
}

/// How much `val_loss` is above `base`, relative to `base`.
pub fn relative_increase(val_loss: f32, base: f32) -> f64 {
    (f64::from(val_loss) - f64::from(base)) / f64::from(base).abs().max(1e-12)
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
    fn caps_stop_at_the_first_level_beyond_tolerance_and_cap_single_weight_attention() {
        let mut s = BTreeMap::new();
        s.insert("blocks.0.ffn".to_string(), rows(&[0.001, 0.01, 0.05, 0.01]));
        s.insert("blocks.0.attn".to_string(), rows(&[0.0, 0.0, 0.0, 0.0]));
        s.insert("blocks.1.ffn".to_string(), rows(&[0.5, 0.6, 0.7, 0.8]));
        let c = caps(&s, 0.02, false);
        assert_eq!(
            c["blocks.0.ffn"], 0.2,
            "30 % costs 5 %; 50 % is not trusted after it"
        );
        assert_eq!(c["blocks.0.attn"], ATTENTION_CAP);
        assert_eq!(c["blocks.1.ffn"], 0.0);
        assert_eq!(
            caps(&s, 0.02, true)["blocks.0.attn"],
            0.5,
            "whole heads: no single-weight cap"
        );
    }

    #[test]
    fn the_scan_gets_its_share_of_mains_passes_measured_or_linearized() {
        // 400 steps of 32: 12,800 samples, 38,400 passes; 15 % of them over 17 evaluations.
        assert_eq!(plan(12_800, 17), Scan::Measured { samples: 338 });
        // 60 steps of 16 (the MiniLM case): 432 passes, 4 samples an evaluation over 97;
        // linearized, 432 / 8 passes a sample.
        assert_eq!(plan(960, 97), Scan::Linearized { samples: 54 });
        // Nothing trained: the floor.
        assert_eq!(plan(0, 0).samples(), MIN_SCAN_SAMPLES);
        assert!(matches!(plan(0, 0), Scan::Linearized { .. }));
    }

    #[test]
    fn stepping_down_goes_one_level_at_a_time_to_zero() {
        let mut c: BTreeMap<String, f64> = [("a".to_string(), 0.2), ("b".to_string(), 0.5)].into();
        let mut seen = Vec::new();
        while c.values().any(|v| *v > 0.0) {
            step_down(&mut c);
            seen.push((c["a"], c["b"]));
        }
        assert_eq!(seen, [(0.1, 0.3), (0.0, 0.2), (0.0, 0.1), (0.0, 0.0)]);
    }
}
