//! `resume_discontinuity`: a log in several segments — its step counter went back or repeated,
//! a new event file began, a header was written again, training went on after a closing
//! summary — is judged at each boundary from its own order, which the series reader keeps
//! beside the sorted points. Across a boundary the LR and the loss must go on as they were,
//! either at the step the new segment starts from (a resume from an earlier checkpoint replays
//! it) or where the segment before ended. An LR that restarts or jumps, a loss beyond the
//! segment's robust noise, or a counter back at the start tell that the run was not resumed with
//! its state; a boundary where both go on is a clean resume, reported as information.

use super::{Ctx, level, main_loss, num};
use crate::finding::{Boundary, Break, Confidence, Detail, Finding, Label, Reading, Resume, Severity};
use crate::series::{Cut, Marker, Point, Series};
use crate::stats::{median, point_noise};

mod segments;
use segments::{Side, every_side, pairs};

/// Points of the segment before whose median is its end level.
const END_POINTS: usize = 5;
/// Points of the segment after whose median is its start level (and that are replayed).
const START_POINTS: usize = 3;
/// Points of the segment before the noise is measured on.
const NOISE_POINTS: usize = 40;
/// A restart after fewer points than this is a false start: information, not a warning.
const FALSE_START: usize = 5;
/// An LR at this share of the earlier peak or above has gone back to the peak.
const PEAK_SHARE: f64 = 0.8;
/// Boundaries named in the advice besides the one it describes.
const MORE_NAMED: usize = 4;

/// The finding over every segment boundary of the run's log, if one is worth reporting.
pub fn check(ctx: &Ctx) -> Option<Finding> {
    let main = main_loss(ctx.st);
    // An evaluation logged twice at one step (a final `evaluate()`) is common: a validation
    // loss's repeated step is no boundary.
    let repeats = main == Series::TrainLoss;
    let loss = ctx.st.log(main);
    let lr = ctx.st.log(Series::Lr);
    // The gradient norm's sides, once for every boundary it may have jumped at.
    let grad = ctx.st.log(Series::GradNorm).map(every_side).unwrap_or_default();
    let mut judged: Vec<Judged> = pairs(loss, lr, repeats)
        .into_iter()
        .filter_map(|(l, r)| judge(ctx, l.as_ref(), r.as_ref(), &grad))
        .collect();
    judged.sort_by_key(|j| (j.b.line, j.order));
    // The lead is the most urgent boundary with a real segment before it, the first of those.
    let lead = judged
        .iter()
        .max_by_key(|j| (j.severity, j.settled, std::cmp::Reverse((j.b.line, j.order))))?;
    Some(finding(lead, &judged))
}

/// One boundary, judged.
struct Judged {
    /// Its typed form.
    b: Boundary,
    /// How urgent it is.
    severity: Severity,
    /// Its place in log order when the file gives no lines.
    order: usize,
    /// True when the segment before is more than a false start.
    settled: bool,
    /// The file step where the segment before had the loss the segment after starts at.
    level_step: Option<u64>,
    /// The loss level at the start of the segment before.
    start_level: Option<f64>,
}

/// Where the new segment starts on the earlier segment's axis: the file's step at the cut,
/// shifted as the reader shifted the segment before.
fn resumed_at(side: &Side) -> Option<i128> {
    let last = side.before.last()?;
    Some(i128::from(side.cut.log_steps.1) + i128::from(last.step) - i128::from(side.cut.log_steps.0))
}

/// How one series goes on across a boundary.
struct Course {
    /// The level before: the LR last logged, the loss's median over its last points.
    before: f64,
    /// The level after: the LR first logged, the loss's median over its first points.
    after: f64,
    /// The value the segment before had at the resumed step, when it reached it.
    at_step: Option<f64>,
    /// Log distance from the values at the replayed steps (loss: median over pairs).
    d_replay: Option<f64>,
    /// Log distance from the level before.
    d_end: f64,
    /// Noise of the segment before at its end, in log units.
    scale: f64,
    /// Noise of the segment before at its start, in log units.
    head_scale: f64,
    /// The finite, positive points of the segment before, in log order.
    a: Vec<Point>,
    /// The finite, positive points of the segment after, in log order.
    b: Vec<Point>,
}

