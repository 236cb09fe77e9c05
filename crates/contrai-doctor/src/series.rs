//! The metric-series model: canonical series of (step, value) points per run.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::tags;

mod parts;
pub use parts::LossPart;
use parts::loss_parts;

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
    /// The log's own order with its segment starts, when the log has more than one segment
    /// (`None`: the log wrote the points in step order, all in one piece).
    pub log: Option<LogOrder>,
}

/// What in a log's own structure, besides its steps, starts a new segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Marker {
    /// Another event file of the same TensorBoard run begins.
    NewFile,
    /// A CSV logger wrote its header again.
    RepeatedHeader,
    /// A training run's closing summary (HF `train_runtime`) is followed by more training.
    RunSummary,
    /// The LR went back up to the value the log started at, or to a level its schedule held
    /// earlier, while the steps went on: the schedule began again (a job resumed without its
    /// scheduler's state).
    LrRestart,
    /// The run's planned steps changed, or its epoch went back while its steps went on: the
    /// job was launched again (a new dataset or schedule) and its log appended to.
    Relaunch,
    /// A Trainer state's epoch went back while its steps went on: a job launched again into
    /// the same state — or a streamed dataset's epoch counting anew; its values tell which.
    EpochRestart,
}

/// Where a series' log order starts a new segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    /// Index, in [`LogOrder::points`], of the segment's first point.
    pub index: usize,
    /// The steps the file writes before and at the cut; a reader that shifts an appended run's
    /// steps to keep the x-axis increasing keeps the file's own here.
    pub log_steps: (u64, u64),
    /// The 1-based line (or record) of the file where the segment starts, when known.
    pub line: Option<usize>,
    /// The structural mark, when the steps alone do not tell.
    pub marker: Option<Marker>,
}

impl Cut {
    /// True when the file's step counter went back at the cut.
    pub fn went_back(&self) -> bool {
        self.log_steps.1 < self.log_steps.0
    }

    /// True when the file's step counter repeated its step at the cut.
    pub fn repeated(&self) -> bool {
        self.log_steps.1 == self.log_steps.0
    }
}

/// A series in the order its log wrote it, with the places where a new segment starts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogOrder {
    /// The points in log order, with the steps the run's x-axis gives them.
    pub points: Vec<Point>,
    /// Segment starts, in log order.
    pub cuts: Vec<Cut>,
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

/// What a run trains, as its files say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    /// Nothing says.
    #[default]
    Unknown,
    /// A classifier (its loss has a chance level, ln K).
    Classification,
    /// A language model (token-level loss: no class count, no chance level of a few classes).
    LanguageModel,
}

/// Facts about a run that are not series but help the detectors.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunHints {
    /// What the run trains.
    pub task: Task,
    /// The file (or "metric names") the task was read from.
    pub task_source: Option<String>,
    /// The x-axis unit.
    pub x_unit: XUnit,
    /// Total planned steps when the log says so (HF `max_steps`, LLaMA-Factory `total_steps`).
    pub total_steps: Option<u64>,
    /// Number of classes when known (sets the chance level).
    pub num_classes: Option<u32>,
    /// A language model's vocabulary size when its config states it (`vocab_size`): its loss at
    /// ln V is a uniform guess over its tokens.
    pub vocab_size: Option<u64>,
    /// The global gradient-norm clip when the run is known to clip (Contrai's `main.clip_norm`,
    /// or `contrai doctor --clip-norm`): a passing spike that clipping bounded is then information.
    pub clip_norm: Option<f64>,
    /// Steps an epoch takes, when the log counts both (an `epoch` column beside the steps).
    pub steps_per_epoch: Option<f64>,
    /// The training setup the run's own files state (schedule, warmup, peak LR, batch).
    pub setup: crate::stated_setup::Setup,
    /// The checkpoints the run's folders hold, by step.
    pub checkpoints: Vec<Checkpoint>,
    /// What of the log could not be read (a truncated record, entries with no usable step):
    /// the diagnosis rests on the rest, and says so.
    pub partial: Vec<Partial>,
}

