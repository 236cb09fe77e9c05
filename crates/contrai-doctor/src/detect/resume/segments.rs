//! Where a log's segments begin: the cuts of each series kept as boundaries (a logger's
//! interleaving, duplicates and a warm-restart schedule are none), and the loss's and the LR's
//! sides of each, matched.

use std::collections::{BTreeMap, VecDeque};

use crate::series::{Cut, LogOrder, Marker, Point};
use crate::stats::{median, median_gap};

/// A cut the log is past again within this many points may be a logger's interleaving.
const JITTER_PASS: usize = 3;
/// How far a warm-restart schedule's cycle may stray from its law, as a share of the length the
/// law predicts.
const CYCLE_SLACK: f64 = 0.1;
/// How much higher than the cycle before a warm-restart schedule's cycle may peak (logged
/// values straddle the true peak).
const PEAK_SLACK: f64 = 1.05;

/// A kept cut of one series, with the segments on either side in log order.
pub(super) struct Side<'a> {
    pub(super) cut: Cut,
    pub(super) before: &'a [Point],
    pub(super) after: &'a [Point],
    /// The lowest step the log had before the cut: where the run started.
    pub(super) first: u64,
}

/// The loss's and the LR's sides of each boundary, matched by the file's steps there.
pub(super) fn pairs<'a>(
    loss: Option<&'a LogOrder>,
    lr: Option<&'a LogOrder>,
    loss_repeats: bool,
) -> Vec<(Option<Side<'a>>, Option<Side<'a>>)> {
    let mut out: Vec<(Option<Side<'a>>, Option<Side<'a>>)> = Vec::new();
    let mut open: BTreeMap<(u64, u64), VecDeque<usize>> = BTreeMap::new();
    // The LR tells a warm-restart schedule (its restarts mark every series).
    let warm = lr.or(loss).is_some_and(warm_restarts);
    for s in loss.map(|l| sides(l, loss_repeats, warm)).unwrap_or_default() {
        open.entry(s.cut.log_steps).or_default().push_back(out.len());
        out.push((Some(s), None));
    }
    for s in lr.map(|l| sides(l, true, warm)).unwrap_or_default() {
        match open.get_mut(&s.cut.log_steps).and_then(VecDeque::pop_front) {
            Some(i) => {
                if let Some(slot) = out.get_mut(i) {
                    slot.1 = Some(s);
                }
            }
            None => out.push((None, Some(s))),
        }
    }
    out
}

/// The segments on either side of every kept cut of a series (a repeated step counts).
pub(super) fn every_side(log: &LogOrder) -> Vec<Side<'_>> {
    sides(log, true, false)
}

/// The segments on either side of each kept cut of a series (`repeats`: a repeated step counts;
/// `warm`: the LR's restarts are a warm-restart schedule's).
fn sides(log: &LogOrder, repeats: bool, warm: bool) -> Vec<Side<'_>> {
    let mut kept = kept_cuts(log, warm);
    kept.retain(|c| repeats || !c.repeated() || c.marker.is_some());
    let mut out = Vec::with_capacity(kept.len());
    let mut first = u64::MAX;
    for (j, cut) in kept.iter().enumerate() {
        let start = if j == 0 { 0 } else { kept[j - 1].index };
        let end = kept.get(j + 1).map_or(log.points.len(), |n| n.index);
        let (Some(before), Some(after)) = (log.points.get(start..cut.index), log.points.get(cut.index..end))
        else {
            continue;
        };
        first = before.iter().map(|p| p.step).fold(first, u64::min);
        out.push(Side {
            cut: *cut,
            before,
            after,
            first,
        });
    }
    out
}