/// Finite, positive points (logs are taken of them).
fn usable(points: &[Point]) -> Vec<Point> {
    points
        .iter()
        .copied()
        .filter(|p| p.value.is_finite() && p.value > 0.0)
        .collect()
}

/// The value a segment had at `x` on its own axis: the median of its values logged at `x`, else
/// the line between its neighbours; `None` outside the steps it spans.
fn value_at(sorted: &[Point], x: i128) -> Option<f64> {
    let (first, last) = (sorted.first()?, sorted.last()?);
    if x < i128::from(first.step) || x > i128::from(last.step) {
        return None;
    }
    let at: Vec<f64> = sorted
        .iter()
        .filter(|p| i128::from(p.step) == x)
        .map(|p| p.value)
        .collect();
    if !at.is_empty() {
        return median(&at);
    }
    let hi = sorted.iter().position(|p| i128::from(p.step) > x)?;
    let (a, b) = (sorted.get(hi.checked_sub(1)?)?, sorted.get(hi)?);
    let t = (x - i128::from(a.step)) as f64 / (b.step - a.step).max(1) as f64;
    Some(a.value + t * (b.value - a.value))
}

/// Robust per-point noise of positive points in log units: the MAD of the second differences of
/// their logs over √6 (a second difference carries three points' noise), at least 1 %; 5 % when
/// too few points tell.
fn log_noise(points: &[Point]) -> f64 {
    let logs: Vec<f64> = points.iter().map(|p| p.value.ln()).collect();
    if logs.len() < 5 {
        return 0.05;
    }
    point_noise(&logs).unwrap_or(0.0).max(0.01)
}

/// The course of a series across a boundary; `take` points of the segment after make its level
/// and are compared with the segment before at the same steps.
fn course(side: &Side, end: usize, take: usize) -> Option<Course> {
    let (a, b) = (usable(side.before), usable(side.after));
    let at = resumed_at(side)?;
    let mut sorted = a.clone();
    sorted.sort_by_key(|p| p.step);
    let first_after = side.after.first()?.step;
    let replayed: Vec<f64> = b
        .iter()
        .take(take)
        .filter_map(|p| {
            let x = at + i128::from(p.step) - i128::from(first_after);
            value_at(&sorted, x).map(|v| (p.value / v).ln())
        })
        .collect();
    let before = level(&a[a.len().checked_sub(end.min(a.len()))?..])?;
    let after = level(&b[..take.min(b.len())])?;
    Some(Course {
        before,
        after,
        at_step: value_at(&sorted, at),
        d_replay: median(&replayed),
        d_end: (after / before).ln(),
        scale: log_noise(&a[a.len().saturating_sub(NOISE_POINTS)..]),
        head_scale: log_noise(&a[..a.len().min(NOISE_POINTS)]),
        a,
        b,
    })
}

/// True when a log distance is beyond both the ratio and, for the loss, the noise threshold.
fn beyond(d: f64, ratio: f64, z: Option<(f64, f64)>) -> bool {
    d.abs() >= ratio.ln() && z.is_none_or(|(z, scale)| d.abs() >= z * scale)
}

/// The loss's break, if it went on from neither the replayed steps nor the end level.
fn loss_break(ctx: &Ctx, c: &Course) -> bool {
    let z = Some((ctx.cfg.resume_loss_z, c.scale));
    let far = |d: f64| beyond(d, ctx.cfg.resume_loss_ratio, z);
    far(c.d_end) && c.d_replay.is_none_or(far)
}

/// How far the gradient norm must jump at a boundary (its first value after against its level
/// before), beside [`DoctorConfig::resume_loss_z`] noise units: an order of magnitude, where
/// batch noise moves a norm by a few times.
///
/// [`DoctorConfig::resume_loss_z`]: crate::DoctorConfig::resume_loss_z
const GRAD_JUMP: f64 = 5.0;