/// A part of a log that was not read, and where.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Partial {
    /// The file.
    pub file: String,
    /// Where in it: `byte 1234`, `log_history[17]`.
    pub at: String,
    /// What was wrong and what was done.
    pub what: String,
}

impl Partial {
    /// A record of a binary log (a TensorBoard event, a W&B record) that runs past the end of
    /// `file` at byte `at`, `left` bytes unread: what a one-off read says of a file cut short.
    pub fn record_cut_short(file: &std::path::Path, at: u64, left: usize) -> Partial {
        Partial {
            file: file.display().to_string(),
            at: format!("byte {at}"),
            what: format!("the record at byte {at} runs past the end of the file ({left} bytes left unread)"),
        }
    }
}

/// A checkpoint a run saved, as its folder shows it (`checkpoint-500/`,
/// `checkpoints/epoch=3-step=1200.ckpt`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Checkpoint {
    /// The step it was saved at.
    pub step: u64,
    /// Its file or folder name.
    pub name: String,
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
    /// The parts of a loss logged in parts, beside the main pair.
    pub parts: Vec<LossPart>,
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
    /// Per tag, the file line of each point, when the reader numbers them.
    lines: Vec<Vec<u32>>,
    /// The line the reader is at ([`RawRun::at_line`]).
    line: Option<u32>,
    /// Segment marks, in log order.
    marks: Vec<Mark>,
    /// The fractional epoch the log wrote beside its steps (an `epoch` key or column).
    epochs: Vec<Point>,
    /// The first LR tag's course so far, to tell a schedule that begins again.
    lr: Option<LrCourse>,
}

/// An LR tag's course so far: its first two values, its high and its last, its largest rise
/// from one log to the next, and a restart seen at its last point that the next one must confirm.
#[derive(Clone, Debug)]
struct LrCourse {
    tag: usize,
    first: f64,
    second: Option<f64>,
    high: f64,
    last: f64,
    rise: f64,
    /// The levels it held (the same value at two logs in a row), at most [`HELD_LEVELS`].
    held: Vec<f64>,
    /// The restart's mark, with how many marks the log had then (a mark in between voids it),
    /// and whether it began a new schedule ([`LrCourse::begins_anew`]) or went back to a level
    /// of its own ([`LrCourse::back_to_a_level`]).
    pending: Option<(Mark, usize, bool)>,
}

/// The most levels an LR's course remembers (a step schedule's few; a continuous one holds none).
const HELD_LEVELS: usize = 16;

/// An LR at or under this share of its high has come to its schedule's end...
const ENDED: f64 = 0.05;
/// ...and one back at this share or above trains again.
const TRAINS: f64 = 0.3;

/// Within 2 % of each other.
fn same_lr(a: f64, b: f64) -> bool {
    (a / b - 1.0).abs() < 0.02
}

impl LrCourse {
    /// Whether `value` may be the schedule beginning again: back from a decayed LR (under 0.9x
    /// its high) to the value the log started at — up 1.5x or more, or, for a log that started
    /// at zero (a warmup from 0), down to zero again; or back to it from any decay a log can
    /// tell (2 %) in one jump over ten times the most it ever rose from one log to the next (a
    /// linear decay over 12,000 steps, 8 % down at step 1,000, is back at its start at 1,010).
    fn restarts(&self, value: f64) -> bool {
        let decayed = self.last < 0.9 * self.high;
        if self.first == 0.0 {
            return decayed && value == 0.0 && self.last > 0.0;
        }
        if !same_lr(value, self.first) || value <= self.last {
            return false;
        }
        (decayed && value >= 1.5 * self.last)
            || (!same_lr(self.last, self.high) && value - self.last > 10.0 * self.rise)
    }

    /// Whether `value` begins a new schedule where the last one ended: the LR had decayed to
    /// its end ([`ENDED`] of its high or less) and is back at a training LR ([`TRAINS`] of it):
    /// a run resumed, or launched again, with a schedule of its own (a larger `max_steps`).
    fn begins_anew(&self, value: f64) -> bool {
        self.high > 0.0 && self.last <= ENDED * self.high && value >= TRAINS * self.high
    }

