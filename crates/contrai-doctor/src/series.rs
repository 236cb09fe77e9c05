//! The metric-series model: canonical series of (step, value) points per run.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::tags;

/// A canonical metric series.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Series {
    /// Training loss.
    TrainLoss,
    /// Validation (eval) loss.
    ValLoss,
    /// Training accuracy (fraction in 0..1).
    TrainAccuracy,
    /// Validation accuracy (fraction in 0..1).
    ValAccuracy,
    /// Learning rate.
    Lr,
    /// Gradient norm.
    GradNorm,
}

impl Series {
    /// Every canonical series, in display order.
    pub const ALL: [Series; 6] = [
        Series::TrainLoss,
        Series::ValLoss,
        Series::TrainAccuracy,
        Series::ValAccuracy,
        Series::Lr,
        Series::GradNorm,
    ];

    /// The snake_case name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Series::TrainLoss => "train_loss",
            Series::ValLoss => "val_loss",
            Series::TrainAccuracy => "train_accuracy",
            Series::ValAccuracy => "val_accuracy",
            Series::Lr => "lr",
            Series::GradNorm => "grad_norm",
        }
    }

    /// Dense index in `0..6`.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One logged value at a step (or epoch, see [`XUnit`]). Non-finite values are kept.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// The x-axis position, in the log's own unit.
    pub step: u64,
    /// The logged value, possibly NaN or infinite.
    pub value: f64,
}

/// One canonical series of a run, with the original tag kept for display.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SeriesData {
    /// The tag or column the values came from.
    pub tag: String,
    /// Points in log order, sorted by step (stable).
    pub points: Vec<Point>,
}

/// The unit of a log's x-axis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum XUnit {
    /// Optimizer steps (or log indices).
    #[default]
    Step,
    /// Epochs.
    Epoch,
}

/// Facts about a run that are not series but help the detectors.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunHints {
    /// The x-axis unit.
    pub x_unit: XUnit,
    /// Total planned steps when the log says so (HF `max_steps`, LLaMA-Factory `total_steps`).
    pub total_steps: Option<u64>,
    /// Number of classes when known (sets the chance level).
    pub num_classes: Option<u32>,
    /// The global gradient-norm clip when the run is known to clip (Contrai's `main.clip_norm`,
    /// or `contrai doctor --clip-norm`): a passing spike that clipping bounded is then information.
    pub clip_norm: Option<f64>,
}

/// A parsed run: canonical series plus hints.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Run {
    /// Display name (run name, or the file name).
    pub name: String,
    /// Where it was read from.
    pub source: String,
    /// The detected format name.
    pub format: String,
    /// Canonical series.
    pub series: BTreeMap<Series, SeriesData>,
    /// Hints for the detectors.
    pub hints: RunHints,
}

/// A run as a reader sees it: raw tags in first-seen order, not yet mapped.
#[derive(Clone, Debug, Default)]
pub struct RawRun {
    /// Display name.
    pub name: String,
    /// Where it was read from.
    pub source: String,
    /// Format name.
    pub format: String,
    /// Tag name and its points, in first-seen order.
    pub tags: Vec<(String, Vec<Point>)>,
    index: std::collections::HashMap<String, usize>,
    /// Hints gathered while reading.
    pub hints: RunHints,
}

impl RawRun {
    /// A new empty raw run.
    pub fn new(name: impl Into<String>, source: impl Into<String>, format: &str) -> Self {
        RawRun {
            name: name.into(),
            source: source.into(),
            format: format.to_string(),
            ..Default::default()
        }
    }

    /// Appends one point to a tag, keeping only tags that map to a canonical series.
    pub fn push(&mut self, tag: &str, step: u64, value: f64) {
        if let Some(&i) = self.index.get(tag) {
            if let Some(t) = self.tags.get_mut(i) {
                t.1.push(Point { step, value });
            }
            return;
        }
        if tags::classify(tag).is_none() {
            // Remember the rejection: an unmapped tag costs one lookup per point from now on.
            self.index.insert(tag.to_string(), usize::MAX);
            return;
        }
        self.index.insert(tag.to_string(), self.tags.len());
        self.tags.push((tag.to_string(), vec![Point { step, value }]));
    }

    /// True when no tag holds a point.
    pub fn is_empty(&self) -> bool {
        self.tags.iter().all(|(_, p)| p.is_empty())
    }

    /// Maps tags to canonical series (best-scoring tag wins) and sorts points by step.
    pub fn into_run(self) -> Run {
        let mut best: BTreeMap<Series, (i32, usize)> = BTreeMap::new();
        for (i, (tag, points)) in self.tags.iter().enumerate() {
            if points.is_empty() {
                continue;
            }
            if let Some((s, prio)) = tags::classify(tag) {
                let e = best.entry(s).or_insert((prio, i));
                if prio > e.0 {
                    *e = (prio, i);
                }
            }
        }
        let mut tags_vec: Vec<Option<(String, Vec<Point>)>> = self.tags.into_iter().map(Some).collect();
        let mut series = BTreeMap::new();
        for (s, (_, i)) in best {
            if let Some((tag, mut points)) = tags_vec.get_mut(i).and_then(Option::take) {
                points.sort_by_key(|p| p.step);
                if matches!(s, Series::TrainAccuracy | Series::ValAccuracy) {
                    normalise_percent(&mut points);
                }
                series.insert(s, SeriesData { tag, points });
            }
        }
        Run {
            name: self.name,
            source: self.source,
            format: self.format,
            series,
            hints: self.hints,
        }
    }
}

/// Accuracies logged in percent (max > 1.5) are scaled to fractions.
fn normalise_percent(points: &mut [Point]) {
    let max = points
        .iter()
        .map(|p| p.value)
        .filter(|v| v.is_finite())
        .fold(f64::NEG_INFINITY, f64::max);
    if max > 1.5 && max <= 100.0 {
        for p in points {
            p.value /= 100.0;
        }
    }
}

impl Run {
    /// The points of a canonical series (empty if absent).
    pub fn points(&self, s: Series) -> &[Point] {
        self.series.get(&s).map(|d| d.points.as_slice()).unwrap_or(&[])
    }
}
