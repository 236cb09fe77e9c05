//! JSON lines: Contrai's metrics.jsonl, LLaMA-Factory's trainer_log.jsonl, any flat rows.

use std::path::Path;

use serde_json::Value;

use super::json_tolerant::{parse_tolerant, value_f64};
use super::{ReadError, read_text, to_step};
use crate::series::RawRun;

const STEP_KEYS: [&str; 7] = [
    "step",
    "global_step",
    "current_steps",
    "iteration",
    "iter",
    "_step",
    "trainer/global_step",
];

/// Reads a JSONL file; a partial last line (still being written) is ignored.
pub fn read(path: &Path) -> Result<RawRun, ReadError> {
    let text = read_text(path)?;
    let name = path
        .file_stem()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut run = RawRun::new(name, path.display().to_string(), "jsonl");
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    let mut uses_epoch = false;
    let mut any_step = false;
    for (i, line) in lines.iter().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let v = match parse_tolerant(line) {
            Ok(v) => v,
            Err(_) if i + 1 == lines.len() && !complete => break,
            Err(e) => {
                return Err(ReadError::Parse {
                    path: path.to_path_buf(),
                    line: i + 1,
                    field: "json".to_string(),
                    reason: e.to_string(),
                });
            }
        };
        let Some(obj) = v.as_object() else {
            return Err(ReadError::Parse {
                path: path.to_path_buf(),
                line: i + 1,
                field: "row".to_string(),
                reason: "not a JSON object".to_string(),
            });
        };
        let mut step = STEP_KEYS.iter().find_map(|k| obj.get(*k).and_then(value_f64));
        if step.is_some() {
            any_step = true;
        } else if let Some(e) = obj.get("epoch").and_then(value_f64)
            && e.fract() == 0.0
        {
            // Whole epochs are an x-axis; fractional epochs are not (use the line index).
            uses_epoch = !any_step;
            step = Some(e);
        }
        let step = to_step(step.unwrap_or((i + 1) as f64));
        run.at_line(i + 1);
        if run.hints.total_steps.is_none() {
            run.hints.total_steps = obj
                .get("total_steps")
                .or_else(|| obj.get("max_steps"))
                .and_then(Value::as_u64);
        }
        // LLaMA-Factory's `trainer_log.jsonl` (`current_steps` and `total_steps` on each line):
        // every one of its stages trains a language model.
        if obj.contains_key("current_steps") && obj.contains_key("total_steps") {
            run.hints.task = crate::series::Task::LanguageModel;
            run.hints.task_source = Some("LLaMA-Factory's trainer_log.jsonl".into());
        }
        for (k, val) in obj {
            if let Some(x) = value_f64(val) {
                run.push(k, step, x);
            }
        }
    }
    if uses_epoch {
        run.hints.x_unit = crate::series::XUnit::Epoch;
    }
    Ok(run)
}
