//! What diagnose measures and the caps it sets from it: each module's validation-loss increase
//! pruned alone at each level of [`SENSITIVITY_LEVELS`], the cap that keeps it within
//! `contract.tolerance`, and the joint check's step down (`diagnose.rs` drives the measurements);
//! and what the scan may cost.
//!
//! | rule | value |
//! | --- | --- |
//! | the scan's cost | at most [`SCAN_SHARE`] of main's, counted in sample passes (a training sample is [`PASSES_PER_TRAINING_SAMPLE`] forward passes): the unpruned loss and every module at every level on one fixed, evenly spread validation subsample of [`scan_samples`] samples (never fewer than [`MIN_SCAN_SAMPLES`]) |
//! | a module's levels | measured in rising order and stopped after the first whose increase is above `contract.tolerance` (the levels above it are not trusted by [`caps`] anyway) |

use std::collections::BTreeMap;

use serde::Serialize;

use crate::prune::{ATTENTION_CAP, SENSITIVITY_LEVELS, is_attention};

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

/// The validation samples each of the scan's `evaluations` may use when main trained on
/// `main_samples` samples: their share of [`SCAN_SHARE`] of main's passes, at least
/// [`MIN_SCAN_SAMPLES`] (an engine uses all of its validation set when it has fewer).
pub fn scan_samples(main_samples: u64, evaluations: usize) -> usize {
    let budget = SCAN_SHARE * PASSES_PER_TRAINING_SAMPLE * main_samples as f64;
    ((budget / evaluations.max(1) as f64) as usize).max(MIN_SCAN_SAMPLES)
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
    fn the_scan_gets_its_share_of_mains_passes_and_never_fewer_than_the_floor() {
        // 400 steps of 32: 12,800 samples, 38,400 passes; 15 % of them over 17 evaluations.
        assert_eq!(scan_samples(12_800, 17), 338);
        // A short main leaves the floor.
        assert_eq!(scan_samples(960, 49), MIN_SCAN_SAMPLES);
        assert_eq!(scan_samples(0, 0), MIN_SCAN_SAMPLES);
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