/// The cuts that start segments: every marked one; a step cut unless it is a duplicate record
/// (same step, same value) or belongs to a pervasive pattern of shallow cuts the log is past again
/// within a few points — two writers a few steps apart, a train row and an eval row at each step
/// — which is how a logger writes, not where a run resumed.
fn kept_cuts(log: &LogOrder, warm: bool) -> Vec<Cut> {
    let p = &log.points;
    let prev = |c: &Cut| c.index.checked_sub(1).and_then(|i| p.get(i));
    let back = |c: &Cut| prev(c).zip(p.get(c.index)).is_some_and(|(a, b)| b.step <= a.step);
    let passes = |c: &Cut| {
        prev(c).is_some_and(|a| {
            p.iter()
                .skip(c.index + 1)
                .take(JITTER_PASS)
                .any(|n| n.step > a.step)
        })
    };
    let duplicate = |c: &Cut| {
        c.repeated()
            && prev(c)
                .zip(p.get(c.index))
                .is_some_and(|(a, b)| a.value.to_bits() == b.value.to_bits())
    };
    let depth = |c: &Cut| c.log_steps.0.saturating_sub(c.log_steps.1) as f64;
    let steps: Vec<&Cut> = log
        .cuts
        .iter()
        .filter(|c| c.marker.is_none() && back(c))
        .collect();
    let pervasive = steps.len() > (p.len() / 20).max(3);
    let mut depths: Vec<f64> = steps.iter().map(|c| depth(c)).collect();
    depths.sort_by(f64::total_cmp);
    let shallow = depths.get(depths.len() * 9 / 10).copied().unwrap_or(0.0) * 2.0;
    // A shallow cut another cut follows at once (a writer's lag just before a resume) is one too.
    let cut_follows = |c: &Cut| {
        let next = steps.partition_point(|n| n.index <= c.index);
        steps.get(next).is_some_and(|n| n.index <= c.index + JITTER_PASS)
    };
    let jitter = |c: &Cut| {
        pervasive && c.marker.is_none() && back(c) && depth(c) <= shallow && (passes(c) || cut_follows(c))
    };
    log.cuts
        .iter()
        .filter(|c| c.marker != Some(Marker::LrRestart) || !warm)
        .filter(|c| c.marker.is_some() || !(duplicate(c) || jitter(c)))
        .copied()
        .collect()
}

/// True when the log's LR restarts (`log` is the LR's) are a warm-restart schedule, not
/// resumes: there are several, no cycle peaks higher than the one before (a schedule restarts at
/// its peak, or a decayed one), and their cycles follow one law — equal (cosine with restarts)
/// or each an integer multiple of the one before (SGDR's `T_mult`). A job resumed several times
/// with a recomputed schedule restarts at whatever steps it died at, at whatever LR its new
/// schedule gives.
fn warm_restarts(log: &LogOrder) -> bool {
    let cuts: Vec<usize> = log
        .cuts
        .iter()
        .filter(|c| c.marker == Some(Marker::LrRestart))
        .map(|c| c.index)
        .collect();
    let starts: Vec<f64> = cuts
        .iter()
        .filter_map(|&i| log.points.get(i))
        .map(|p| p.step as f64)
        .collect();
    if starts.len() < 2 {
        return false;
    }
    let bounds: Vec<usize> = std::iter::once(0).chain(cuts).chain([log.points.len()]).collect();
    let peaks: Vec<f64> = bounds
        .windows(2)
        .map(|w| {
            log.points
                .get(w[0]..w[1])
                .unwrap_or_default()
                .iter()
                .map(|p| p.value)
                .fold(0.0, f64::max)
        })
        .collect();
    if peaks.windows(2).any(|w| w[1] > PEAK_SLACK * w[0]) {
        return false;
    }
    // The cycles between restarts; the first cycle (which may hold a warmup) only when there is
    // no second one to compare with.
    let mut periods: Vec<f64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    if periods.len() < 2 {
        let first = log.points.first().map_or(0.0, |p| p.step as f64);
        periods.insert(0, starts[0] - first);
    }
    let ratios: Vec<f64> = periods.windows(2).map(|w| w[1] / w[0].max(1.0)).collect();
    let law = median(&ratios).unwrap_or(1.0).round();
    // Restarts are seen at logged steps only: a cycle may be off by a log interval at each end.
    let steps: Vec<u64> = log.points.iter().map(|p| p.step).collect();
    let gap = median_gap(&steps);
    law >= 1.0
        && periods.windows(2).all(|w| {
            let predicted = law * w[0];
            (w[1] - predicted).abs() <= CYCLE_SLACK * predicted + 2.0 * gap * (1.0 + law)
        })
}