/// Whether the gradient norm (its sides `grad`) jumped up at the boundary `at` (the file's
/// steps on either side).
fn grad_break(ctx: &Ctx, grad: &[Side], at: (u64, u64)) -> bool {
    let Some(side) = grad.iter().find(|s| s.cut.log_steps == at) else {
        return false;
    };
    course(side, END_POINTS, 1)
        .is_some_and(|c| c.d_end > 0.0 && beyond(c.d_end, GRAD_JUMP, Some((ctx.cfg.resume_loss_z, c.scale))))
}

/// The LR's break, if it went on from neither the replayed step nor the last LR, and its own
/// schedule never made such a drop itself.
fn lr_break(ctx: &Ctx, c: &Course) -> Option<Break> {
    let ratio = ctx.cfg.resume_lr_ratio;
    let far = |d: f64| beyond(d, ratio, None);
    if !far(c.d_end) || c.d_replay.is_some_and(|d| !far(d)) {
        return None;
    }
    let peak = c.a.iter().map(|p| p.value).fold(0.0, f64::max);
    if c.after > c.before {
        return Some(if c.after >= PEAK_SHARE * peak {
            Break::LrRestartPeak
        } else {
            Break::LrJump
        });
    }
    let rises = c.b.iter().take(10).any(|p| p.value >= ratio * c.after);
    let own_drop =
        c.a.windows(2)
            .map(|w| (w[0].value / w[1].value).ln())
            .fold(0.0, f64::max);
    if rises {
        Some(Break::LrRestartWarmup)
    } else {
        (-c.d_end > own_drop + ratio.ln()).then_some(Break::LrJump)
    }
}

/// Judges one boundary from its loss and LR sides (and the gradient norm's, `grad`).
fn judge(ctx: &Ctx, loss: Option<&Side>, lr: Option<&Side>, grad: &[Side]) -> Option<Judged> {
    let side = loss.or(lr)?;
    let cut = side.cut;
    let lc = loss.and_then(|s| course(s, END_POINTS, START_POINTS));
    let rc = lr.and_then(|s| course(s, 1, 1));
    if lc.is_none() && rc.is_none() {
        return None;
    }
    let loss_broke = lc.as_ref().is_some_and(|c| loss_break(ctx, c));
    let lr_broke = rc.as_ref().and_then(|c| lr_break(ctx, c));
    let mut breaks = Vec::new();
    if cut.went_back() {
        breaks.push(Break::StepBack);
    } else if cut.repeated() {
        breaks.push(Break::StepRepeat);
    }
    breaks.extend(lr_broke);
    if loss_broke {
        breaks.push(Break::LossJump);
    }
    let grad_broke = grad_break(ctx, grad, cut.log_steps);
    if grad_broke {
        breaks.push(Break::GradJump);
    }
    let new_plan = cut.marker == Some(Marker::Relaunch);
    if new_plan {
        breaks.push(Break::NewPlan);
    }
    let start = from_start(side);
    let start_level = lc
        .as_ref()
        .and_then(|c| level(&c.a[..c.a.len().min(START_POINTS)]));
    let reading = reading(
        ctx,
        start,
        lc.as_ref(),
        start_level,
        loss_broke || lr_broke.is_some() || new_plan || grad_broke,
    );
    let severity = severity(reading, &cut, side.before.len())?;
    let b = Boundary {
        line: cut.line,
        step_before: cut.log_steps.0,
        step_after: cut.log_steps.1,
        marker: cut.marker,
        reading,
        confidence: confidence(ctx, &cut, &breaks, lc.as_ref(), rc.as_ref()),
        breaks,
        lr_before: rc.as_ref().map(|c| c.before),
        lr_after: rc.as_ref().map(|c| c.after),
        lr_expected: rc.as_ref().map(|c| c.at_step.unwrap_or(c.before)),
        loss_before: lc.as_ref().map(|c| c.before),
        loss_after: lc.as_ref().map(|c| c.after),
        loss_expected: lc.as_ref().and_then(|c| c.at_step),
        loss_z: lc
            .as_ref()
            .filter(|_| loss_broke)
            .map(|c| c.d_end.abs() / c.scale),
    };
    Some(Judged {
        level_step: lc.as_ref().and_then(|c| level_step(side, c)),
        start_level,
        severity,
        order: cut.index,
        settled: side.before.len() >= FALSE_START,
        b,
    })
}