    /// Whether `value` jumps back (1.5x or more) from a decayed LR to a level its own schedule
    /// held earlier: a job resumed from an earlier checkpoint's optimizer without its scheduler
    /// (a ReduceLROnPlateau that only ever lowers the LR is back at an LR it left behind).
    fn back_to_a_level(&self, value: f64) -> bool {
        self.last < 0.9 * self.high
            && value >= 1.5 * self.last
            && self.held.iter().any(|h| same_lr(value, *h))
    }

    /// Whether the value after a possible restart confirms it: the log's second value again (a
    /// warmup that passes the first value on its way is no restart), or, after zero, any LR (a
    /// decay that ends at zero stays there); after a new schedule began, a training LR still.
    fn confirms(&self, value: f64, anew: bool) -> bool {
        if anew {
            value >= TRAINS * self.high
        } else if self.first == 0.0 {
            value > 0.0
        } else {
            self.second.is_some_and(|s| same_lr(value, s))
        }
    }
}

/// A segment start the reader saw, for every tag at once: how many points each tag had then.
#[derive(Clone, Debug)]
struct Mark {
    lens: Vec<usize>,
    marker: Option<Marker>,
    log_steps: Option<(u64, u64)>,
    line: Option<u32>,
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
        if tag == "epoch" {
            self.epochs.push(Point { step, value });
            return;
        }
        if let Some(&i) = self.index.get(tag) {
            self.follow_lr(i, value);
            if let Some(t) = self.tags.get_mut(i) {
                t.1.push(Point { step, value });
                if let (Some(line), Some(l)) = (self.line, self.lines.get_mut(i)) {
                    l.push(line);
                }
            }
            return;
        }
        let Some((series, _)) = tags::classify(tag) else {
            // Remember the rejection: an unmapped tag costs one lookup per point from now on.
            self.index.insert(tag.to_string(), usize::MAX);
            return;
        };
        if series == Series::Lr && self.lr.is_none() && value.is_finite() && value >= 0.0 {
            self.lr = Some(LrCourse {
                tag: self.tags.len(),
                first: value,
                second: None,
                high: value,
                last: value,
                rise: 0.0,
                held: Vec::new(),
                pending: None,
            });
        }
        self.index.insert(tag.to_string(), self.tags.len());
        self.tags.push((tag.to_string(), vec![Point { step, value }]));
        self.lines.push(self.line.into_iter().collect());
    }

    /// Follows the first LR tag (`i`, about to take `value`): a schedule that begins again while
    /// the steps go on starts a segment ([`Marker::LrRestart`]).
    fn follow_lr(&mut self, i: usize, value: f64) {
        let Some(mut c) = self.lr.take() else {
            return;
        };
        if c.tag == i && value.is_finite() && value >= 0.0 {
            if let Some((mark, marks, anew)) = c.pending.take()
                && marks == self.marks.len()
                && c.confirms(value, anew)
            {
                self.marks.push(mark);
            }
            let anew = c.begins_anew(value) || c.back_to_a_level(value);
            if anew || c.restarts(value) {
                let mark = Mark {
                    lens: self.tags.iter().map(|(_, p)| p.len()).collect(),
                    marker: Some(Marker::LrRestart),
                    log_steps: None,
                    line: self.line,
                };
                c.pending = Some((mark, self.marks.len(), anew));
            }
            if value > 0.0 {
                c.second = c.second.or(Some(value));
            }
            if value > 0.0
                && same_lr(value, c.last)
                && c.held.len() < HELD_LEVELS
                && !c.held.iter().any(|h| same_lr(value, *h))
            {
                c.held.push(value);
            }
            c.high = c.high.max(value);
            c.rise = c.rise.max(value - c.last);
            c.last = value;
        }
        self.lr = Some(c);
    }

    /// Numbers the points pushed from now on with this 1-based line (or record) of the file,
    /// so that findings can quote where the log says it.
    pub fn at_line(&mut self, line: usize) {
        self.line = Some(u32::try_from(line).unwrap_or(u32::MAX));
    }

    /// Marks that the log starts a new segment before the next point of every tag: a new file,
    /// a header written again, a closing summary; `log_steps` are the file's own steps before
    /// and at the mark when the reader shifts the steps it pushes.
    pub fn mark_segment(&mut self, marker: Option<Marker>, log_steps: Option<(u64, u64)>) {
        self.marks.push(Mark {
            lens: self.tags.iter().map(|(_, p)| p.len()).collect(),
            marker,
            log_steps,
            line: self.line,
        });
    }

    /// True when no tag holds a point.
    pub fn is_empty(&self) -> bool {
        self.tags.iter().all(|(_, p)| p.is_empty())
    }

    /// [`RawRun::into_run`], once for each evaluation set when the run logs several
    /// (`eval_<set>_loss`: a Trainer given a dict of evaluation datasets), each named after its
    /// set and holding that set's validation series with the shared training ones.
    pub fn into_runs(self) -> Vec<Run> {
        let mut sets: Vec<String> = Vec::new();
        for (tag, points) in &self.tags {
            if let Some(set) = eval_set_of(tag).filter(|_| !points.is_empty())
                && !sets.contains(&set)
            {
                sets.push(set);
            }
        }
        if sets.len() < 2 {
            return vec![self.into_run()];
        }
        sets.iter()
            .map(|set| {
                let mut r = self.clone();
                for (i, (tag, points)) in r.tags.iter_mut().enumerate() {
                    if eval_set_of(tag).is_some_and(|s| s != *set) {
                        points.clear();
                        if let Some(l) = r.lines.get_mut(i) {
                            l.clear();
                        }
                    }
                }
                r.name = format!("{} [eval set {set}]", r.name);
                r.into_run()
            })
            .collect()
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
        for (_, i) in best.values_mut() {
            *i = denser_twin(&self.tags, *i);
        }
        let train_tag = best.get(&Series::TrainLoss).map(|&(_, i)| self.tags[i].0.clone());
        for (s, (_, i)) in &mut best {
            if matches!(s, Series::ValLoss | Series::ValAccuracy) {
                *i = epoch_twin(&self.tags, *i, train_tag.as_deref());
            }
        }
        let mut hints = self.hints;
        if hints.x_unit == XUnit::Step {
            hints.steps_per_epoch = steps_per_epoch(&self.epochs);
        }
        let lm = |(t, p): &(String, Vec<Point>)| !p.is_empty() && crate::read::names_a_language_model(t);
        if hints.task == Task::Unknown && self.tags.iter().any(lm) {
            hints.task = Task::LanguageModel;
            hints.task_source = Some("metric names".into());
        }
        let main = [Series::TrainLoss, Series::ValLoss].map(|s| best.get(&s).map(|&(_, i)| i));
        let parts = loss_parts(&self.tags, main);
        let mut tags_vec: Vec<Option<(String, Vec<Point>)>> = self.tags.into_iter().map(Some).collect();
        let mut series = BTreeMap::new();
        for (s, (_, i)) in best {
            if let Some((tag, mut points)) = tags_vec.get_mut(i).and_then(Option::take) {
                if matches!(s, Series::TrainAccuracy | Series::ValAccuracy) {
                    normalise_percent(&mut points);
                }
                let lines = self.lines.get(i).map(Vec::as_slice).unwrap_or(&[]);
                let log = log_order(&points, lines, &self.marks, i);
                points.sort_by_key(|p| p.step);
                series.insert(s, SeriesData { tag, points, log });
            }
        }
        Run {
            name: self.name,
            source: self.source,
            format: self.format,
            series,
            hints,
            parts,
        }
    }
}

