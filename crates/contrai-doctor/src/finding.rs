//! Findings: label, severity, start step, evidence and a recommendation.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// The fixed vocabulary of findings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Label {
    /// Validation stopped improving while training loss still falls.
    Overfitting,
    /// The loss stopped improving.
    Plateau,
    /// The loss swings up and down without net progress.
    Oscillation,
    /// The loss sits at ln K (uniform guessing over K classes).
    StuckAtChance,
    /// A sudden jump of the loss far above its recent level.
    LossSpike,
    /// NaN or infinite values.
    Nonfinite,
    /// The gradient norm blew up.
    GradExplode,
    /// The gradient norm collapsed towards zero.
    GradVanish,
    /// The LR warmup takes too large a share of the run.
    LrWarmupTooLong,
    /// The LR warmup is too short (or absent where it hurts).
    LrWarmupTooShort,
    /// The LR never decays after its peak.
    LrNoDecay,
    /// Nothing warrants action.
    Healthy,
}

impl Label {
    /// The label's snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Label::Overfitting => "overfitting",
            Label::Plateau => "plateau",
            Label::Oscillation => "oscillation",
            Label::StuckAtChance => "stuck_at_chance",
            Label::LossSpike => "loss_spike",
            Label::Nonfinite => "nonfinite",
            Label::GradExplode => "grad_explode",
            Label::GradVanish => "grad_vanish",
            Label::LrWarmupTooLong => "lr_warmup_too_long",
            Label::LrWarmupTooShort => "lr_warmup_too_short",
            Label::LrNoDecay => "lr_no_decay",
            Label::Healthy => "healthy",
        }
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How urgent a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing; no action required.
    Info,
    /// Action recommended.
    Warning,
    /// The run is broken or wasting compute.
    Critical,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        })
    }
}

/// One diagnosis.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    /// What was found.
    pub label: Label,
    /// How urgent it is.
    pub severity: Severity,
    /// The step (log x-axis) where it starts.
    pub step: u64,
    /// The numbers that triggered it.
    pub evidence: BTreeMap<String, f64>,
    /// What to change, with numbers.
    pub recommendation: String,
}

impl Finding {
    /// A finding with empty evidence.
    pub fn new(label: Label, severity: Severity, step: u64, recommendation: String) -> Self {
        Finding {
            label,
            severity,
            step,
            evidence: BTreeMap::new(),
            recommendation,
        }
    }

    /// Adds one evidence number.
    pub fn with(mut self, key: &str, value: f64) -> Self {
        self.evidence.insert(key.to_string(), value);
        self
    }

    /// The evidence as `key value` pairs in one line (`val_loss_best 0.31, evals_since_best 4`).
    pub fn evidence_line(&self) -> String {
        self.evidence
            .iter()
            .map(|(k, v)| format!("{k} {}", crate::detect::num(*v)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// True when the finding warrants action (severity warning or critical).
    pub fn actionable(&self) -> bool {
        self.label != Label::Healthy && self.severity >= Severity::Warning
    }
}