/// True when the step counter went back to (about) the first step the log had: the run began
/// again, rather than from a checkpoint within it.
fn from_start(side: &Side) -> bool {
    let cadence = crate::stats::median_gap(&side.before.iter().map(|p| p.step).collect::<Vec<_>>());
    side.cut.went_back() && side.cut.log_steps.1 as f64 <= side.first as f64 + cadence
}

/// What a boundary means.
fn reading(ctx: &Ctx, start: bool, loss: Option<&Course>, start_level: Option<f64>, broke: bool) -> Reading {
    if start {
        // Below where the segment before began, at the same steps or at its start level.
        let below_start = loss.is_some_and(|c| {
            let d = c.d_replay.or(start_level.map(|s| (c.after / s).ln()));
            d.is_some_and(|d| {
                d < 0.0
                    && beyond(
                        d,
                        ctx.cfg.resume_loss_ratio,
                        Some((ctx.cfg.resume_loss_z, c.head_scale)),
                    )
            })
        });
        return if below_start {
            Reading::WeightsOnly
        } else {
            Reading::FromScratch
        };
    }
    if broke {
        Reading::Broken
    } else {
        Reading::Consistent
    }
}

/// How urgent a boundary is; `None` for a marked one that goes on seamlessly.
fn severity(reading: Reading, cut: &Cut, before: usize) -> Option<Severity> {
    let step_cut = cut.went_back() || cut.repeated();
    match reading {
        Reading::Consistent if !step_cut => None,
        Reading::Consistent => Some(Severity::Info),
        Reading::FromScratch if before < FALSE_START => Some(Severity::Info),
        _ => Some(Severity::Warning),
    }
}

/// How sure a boundary's reading is: certain where the steps tell and every break is at least
/// twice its threshold; less where a break is near it, or only the file's structure marks it.
fn confidence(
    ctx: &Ctx,
    cut: &Cut,
    breaks: &[Break],
    loss: Option<&Course>,
    lr: Option<&Course>,
) -> Confidence {
    let step_cut = cut.went_back() || cut.repeated();
    let clear_loss = loss.is_none_or(|c| {
        !breaks.contains(&Break::LossJump)
            || beyond(
                c.d_end,
                ctx.cfg.resume_loss_ratio.powi(2),
                Some((2.0 * ctx.cfg.resume_loss_z, c.scale)),
            )
    });
    let lr_breaks = breaks
        .iter()
        .any(|b| matches!(b, Break::LrJump | Break::LrRestartPeak | Break::LrRestartWarmup));
    let clear_lr = lr.is_none_or(|c| !lr_breaks || beyond(c.d_end, ctx.cfg.resume_lr_ratio.powi(2), None));
    match (step_cut, clear_loss && clear_lr) {
        (true, true) => Confidence::High,
        (true, false) | (false, true) => Confidence::Medium,
        (false, false) => Confidence::Low,
    }
}

/// The file step of the last point before the boundary whose loss was at least the level after
/// it: where the segment before had that loss.
fn level_step(side: &Side, c: &Course) -> Option<u64> {
    let shift = i128::from(side.before.last()?.step) - i128::from(side.cut.log_steps.0);
    let p = c.a.iter().rev().find(|p| p.value >= c.after)?;
    u64::try_from(i128::from(p.step) - shift).ok()
}

