//! How sure each finding is, in one place: how far its evidence clears its rule's threshold,
//! and on how much of the run. A `healthy` verdict is as sure as what it could judge.

use super::{Ctx, finite};
use crate::finding::{Confidence, Detail, Finding, Label};
use crate::series::Series;

/// The confidence of `f` on the run as the doctor has it.
pub fn of(ctx: &Ctx, f: &Finding) -> Confidence {
    let ev = |k: &str| f.evidence.get(k).copied();
    let cfg = ctx.cfg;
    let by = |clear: bool, weak: bool| match (clear, weak) {
        (true, _) => Confidence::High,
        (false, true) => Confidence::Low,
        (false, false) => Confidence::Medium,
    };
    match f.label {
        // A non-finite value is a fact of the log.
        Label::Nonfinite => Confidence::High,
        Label::ResumeDiscontinuity => match &f.detail {
            Some(Detail::Resume(r)) => r.confidence,
            _ => Confidence::Medium,
        },
        // A jump that never came back, or a spike at twice the z-score and 3x the median.
        Label::LossSpike => match (
            ev("ratio_to_previous_high"),
            ev("robust_z"),
            ev("ratio_to_median"),
        ) {
            (Some(_), _, _) => Confidence::High,
            (None, Some(z), Some(r)) => by(z >= 2.0 * cfg.spike_z && r >= 3.0, z < 1.5 * cfg.spike_z),
            _ => Confidence::Medium,
        },
        Label::GradExplode => by(
            ev("ratio_to_median").is_some_and(|r| r >= 10.0 * cfg.grad_explode_ratio),
            false,
        ),
        // Validation 10 % above its best for 5 evaluations, or barely above it (under 2 %).
        Label::Overfitting => {
            let gl = ev("generalisation_loss_gl").unwrap_or(0.0);
            let since = ev("evals_since_best").unwrap_or(0.0);
            by(gl >= 10.0 && since >= 5.0, gl < 2.0)
        }
        // A long flat window well under the threshold; a short one.
        Label::Plateau => match (ev("window_points"), ev("recent_improvement")) {
            (Some(w), Some(i)) => by(w >= 30.0 && i.abs() <= cfg.plateau_rel, w < 10.0),
            _ => Confidence::Medium,
        },
        // Most changes reverse, at twice the swing the rule needs.
        Label::Oscillation => {
            let min = if ev("evaluations_swinging").is_some() {
                super::oscillation::VAL_AMPLITUDE
            } else {
                cfg.oscillation_amplitude
            };
            let swing = ev("median_swing").unwrap_or(0.0);
            let share = ev("sign_change_share").unwrap_or(0.0);
            by(share >= 0.6 && swing >= 2.0 * min, false)
        }
        // Within 1 % of ln K; farther than the training-loss rule's tolerance.
        Label::StuckAtChance => {
            let d = ev("relative_distance").unwrap_or(1.0);
            by(d <= 0.01, d > cfg.chance_tolerance)
        }
        Label::LrNoDecay => by(ev("final_over_peak").is_some_and(|r| r >= 0.99), false),
        Label::LrWarmupTooLong => by(
            ev("warmup_fraction").is_some_and(|w| w >= 2.0 * cfg.warmup_max),
            false,
        ),
        Label::Healthy => healthy(ctx),
        _ => Confidence::Medium,
    }
}

/// `healthy` is sure when the run logged a validation loss at 5 evaluations or more (overfitting
/// and chance judged) and 50 training points; unsure without a validation loss (overfitting
/// cannot be judged), or on fewer than 20 loss points in all.
fn healthy(ctx: &Ctx) -> Confidence {
    let evals = finite(ctx.st.points(Series::ValLoss)).len();
    let train = finite(ctx.st.points(Series::TrainLoss)).len();
    if evals == 0 || evals + train < 20 {
        Confidence::Low
    } else if evals >= 5 && train >= 50 {
        Confidence::High
    } else {
        Confidence::Medium
    }
}