/// The tag to read for tag `i`: Lightning logs a metric both ways (`on_step` and `on_epoch`) as
/// `<name>_step` and `<name>_epoch`, and where the per-step one holds fewer points (a log every
/// 50 steps of 13-step epochs) its per-epoch twin says more of the same quantity.
fn denser_twin(tags: &[(String, Vec<Point>)], i: usize) -> usize {
    let Some(stem) = tags[i].0.strip_suffix("_step") else {
        return i;
    };
    let twin = format!("{stem}_epoch");
    tags.iter()
        .position(|(t, p)| *t == twin && p.len() > tags[i].1.len())
        .unwrap_or(i)
}

/// The validation tag to read for tag `i` beside the training loss `train`: Keras logs each
/// validation metric twice, `evaluation_<m>_vs_iterations` on the optimizer's iterations and
/// `epoch_<m>` on the epochs; where the training loss is an `epoch_` tag, validation must be read
/// on its axis too (a best evaluation at iteration 150 is no point of a 20-epoch training curve).
fn epoch_twin(tags: &[(String, Vec<Point>)], i: usize, train: Option<&str>) -> usize {
    let on_epochs = |t: &str| t.rsplit('/').next().is_some_and(|n| n.starts_with("epoch_"));
    if !train.is_some_and(on_epochs) {
        return i;
    }
    let tag = &tags[i].0;
    let (folder, name) = tag.rsplit_once('/').map_or(("", tag.as_str()), |(f, n)| (f, n));
    let Some(metric) = name
        .strip_prefix("evaluation_")
        .and_then(|m| m.strip_suffix("_vs_iterations"))
    else {
        return i;
    };
    let twin = if folder.is_empty() {
        format!("epoch_{metric}")
    } else {
        format!("{folder}/epoch_{metric}")
    };
    tags.iter()
        .position(|(t, p)| *t == twin && !p.is_empty())
        .unwrap_or(i)
}