/// The finding: the lead boundary described, the others named.
fn finding(lead: &Judged, all: &[Judged]) -> Finding {
    let reported: Vec<&Judged> = all.iter().collect();
    let others: Vec<&Judged> = reported
        .iter()
        .copied()
        .filter(|j| !std::ptr::eq(*j, lead))
        .collect();
    let mut rec = advice(lead);
    if !others.is_empty() {
        let named: Vec<String> = others.iter().take(MORE_NAMED).map(|j| short(&j.b)).collect();
        let rest = others.len().saturating_sub(MORE_NAMED);
        rec.push_str(&format!(
            "; {} more boundar{}: {}{}",
            others.len(),
            if others.len() == 1 { "y" } else { "ies" },
            named.join(", "),
            if rest > 0 {
                format!(" and {rest} more")
            } else {
                String::new()
            }
        ));
    }
    rec.push_str(&format!(" (confidence: {})", lead.b.confidence));
    let mut f = Finding::new(Label::ResumeDiscontinuity, lead.severity, lead.b.step_after, rec)
        .with("step_before", lead.b.step_before as f64)
        .with("step_after", lead.b.step_after as f64)
        .with("boundaries", reported.len() as f64);
    let numbers = [
        ("line", lead.b.line.map(|l| l as f64)),
        ("lr_before", lead.b.lr_before),
        ("lr_after", lead.b.lr_after),
        ("lr_expected", lead.b.lr_expected),
        ("loss_before", lead.b.loss_before),
        ("loss_after", lead.b.loss_after),
        ("loss_expected", lead.b.loss_expected),
        ("loss_jump_z", lead.b.loss_z),
    ];
    for (k, v) in numbers {
        if let Some(v) = v {
            f = f.with(k, v);
        }
    }
    f.detail = Some(Detail::Resume(Resume {
        confidence: lead.b.confidence,
        boundaries: reported.iter().map(|j| j.b.clone()).collect(),
    }));
    f
}

/// Where a boundary is: `line 675: step 49100 -> 49050`, with its structural mark.
fn place(b: &Boundary) -> String {
    let at = match b.line {
        Some(l) => format!("line {l}: step {} -> {}", b.step_before, b.step_after),
        None => format!("step {} -> {}", b.step_before, b.step_after),
    };
    match b.marker {
        Some(m) => format!("{at} ({})", marker_text(m)),
        None => at,
    }
}

/// A structural mark in words.
fn marker_text(m: Marker) -> &'static str {
    match m {
        Marker::NewFile => "a new event file",
        Marker::RepeatedHeader => "the header written again",
        Marker::RunSummary => "training after the run's closing summary",
        Marker::LrRestart => "the LR schedule beginning again, the steps going on",
        Marker::Relaunch => "the job launched again: its planned steps or epoch began anew",
        Marker::EpochRestart => "the epoch counting anew, the steps going on",
    }
}

/// A boundary in a few words, for the list of the others.
fn short(b: &Boundary) -> String {
    let what = match (b.reading, b.loss_after.zip(b.loss_before)) {
        (Reading::Broken, Some((after, before))) if b.breaks.contains(&Break::LossJump) => {
            format!("loss {}x", num(after / before))
        }
        (r, _) => reading_word(r).to_string(),
    };
    format!("{} ({what})", place(b))
}

/// A reading in a word or two.
fn reading_word(r: Reading) -> &'static str {
    match r {
        Reading::Consistent => "clean resume",
        Reading::FromScratch => "restart from the start",
        Reading::WeightsOnly => "weights-only restart",
        Reading::Broken => "broken resume",
    }
}

/// What resuming with the run's state takes, in every framework this doctor reads.
const RESUME_FIX: &str = "resume with the model, optimizer and LR-scheduler state together (HF: \
    trainer.train(resume_from_checkpoint=...), not weights loaded into a new Trainer; Lightning: \
    trainer.fit(ckpt_path=...); Keras: restore the optimizer too, e.g. BackupAndRestore, and pass \
    initial_epoch), with the same schedule arguments (num_train_epochs, max_steps, warmup), the \
    same data order (HF: keep ignore_data_skip=False so the sampler skips the batches already \
    seen) and a strict load (no missing keys); contrai's HF and Lightning callbacks certify a \
    resume before its first step";

