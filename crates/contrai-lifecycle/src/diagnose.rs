//! The `diagnose` phase between main and contract: the doctor's reading of main, then each
//! module's pruning sensitivity measured on a copy (one module at a time, at
//! [`SENSITIVITY_LEVELS`]), the caps that keep each within `contract.tolerance`
//! ([`crate::sensitivity`]), and the planned sparsities checked all together, stepped down until
//! their joint cost fits.

use std::collections::BTreeMap;

use contrai_recipe::Phase;
use contrai_run::{Decision, DecisionKind};
use serde_json::json;

use crate::awaiting::{Await as Awaiting, DiagnoseStep as Await, Search};
use crate::conductor::Conductor;
use crate::error::{ConductorError, Result};
use crate::protocol::{Action, Observation, Request, Turn};
use crate::prune_policy::SENSITIVITY_LEVELS;
use crate::sensitivity::{Joint, Scan, Sensitivity, caps, plan, relative_increase, step_down};

impl Conductor {
    /// Diagnose starts: the adapters merged (its scans measure the dense matrices contraction
    /// prunes), the doctor's reading of main, then the unpruned evaluation before a measured
    /// scan, or the linearized scan straight away.
    pub(crate) fn diagnose(&mut self, mut out: Vec<Action>) -> Turn {
        crate::conductor::merge_adapters_in(Phase::Diagnose, &mut out);
        let findings = self.live.summary();
        let rows: Vec<serde_json::Value> = findings
            .iter()
            .map(|f| json!({"label": f.label.as_str(), "severity": f.severity.to_string(), "evidence": f.evidence, "recommendation": f.recommendation}))
            .collect();
        let labels: Vec<&str> = findings.iter().map(|f| f.label.as_str()).collect();
        out.push(Action::Record(Decision::new(
            self.state.step,
            Phase::Diagnose,
            DecisionKind::Doctor,
            format!("the doctor on main: {}", labels.join(", ")),
            json!({"findings": rows}),
        )));
        let evaluations = 1 + self.prunable.modules().len() * SENSITIVITY_LEVELS.len();
        let plan = plan(self.main_samples(), evaluations);
        if let Scan::Linearized { .. } = plan {
            // The whole validation set's evaluation alone would cost more than the budget: the
            // scan and the joint checks compare with the unpruned loss on the scan's samples.
            return self.scan(out, plan, None);
        }
        let request = Request::Evaluate {
            record: Some(Phase::Diagnose),
        };
        self.ask(out, request, Awaiting::Diagnose(Await::Eval(plan)))
    }

    /// Asks for the sensitivity scan; `base` is the whole validation set's unpruned loss when
    /// it was evaluated.
    fn scan(&mut self, out: Vec<Action>, plan: Scan, base: Option<f32>) -> Turn {
        let request = Request::MeasureSensitivity {
            modules: self.prunable.modules(),
            levels: SENSITIVITY_LEVELS.to_vec(),
            heads: self.prune_heads(),
            units: self.recipe.contract.prune_units,
            samples: Some(plan.samples()),
            stop_above: Some(self.recipe.contract.tolerance),
            linearized: matches!(plan, Scan::Linearized { .. }),
        };
        self.ask(
            out,
            request,
            Awaiting::Diagnose(Await::Sensitivity { base, plan }),
        )
    }