/// A tag's points in log order with its segment starts: where the step goes back or repeats, and
/// where the reader marked one; `None` when there is none.
fn log_order(points: &[Point], lines: &[u32], marks: &[Mark], tag: usize) -> Option<LogOrder> {
    // A reader numbers every point of a tag or none.
    let lines = if lines.len() == points.len() { lines } else { &[] };
    let line = |i: usize| lines.get(i).map(|l| *l as usize);
    let mut cuts: BTreeMap<usize, Cut> = BTreeMap::new();
    for (i, w) in points.windows(2).enumerate() {
        if w[1].step <= w[0].step {
            let cut = Cut {
                index: i + 1,
                log_steps: (w[0].step, w[1].step),
                line: line(i + 1),
                marker: None,
            };
            cuts.insert(i + 1, cut);
        }
    }
    for m in marks {
        let k = m.lens.get(tag).copied().unwrap_or(0);
        if k == 0 || k >= points.len() {
            continue;
        }
        let steps = m.log_steps.unwrap_or((points[k - 1].step, points[k].step));
        let cut = cuts.entry(k).or_insert(Cut {
            index: k,
            log_steps: steps,
            line: line(k).or(m.line.map(|l| l as usize)),
            marker: None,
        });
        cut.log_steps = m.log_steps.unwrap_or(cut.log_steps);
        cut.marker = cut.marker.or(m.marker);
    }
    (!cuts.is_empty()).then(|| LogOrder {
        points: points.to_vec(),
        cuts: cuts.into_values().collect(),
    })
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

/// The evaluation set a metric belongs to when its name says (`eval_<set>_loss`,
/// `eval/<set>_accuracy`); None for the plain `eval_loss` and for other metrics.
fn eval_set_of(tag: &str) -> Option<String> {
    let lower = tag.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("eval_")
        .or_else(|| lower.strip_prefix("eval/"))?;
    ["_loss", "_accuracy", "_acc"]
        .iter()
        .find_map(|m| rest.strip_suffix(m))
        .filter(|set| !set.is_empty())
        .map(str::to_string)
}

/// Steps per epoch from the epochs a log wrote beside its steps: the median of step / epoch
/// over its points from half an epoch on (a Trainer's fractional epoch), or, when every epoch
/// is a whole number (Lightning's epoch index), of first step / epoch of each epoch;
/// `None` without such points.
fn steps_per_epoch(points: &[Point]) -> Option<f64> {
    let whole = points.iter().all(|p| p.value.fract() == 0.0);
    let mut seen = std::collections::BTreeSet::new();
    let mut ratios: Vec<f64> = points
        .iter()
        .filter(|p| p.value >= 0.5 && p.value.is_finite() && p.step > 0)
        .filter(|p| !whole || seen.insert(p.value as u64))
        .map(|p| p.step as f64 / p.value)
        .collect();
    if ratios.is_empty() {
        return None;
    }
    Some(crate::stats::median_in_place(&mut ratios))
}
