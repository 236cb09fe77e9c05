//! Detectors. Point detectors look at the newest point; trend detectors review a whole series.

mod chance;
pub(crate) mod confidence;
mod grad;
mod lr;
mod nonfinite;
mod oscillation;
mod overfit;
mod plateau;
mod resume;
pub(crate) mod spike;

use crate::doctor::{DoctorConfig, RunState};
use crate::finding::{Finding, Label, Severity};
use crate::series::{Point, Series, XUnit};

/// What the detectors see: thresholds and the buffered series.
pub struct Ctx<'a> {
    /// Thresholds.
    pub cfg: &'a DoctorConfig,
    /// Buffered series.
    pub st: &'a RunState,
}

impl Ctx<'_> {
    /// How long a stretch must last to be judged (a plateau, a run at chance), on the run's
    /// x-axis: [`DoctorConfig::patience_evals`] on an epoch axis; on a step axis
    /// [`DoctorConfig::patience_steps`], or as many epochs where the run's epochs are known and
    /// shorter (a run of 13-step epochs is patient after 3 epochs, not 23).
    ///
    /// [`DoctorConfig::patience_evals`]: crate::DoctorConfig::patience_evals
    /// [`DoctorConfig::patience_steps`]: crate::DoctorConfig::patience_steps
    pub fn patience(&self) -> f64 {
        let evals = self.cfg.patience_evals as f64;
        match self.st.hints.x_unit {
            XUnit::Epoch => evals,
            XUnit::Step => self
                .st
                .hints
                .steps_per_epoch
                .map_or(self.cfg.patience_steps, |e| {
                    self.cfg.patience_steps.min(evals * e)
                }),
        }
    }

    /// The highest finite, positive learning rate logged so far.
    pub fn peak_lr(&self) -> Option<f64> {
        let peak = self
            .st
            .points(Series::Lr)
            .iter()
            .map(|p| p.value)
            .filter(|v| v.is_finite())
            .fold(f64::NAN, f64::max);
        (peak.is_finite() && peak > 0.0).then_some(peak)
    }
}

/// Why a trend review runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// A series grew enough since its last review.
    Review(Series),
    /// The run ended.
    Finish,
}

impl Trigger {
    fn covers(self, s: Series) -> bool {
        match self {
            Trigger::Finish => true,
            Trigger::Review(t) => t == s,
        }
    }

    fn is_final(self) -> bool {
        self == Trigger::Finish
    }
}

/// Checks run on every new point of `series`.
pub fn on_point(ctx: &Ctx, series: Series) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(nonfinite::check(ctx, series));
    match series {
        // A spike of the loss the run is judged on: the training loss, or the validation loss
        // of a log that has no training loss.
        Series::TrainLoss | Series::ValLoss if series == main_loss(ctx.st) => {
            out.extend(spike::loss_spike(ctx, series))
        }
        Series::ValLoss => out.extend(spike::validation_jump(ctx)),
        Series::GradNorm => out.extend(spike::grad_explode(ctx)),
        _ => {}
    }
    out
}

/// Trend checks for a review or the end of the run.
pub fn review(ctx: &Ctx, trigger: Trigger) -> Vec<Finding> {
    let mut out = Vec::new();
    let loss = main_loss(ctx.st);
    if trigger.covers(Series::ValLoss) || trigger.covers(Series::TrainLoss) {
        // The parts of a loss logged in parts are judged at the end, on all their points.
        let main = overfit::check(ctx, trigger.is_final());
        out.extend(main.or_else(|| trigger.is_final().then(|| overfit::in_parts(ctx)).flatten()));
    }
    if trigger.covers(loss) {
        out.extend(chance::check(ctx, loss));
        // A loss that jumped and never came back has diverged: no plateau of it.
        match spike::divergence(ctx) {
            Some(f) => out.push(f),
            None => out.extend(plateau::check(ctx, loss, trigger.is_final())),
        }
        let found = |label| out.iter().any(|f: &Finding| f.label == label);
        out.extend(oscillation::check(
            ctx,
            found(Label::Overfitting),
            found(Label::Plateau),
        ));
    }
    if trigger.covers(Series::GradNorm) {
        out.extend(grad::vanish(ctx));
        out.extend(grad::growth(ctx));
    }
    if trigger.covers(Series::Lr) {
        out.extend(lr::check(ctx, trigger.is_final()));
    }
    if trigger.is_final() {
        out.extend(nonfinite::summary(ctx));
        // Segment boundaries are judged on whole segments: once, at the end.
        out.extend(resume::check(ctx));
    }
    out
}