    pub(crate) fn on_diagnose(&mut self, step: Await, obs: Observation) -> Result<Turn> {
        let by_heads = self.by_heads();
        match (step, obs) {
            (Await::Eval(plan), Observation::Evaluated { val_loss, .. }) => {
                Ok(self.scan(Vec::new(), plan, Some(val_loss)))
            }
            (
                Await::Sensitivity { base, plan },
                Observation::Sensitivity {
                    val_loss,
                    base: on_scan,
                },
            ) => {
                // Increases are against the unpruned loss on the scan's own samples; a linearized
                // scan's joint checks run on those samples too.
                let Some(scan_base) = on_scan.or(base) else {
                    return Err(ConductorError::Protocol(
                        "a linearized sensitivity scan must give the unpruned loss on its samples".into(),
                    ));
                };
                let base = base.unwrap_or(scan_base);
                let sens: BTreeMap<String, Vec<Sensitivity>> = val_loss
                    .into_iter()
                    .map(|(m, losses)| {
                        let rows = SENSITIVITY_LEVELS
                            .iter()
                            .zip(losses)
                            .map(|(&level, val_loss)| Sensitivity {
                                level,
                                val_loss,
                                increase: relative_increase(val_loss, scan_base),
                            })
                            .collect();
                        (m, rows)
                    })
                    .collect();
                let alone = caps(&sens, self.recipe.contract.tolerance, by_heads);
                let planned = alone
                    .iter()
                    .map(|(m, c)| (m.clone(), c.min(self.prunable.planned(m, by_heads))))
                    .collect();
                let search = Search {
                    base,
                    scan_base,
                    plan,
                    sens,
                    alone,
                    caps: planned,
                    tried: Vec::new(),
                };
                Ok(self.joint(search))
            }
            (Await::Joint(mut search), Observation::JointLoss { val_loss }) => {
                let increase = relative_increase(val_loss, search.base);
                search.tried.push(Joint {
                    sparsity: search.caps.clone(),
                    val_loss,
                    increase,
                });
                if increase <= self.recipe.contract.tolerance || search.caps.values().all(|c| *c <= 0.0) {
                    return self.diagnosed(*search);
                }
                step_down(&mut search.caps);
                Ok(self.joint(*search))
            }
            (step, obs) => Err(ConductorError::Protocol(format!(
                "{obs:?} does not answer diagnose's {step:?}"
            ))),
        }
    }

    /// Asks for the joint check of the current caps.
    fn joint(&mut self, search: Search) -> Turn {
        let request = Request::MeasureJoint {
            sparsity: search.caps.clone(),
            heads: self.prune_heads(),
            units: self.recipe.contract.prune_units,
            samples: match search.plan {
                Scan::Measured { .. } => None,
                Scan::Linearized { samples } => Some(samples),
            },
        };
        self.ask(
            Vec::new(),
            request,
            Awaiting::Diagnose(Await::Joint(Box::new(search))),
        )
    }

    /// The caps are set: recorded, then the next phase.
    fn diagnosed(&mut self, s: Search) -> Result<Turn> {
        let tolerance = self.recipe.contract.tolerance;
        let table: Vec<String> = s
            .caps
            .iter()
            .map(|(m, c)| format!("{m} {:.0} %", 100.0 * c))
            .collect();
        let last = s.tried.last().map_or(0.0, |j| j.increase);
        let mut evidence = json!({"base_val_loss": s.base, "scan_samples": s.plan.samples(), "scan_base_val_loss": s.scan_base, "sensitivity": s.sens, "caps_alone": s.alone, "joint": s.tried, "caps": s.caps});
        let how = match s.plan {
            Scan::Measured { .. } => {
                "one-shot magnitude pruning per module (10/20/30/50 % on a copy)".to_string()
            }
            Scan::Linearized { samples } => {
                evidence["scan"] = json!("linearized");
                format!(
                    "magnitude pruning per module (10/20/30/50 %) estimated from {samples} validation samples' logit gradients (main too short to pay for measuring each)"
                )
            }
        };
        let d = Decision::new(
            self.state.step,
            Phase::Diagnose,
            DecisionKind::Sensitivity,
            format!(
                "{how}, then the planned sparsities all at once ({:+.1} % validation loss after {} check(s)): caps within {:.0} %: {}",
                100.0 * last,
                s.tried.len(),
                100.0 * tolerance,
                table.join(", ")
            ),
            evidence,
        );
        self.state.contraction.caps = s.caps;
        self.choose_next(vec![Action::Record(d)])
    }

    /// The training samples main ran (its steps, to where it ended, × the effective batch).
    fn main_samples(&self) -> u64 {
        let Some(main) = self.state.entered.iter().find(|e| e.phase == Phase::Main) else {
            return 0;
        };
        let steps = match self.state.main_end {
            Some((end, _)) => end.saturating_sub(main.start),
            None => main.steps,
        };
        steps * self.recipe.main.effective_batch() as u64
    }

    /// Whether attention is pruned by whole heads.
    fn by_heads(&self) -> bool {
        self.prune_heads().is_some()
    }

    /// The head count when attention is pruned by whole heads.
    pub(crate) fn prune_heads(&self) -> Option<usize> {
        self.recipe
            .contract
            .prune_heads
            .then_some(self.info.heads)
            .flatten()
    }
}
