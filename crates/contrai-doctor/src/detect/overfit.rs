//! `overfitting`: validation has not improved for several evaluations (about 300 steps, in the
//! log's own eval cadence) while the training loss still falls. Reports the generalisation gap
//! and Prechelt's GL.

use super::{Ctx, finite, num, rel_drop};
use crate::finding::{Finding, Label, Severity};
use crate::series::{Series, XUnit};
use crate::stats::{block_medians, median, median_gap};

/// Reviews the validation and training losses.
pub fn check(ctx: &Ctx) -> Option<Finding> {
    let mut val = finite(ctx.st.points(Series::ValLoss));
    if val.len() < 3 {
        return None;
    }
    let noise = relative_noise(&val.iter().map(|p| p.value).collect::<Vec<_>>());
    // A noisy validation curve is judged on its running median of 3 (robust to one bad eval).
    if val.len() >= 5 {
        let raw: Vec<f64> = val.iter().map(|p| p.value).collect();
        for i in 1..val.len() - 1 {
            let mut w = [raw[i - 1], raw[i], raw[i + 1]];
            w.sort_by(f64::total_cmp);
            val[i].value = w[1];
        }
    }
    let steps: Vec<u64> = val.iter().map(|p| p.step).collect();
    let cadence = median_gap(&steps).max(1.0);
    let patience = match ctx.st.hints.x_unit {
        XUnit::Epoch => ctx.cfg.patience_evals,
        XUnit::Step => ctx
            .cfg
            .patience_evals
            .max((ctx.cfg.patience_steps / cadence).ceil() as usize),
    };
    // Best eval: the earliest minimum (later evals must beat it by 0.1 % to count).
    let mut best = 0;
    for (i, p) in val.iter().enumerate() {
        if p.value < val[best].value * (1.0 - 1e-3) {
            best = i;
        }
    }
    let since = val.len() - 1 - best;
    if since < patience {
        return None;
    }
    let best_p = val[best];
    let after: Vec<f64> = val[best + 1..].iter().map(|p| p.value).collect();
    let after_med = median(&after)?;
    // The validation loss must sit clearly above its best: by 1 % and by twice its own
    // eval-to-eval noise (a small validation set is noisy).
    if after_med <= best_p.value * (1.0 + 0.01_f64.max(2.0 * noise)) {
        return None;
    }
    // Training loss still falls after the best eval.
    let train = finite(ctx.st.points(Series::TrainLoss));
    let before: Vec<f64> = train
        .iter()
        .filter(|p| p.step <= best_p.step)
        .map(|p| p.value)
        .collect();
    let later: Vec<f64> = train
        .iter()
        .filter(|p| p.step > best_p.step)
        .map(|p| p.value)
        .collect();
    if later.len() < 2 {
        return None;
    }
    // Level at the best eval: the last few training points up to it (or the first after it).
    let k = (later.len() / 4).clamp(3, 50).min(later.len());
    let at_best = if before.is_empty() {
        median(&later[..k])?
    } else {
        median(&before[before.len().saturating_sub(k)..])?
    };
    let at_end = median(&later[later.len() - k..])?;
    let fall = rel_drop(at_best, at_end);
    if fall < ctx.cfg.train_fall_min {
        return None;
    }
    // The fall must exceed the training loss's own log-to-log swing (else it is noise).
    if at_best > 0.0 && at_end > 0.0 && train.iter().all(|p| p.value > 0.0) {
        let logs: Vec<f64> = train.iter().map(|p| p.value.ln()).collect();
        let blocks = block_medians(&logs, 60);
        let swings: Vec<f64> = blocks.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
        let swing = median(&swings).unwrap_or(0.0);
        if (at_best / at_end).ln() < 2.0 * swing {
            return None;
        }
    }
    let last_val = val[val.len() - 1].value;
    let gl = 100.0 * (last_val / best_p.value - 1.0);
    let start = val[best + 1].step;
    let severity = if gl > 10.0 {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let rec = format!(
        "stop at step {}: the best checkpoint was step {} (val loss {}); validation has not \
         improved for {} evals while the training loss fell {:.1} %. Resume from step {} with \
         early stopping (patience {} evals), peak LR x 0.5 and more regularisation (weight decay \
         0.05-0.1, dropout +0.1), or add data",
        start,
        best_p.step,
        num(best_p.value),
        since,
        100.0 * fall,
        best_p.step,
        patience
    );
    Some(
        Finding::new(Label::Overfitting, severity, start, rec)
            .with("best_step", best_p.step as f64)
            .with("best_val_loss", best_p.value)
            .with("last_val_loss", last_val)
            .with("generalisation_loss_gl", gl)
            .with("generalisation_gap", last_val - at_end)
            .with("evals_since_best", since as f64)
            .with("eval_cadence", cadence)
            .with("train_loss_at_best", at_best)
            .with("train_loss_last", at_end)
            .with("train_fall", fall),
    )
}

/// Relative noise of a series: robust sigma of each point against the mean of its neighbours.
fn relative_noise(v: &[f64]) -> f64 {
    if v.len() < 5 {
        return 0.0;
    }
    let d: Vec<f64> = v
        .windows(3)
        .map(|w| {
            let level = w[1].abs().max(1e-12);
            (w[1] - 0.5 * (w[0] + w[2])).abs() / level
        })
        .collect();
    median(&d).unwrap_or(0.0) / 0.6745 / 1.2247
}
