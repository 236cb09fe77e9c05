//! Hugging Face `trainer_state.json` (`log_history`), with bare NaN/Infinity tokens.

use std::path::Path;

use serde_json::Value;

use super::json_tolerant::{parse_tolerant, value_f64};
use super::plan::Plan;
use super::{ReadError, read_text, to_step};
use crate::series::{Marker, Partial, RawRun};

/// Reads a trainer_state.json.
pub fn read(path: &Path) -> Result<RawRun, ReadError> {
    let text = read_text(path)?;
    let v = parse_tolerant(&text).map_err(|e| ReadError::Parse {
        path: path.to_path_buf(),
        line: e.line(),
        field: "json".to_string(),
        reason: e.to_string(),
    })?;
    let Some(history) = v.get("log_history").and_then(Value::as_array) else {
        return Err(ReadError::Parse {
            path: path.to_path_buf(),
            line: 1,
            field: "log_history".to_string(),
            reason: "missing or not an array".to_string(),
        });
    };
    // A checkpoint's state is the output directory's run, whichever checkpoint holds it.
    let folder = path.parent();
    let run_dir = folder.filter(|f| {
        f.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("checkpoint-"))
    });
    let name = run_dir
        .and_then(Path::parent)
        .or(folder)
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trainer_state".to_string());
    let mut run = RawRun::new(name, path.display().to_string(), "hf_trainer_state");
    run.hints.total_steps = v.get("max_steps").and_then(Value::as_u64).filter(|s| *s > 0);
    if let Some(b) = v.get("train_batch_size").and_then(super::context::json_scalar) {
        run.hints
            .setup
            .absorb("train_batch_size", &b, "trainer_state.json");
    }
    let mut ended = false;
    // The last entry's step and epoch: an epoch that goes back while the steps go on marks a
    // job launched again into the same state (or a streamed dataset's epoch counting anew: the
    // resume rule judges the boundary by its values).
    let mut plan: Option<Plan> = None;
    // Entries whose step is no step count: how many, and the first.
    let mut odd: Option<(usize, f64, usize)> = None;
    for (i, entry) in history.iter().enumerate() {
        let Some(obj) = entry.as_object() else {
            continue;
        };
        let Some(step) = obj.get("step").and_then(value_f64) else {
            continue;
        };
        if !is_step_count(step) {
            odd.get_or_insert((i, step, 0)).2 += 1;
            continue;
        }
        let step = to_step(step);
        // The closing summary entry carries the run-average `train_loss`: not a curve point.
        let summary = obj.contains_key("train_runtime") || obj.contains_key("total_flos");
        if ended && !summary {
            // Training went on after a run's closing summary: a new segment.
            run.mark_segment(Some(Marker::RunSummary), None);
        }
        ended = summary;
        let next = Plan {
            step,
            total: None,
            epoch: obj
                .get("epoch")
                .and_then(value_f64)
                .or(plan.and_then(|p| p.epoch)),
        };
        if plan.is_some_and(|p| p.relaunched(next)) {
            run.mark_segment(Some(Marker::EpochRestart), None);
        }
        plan = Some(next);
        for (k, val) in obj {
            if summary && k == "train_loss" {
                continue;
            }
            if let Some(x) = value_f64(val) {
                run.push(k, step, x);
            }
        }
    }
    if let Some((first, x, n)) = odd {
        run.hints.partial.push(Partial {
            file: path.display().to_string(),
            at: format!("log_history[{first}]"),
            what: format!(
                "step {x} is no step count (a whole number from 0 to 2^53): {n} entr{} like it \
                 left out",
                if n == 1 { "y" } else { "ies" }
            ),
        });
    }
    Ok(run)
}

/// Whether a logged step is a step count: whole, from 0 to 2^53 (beyond, a float no longer
/// holds every whole number).
fn is_step_count(x: f64) -> bool {
    x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x <= 9_007_199_254_740_992.0
}
