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
    /// The log holds several segments (a resume, a restart) and the LR, the loss or the step
    /// counter does not continue across one.
    ResumeDiscontinuity,
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
            Label::ResumeDiscontinuity => "resume_discontinuity",
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
    /// How sure the finding is.
    pub confidence: Confidence,
    /// What the label found in typed form, where it has more to say than numbers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Detail>,
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
            confidence: Confidence::default(),
            detail: None,
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

/// A finding's typed detail.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Detail {
    /// The judged segment boundaries of a resumed log.
    Resume(Resume),
    /// The setting of the run's own files the finding rests on (no LR was logged).
    Setting(crate::stated_setup::Setting),
}

/// How sure the doctor is of what it reports: how far the evidence clears its rule's threshold,
/// on how much of the run (a finding's rules in `detect::confidence`; a resume boundary's in
/// `detect::resume`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// One weak signal, at the rule's margin or on little data (a boundary only the file
    /// structure marks): check the evidence before acting.
    Low,
    /// The rule fired clearly (a step boundary and a break near its threshold).
    #[default]
    Medium,
    /// The evidence clears the rule by far, on enough data (a step boundary and breaks well past
    /// their thresholds).
    High,
}

impl Confidence {
    /// One notch less sure (low stays low).
    pub fn lowered(self) -> Confidence {
        match self {
            Confidence::High => Confidence::Medium,
            Confidence::Medium | Confidence::Low => Confidence::Low,
        }
    }
}

impl fmt::Display for Confidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Confidence::Low => "low",
            Confidence::Medium => "medium",
            Confidence::High => "high",
        })
    }
}

/// What does not continue across a segment boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Break {
    /// The step counter went back.
    StepBack,
    /// The step counter repeated its step.
    StepRepeat,
    /// The LR started its warmup again.
    LrRestartWarmup,
    /// The LR went back up to its peak.
    LrRestartPeak,
    /// The LR jumped against its own schedule.
    LrJump,
    /// The loss jumped beyond its noise.
    LossJump,
    /// The gradient norm jumped far beyond its noise (an optimizer begun again without its
    /// state takes its first steps blind).
    GradJump,
    /// The job was launched again with another plan (its planned steps or its epoch count
    /// began anew): what follows runs on a schedule and data order other than the ones it had.
    NewPlan,
}

/// What a boundary means, read from the steps, the LR and the loss on both sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reading {
    /// Resumed from an earlier checkpoint: the LR and the loss go on as they were at that step.
    Consistent,
    /// The step counter went back to the start and the loss to its starting level: the run
    /// began again (a second run appended to the same log).
    FromScratch,
    /// The step counter went back to the start, the loss did not: weights were loaded into a
    /// fresh run, whose optimizer, schedule and counter began again.
    WeightsOnly,
    /// Resumed, but the LR or the loss does not go on as it was.
    Broken,
}

/// One judged segment boundary, with the numbers of the raw log on both sides.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Boundary {
    /// The 1-based line of the file where the new segment starts, when the reader knows it.
    pub line: Option<usize>,
    /// The file's step before the boundary.
    pub step_before: u64,
    /// The file's step at the boundary.
    pub step_after: u64,
    /// The structural mark, when the steps alone do not tell.
    pub marker: Option<crate::series::Marker>,
    /// What it means.
    pub reading: Reading,
    /// What does not continue.
    pub breaks: Vec<Break>,
    /// How sure the reading is.
    pub confidence: Confidence,
    /// The LR last logged before the boundary.
    pub lr_before: Option<f64>,
    /// The LR first logged after it.
    pub lr_after: Option<f64>,
    /// The LR the log had at the resumed step before, or went on from.
    pub lr_expected: Option<f64>,
    /// The loss level at the end of the segment before (median of its last points).
    pub loss_before: Option<f64>,
    /// The loss level at the start of the segment after (median of its first points).
    pub loss_after: Option<f64>,
    /// The loss the segment before had at the resumed step, when it reached that step.
    pub loss_expected: Option<f64>,
    /// How far the loss jumped, in robust noise units of the segment before.
    pub loss_z: Option<f64>,
}

/// The segment boundaries of a resumed log, each judged.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Resume {
    /// How sure the finding is (its most certain reported boundary).
    pub confidence: Confidence,
    /// Every reported boundary, in log order.
    pub boundaries: Vec<Boundary>,
}