/// The loss the trend detectors follow: training loss, else validation loss.
pub fn main_loss(st: &RunState) -> Series {
    if st.points(Series::TrainLoss).iter().any(|p| p.value.is_finite()) {
        Series::TrainLoss
    } else {
        Series::ValLoss
    }
}

/// The `healthy` finding, with the final losses as evidence.
pub fn healthy(ctx: &Ctx) -> Finding {
    let step = ctx.st.last_step();
    let mut f = Finding::new(
        Label::Healthy,
        Severity::Info,
        step,
        "nothing to change: keep the schedule; checkpoint every ~50 steps and keep watching \
         the validation loss"
            .to_string(),
    );
    for s in [Series::TrainLoss, Series::ValLoss] {
        let pts = finite(ctx.st.points(s));
        if let (Some(first), Some(last)) = (pts.first(), pts.last()) {
            f = f
                .with(&format!("{}_first", s.name()), first.value)
                .with(&format!("{}_last", s.name()), last.value);
        }
    }
    f
}

/// The median of `points`' values (none: `None`): a stretch's level.
pub(crate) fn level(points: &[Point]) -> Option<f64> {
    crate::stats::median(&points.iter().map(|p| p.value).collect::<Vec<_>>())
}

/// The finite points of a series.
pub(crate) fn finite(points: &[Point]) -> Vec<Point> {
    points.iter().copied().filter(|p| p.value.is_finite()).collect()
}

/// The change of `value(point)` along its Theil–Sen line against the points' steps, over their
/// span, and its standard error (`stats::theil_sen_change`); `None` with fewer than 2 points.
pub(crate) fn fitted_change<'a>(
    points: impl IntoIterator<Item = &'a Point>,
    value: impl Fn(f64) -> f64,
) -> Option<(f64, f64)> {
    let (xs, ys): (Vec<f64>, Vec<f64>) = points
        .into_iter()
        .map(|p| (p.step as f64, value(p.value)))
        .unzip();
    crate::stats::theil_sen_change(&xs, &ys)
}

/// A change of a loss is material when it is this share of the loss's initial level...
const MATERIAL: f64 = 0.02;

/// ...the median of its first 5 finite points: the smallest change of `series` that is not
/// rounding (a 2x jump between 0.0001 and 0.0002 at a loss that started at 1.0 is).
pub(crate) fn material(ctx: &Ctx, series: Series) -> Option<f64> {
    let first: Vec<f64> = ctx
        .st
        .points(series)
        .iter()
        .map(|p| p.value)
        .filter(|v| v.is_finite())
        .take(5)
        .collect();
    Some(MATERIAL * crate::stats::median(&first)?.abs())
}

/// Relative change `(a - b) / |a|`, 0 when `a` is 0.
pub(crate) fn rel_drop(a: f64, b: f64) -> f64 {
    if a == 0.0 { 0.0 } else { (a - b) / a.abs() }
}

/// Formats a number compactly for recommendations.
pub(crate) fn num(x: f64) -> String {
    if x == 0.0 {
        "0".to_string()
    } else if x.abs() < 1e-3 || x.abs() >= 1e5 {
        format!("{x:.2e}")
    } else if x.abs() < 1.0 {
        format!("{x:.4}")
    } else {
        format!("{x:.3}")
    }
}