/// The advice for the lead boundary.
fn advice(j: &Judged) -> String {
    let b = &j.b;
    match b.reading {
        Reading::Broken => format!(
            "the log resumes at {}, but {}: the run went on from step {} without the state it \
             had there. {RESUME_FIX}",
            place(b),
            what_broke(b),
            b.step_after
        ),
        Reading::WeightsOnly => format!(
            "the step counter went back at {} but the loss did not: it goes on at {}{}, below \
             its starting {}: weights were loaded into a fresh run whose optimizer, LR schedule \
             and step counter began again. Instead, {RESUME_FIX}",
            place(b),
            opt(b.loss_after),
            j.level_step
                .map(|s| format!(" (the level of step {s} before)"))
                .unwrap_or_default(),
            opt(j.start_level)
        ),
        Reading::FromScratch => format!(
            "the step counter went back to the start at {} and the loss to its starting level \
             ({} vs {} at the start of the segment before{}): the run began again and this log \
             holds both runs, which the rest of this diagnosis reads as one. If it was meant to \
             resume, it did not: {RESUME_FIX}. If it is a new run, log it to its own file (a new \
             output_dir or logger version, Keras CSVLogger(append=False))",
            place(b),
            opt(b.loss_after),
            opt(j.start_level),
            b.lr_after
                .map(|lr| format!("; the LR is {} as at its start", num(lr)))
                .unwrap_or_default()
        ),
        Reading::Consistent if b.step_after == b.step_before => format!(
            "the log writes step {} again at {}, and {}: a clean restart from that step; the \
             log holds both records",
            b.step_after,
            place(b),
            went_on(b)
        ),
        Reading::Consistent => format!(
            "the log resumes from an earlier checkpoint at {}: {} at step {}: a clean \
             resume; steps {}..{} were trained twice and the log holds both",
            place(b),
            went_on(b),
            b.step_after,
            b.step_after,
            b.step_before
        ),
    }
}

/// What did not go on, in words with the log's numbers.
fn what_broke(b: &Boundary) -> String {
    let mut parts = Vec::new();
    if b.breaks.contains(&Break::LossJump) {
        parts.push(format!(
            "the loss went from {} to {} ({}x{}{})",
            opt(b.loss_before),
            opt(b.loss_after),
            num(b.loss_after.unwrap_or(f64::NAN) / b.loss_before.unwrap_or(f64::NAN)),
            b.loss_z
                .map(|z| format!(", {:.0} noise units", z))
                .unwrap_or_default(),
            b.loss_expected
                .map(|e| format!("; it was {} at step {} before", num(e), b.step_after))
                .unwrap_or_default()
        ));
    }
    let lr = (opt(b.lr_after), opt(b.lr_expected));
    for br in &b.breaks {
        match br {
            Break::LrRestartWarmup => parts.push(format!(
                "the LR started its warmup again at {} (it was {})",
                lr.0, lr.1
            )),
            Break::LrRestartPeak => parts.push(format!(
                "the LR went back up to its peak, {} (it was {})",
                lr.0, lr.1
            )),
            Break::LrJump => parts.push(format!("the LR is {} where the schedule gave {}", lr.0, lr.1)),
            Break::NewPlan => {
                parts.push("the steps after it follow another schedule and data order".to_string());
            }
            Break::GradJump => {
                parts.push("the gradient norm jumped an order of magnitude (an optimizer begun again without its state)".to_string());
            }
            _ => {}
        }
    }
    parts.join(" and ")
}

/// What went on across a clean resume, as a clause: `the LR (1.32e-6) and the loss (0.3940 vs
/// 0.3934) are as they were`.
fn went_on(b: &Boundary) -> String {
    let lr = b.lr_after.map(|lr| format!("the LR ({})", num(lr)));
    let loss = b.loss_after.map(|l| {
        let was = b.loss_expected.or(b.loss_before).map(num).unwrap_or_default();
        format!("the loss ({} vs {was})", num(l))
    });
    match (lr, loss) {
        (Some(lr), Some(loss)) => format!("{lr} and {loss} are as they were"),
        (Some(one), None) | (None, Some(one)) => format!("{one} is as it was"),
        (None, None) => "the values are as they were".to_string(),
    }
}

/// A number, or `?` when unknown.
fn opt(x: Option<f64>) -> String {
    x.map(num).unwrap_or_else(|| "?".to_string())
}
