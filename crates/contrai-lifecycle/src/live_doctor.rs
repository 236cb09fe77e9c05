//! The live doctor's use in main: every training row and evaluation is fed to
//! `contrai-doctor`'s [`Doctor`] as it is logged. A plateau of the training loss cuts the LR
//! (once a cooldown); overfitting ends main and restores the best checkpoint; every other
//! finding is recorded. A second doctor watches for plateaus only since the last cut.

use contrai_doctor::{Doctor, DoctorConfig, Finding, Label, RunHints, Series, Task, XUnit};
use contrai_recipe::{Phase, Recipe};
use contrai_run::{Decision, DecisionKind, MetricsRow};
use serde_json::json;

use crate::state::State;

/// The two live doctors of main (the conductor's; the page is `contrai-watch`, a log followed by hand `contrai doctor --follow`).
#[derive(Debug, Clone)]
pub struct LiveDoctors {
    /// Sees all of main.
    doctor: Doctor,
    /// Sees main's training rows since the last plateau cut.
    plateau: Doctor,
    config: DoctorConfig,
    hints: RunHints,
}

/// What the doctors raised at one row.
#[derive(Debug, Default)]
pub struct Seen {
    /// New findings of the main doctor.
    pub findings: Vec<Finding>,
    /// A plateau found by the plateau doctor.
    pub plateau: Option<Finding>,
}

/// What the conductor does about what the doctors raised.
#[derive(Debug, Default)]
pub struct Reaction {
    /// Decisions to record now.
    pub records: Vec<Decision>,
    /// Main ends: overfitting, the best checkpoint restored.
    pub end: Option<Decision>,
}

/// The value a reader of `metrics.jsonl` gets for an f32 the engine logged (its shortest decimal
/// form): the live doctor sees exactly what `contrai doctor` reads from the file afterwards.
pub fn as_logged(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}

impl LiveDoctors {
    /// Fresh doctors with the recipe's overfitting patience, for a run of `total_steps` steps
    /// (validate's and main's) and `classes` classes.
    pub fn new(recipe: &Recipe, total_steps: u64, classes: u32) -> LiveDoctors {
        let config = DoctorConfig {
            patience_steps: recipe.guards.overfit_patience as f64,
            ..DoctorConfig::default()
        };
        let hints = RunHints {
            x_unit: XUnit::Step,
            total_steps: Some(total_steps),
            task: Task::Classification,
            task_source: Some("the recipe".into()),
            num_classes: Some(classes),
            clip_norm: Some(recipe.main.clip_norm).filter(|c| *c > 0.0),
            ..RunHints::default()
        };
        let fresh = || {
            let mut d = Doctor::new(config.clone());
            d.set_hints(hints.clone());
            d
        };
        LiveDoctors {
            doctor: fresh(),
            plateau: fresh(),
            config,
            hints,
        }
    }

    /// Feeds a training row of main; the plateau doctor sees it when `since_cut` (after the last
    /// cut).
    pub fn train(
        &mut self,
        step: u64,
        loss: Option<f32>,
        lr: f64,
        grad_norm: Option<f32>,
        since_cut: bool,
    ) -> Seen {
        let mut seen = Seen::default();
        let points = [
            (Series::TrainLoss, loss.map(as_logged)),
            (Series::Lr, Some(lr)),
            (Series::GradNorm, grad_norm.map(as_logged)),
        ];
        for (series, x) in points.into_iter().filter_map(|(s, x)| Some((s, x?))) {
            seen.findings.extend(self.doctor.push(series, step, x));
            if since_cut {
                let found = self.plateau.push(series, step, x);
                let plateau = found.into_iter().find(|f| f.label == Label::Plateau);
                seen.plateau = seen.plateau.take().or(plateau);
            }
        }
        seen
    }

    /// Feeds an evaluation of main.
    pub fn eval(&mut self, step: u64, val_loss: f32, val_accuracy: f32) -> Seen {
        let mut findings = self.doctor.push(Series::ValLoss, step, as_logged(val_loss));
        findings.extend(
            self.doctor
                .push(Series::ValAccuracy, step, as_logged(val_accuracy)),
        );
        Seen {
            findings,
            plateau: None,
        }
    }

    /// Replays main's rows of `metrics.jsonl` (on resume or after a full restore), acting on
    /// nothing: the doctors end as they were when the rows were written.
    pub fn replay(&mut self, history: &[MetricsRow], last_cut: Option<u64>) {
        for row in history.iter().filter(|r| r.phase() == Phase::Main) {
            match row {
                MetricsRow::Train(r) => {
                    let since_cut = last_cut.is_none_or(|c| r.step > c);
                    self.train(r.step, Some(r.train_loss), r.lr, Some(r.grad_norm), since_cut);
                }
                MetricsRow::Eval(r) => {
                    self.eval(r.step, r.val_loss, r.val_accuracy);
                }
                _ => {}
            }
        }
    }

    /// The plateau doctor starts over (after a cut).
    pub fn reset_plateau(&mut self) {
        let mut d = Doctor::new(self.config.clone());
        d.set_hints(self.hints.clone());
        self.plateau = d;
    }

    /// The doctor's reading of all of main, end-of-run checks included.
    pub fn summary(&self) -> Vec<Finding> {
        let mut d = self.doctor.clone();
        d.finish();
        d.findings().to_vec()
    }
}

/// What the live doctor's findings at `step` make the conductor do (nothing but records when
/// the guards are off): the plateau cut first, then overfitting, then the rest as records.
pub fn react(state: &mut State, recipe: &Recipe, step: u64, seen: Seen, live: &mut LiveDoctors) -> Reaction {
    let mut out = Reaction::default();
    let guarded = recipe.guards.enabled;
    if guarded
        && let Some(f) = &seen.plateau
        && let Some(d) = plateau_cut(state, step, &f.evidence_line(), recipe)
    {
        out.records.push(d);
        live.reset_plateau();
    }
    for f in seen.findings {
        let evidence =
            json!({"label": f.label.as_str(), "severity": f.severity.to_string(), "evidence": f.evidence});
        match f.label {
            Label::Overfitting if guarded => {
                out.end = Some(Decision::new(
                    step,
                    Phase::Main,
                    DecisionKind::EndMainOverfitting,
                    format!(
                        "overfitting onset ({}); main ends early and the best checkpoint is restored",
                        f.evidence_line()
                    ),
                    evidence,
                ));
            }
            Label::Plateau if guarded => {}
            _ => out.records.push(Decision::new(
                step,
                Phase::Main,
                DecisionKind::DoctorFinding,
                format!("{} ({}): {}", f.label, f.evidence_line(), f.recommendation),
                evidence,
            )),
        }
    }
    out
}

/// The plateau rule: a plateau cuts the LR by `guards.plateau_lr_factor`, unless the last cut is
/// within `guards.plateau_cooldown` steps.
pub fn plateau_cut(state: &mut State, step: u64, evidence: &str, recipe: &Recipe) -> Option<Decision> {
    let g = &recipe.guards;
    if state.last_cut.is_some_and(|c| step < c + g.plateau_cooldown) {
        return None;
    }
    let old = state.lr_scale;
    state.lr_scale *= g.plateau_lr_factor;
    state.last_cut = Some(step);
    Some(Decision::new(
        step,
        Phase::Main,
        DecisionKind::LrCutPlateau,
        format!(
            "the training loss plateaued ({evidence}): LR × {} (scale {old} → {}); no further cut for {} steps",
            g.plateau_lr_factor, state.lr_scale, g.plateau_cooldown
        ),
        json!({"lr_scale": state.lr_scale, "factor": g.plateau_lr_factor, "cooldown": g.plateau_cooldown}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plateau_cuts_respect_the_cooldown() {
        let r = Recipe::default();
        let mut s = State::fresh(Phase::Main);
        assert!(plateau_cut(&mut s, 200, "x", &r).is_some());
        assert!(plateau_cut(&mut s, 250, "x", &r).is_none(), "within 100 steps");
        assert!(plateau_cut(&mut s, 300, "x", &r).is_some());
        assert!((s.lr_scale - 0.25).abs() < 1e-12);
    }

    #[test]
    fn logged_values_are_the_shortest_decimal_of_the_f32() {
        assert_eq!(as_logged(0.1), 0.1);
        assert_ne!(as_logged(0.1), f64::from(0.1f32));
        assert!(as_logged(f32::NAN).is_nan());
        assert_eq!(as_logged(f32::INFINITY), f64::INFINITY);
    }
}
