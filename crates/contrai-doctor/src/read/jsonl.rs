//! JSON lines: Contrai's metrics.jsonl, LLaMA-Factory's trainer_log.jsonl, any flat rows.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::json_tolerant::{parse_tolerant, value_f64};
use super::plan::Plan;
use super::{ReadError, STEP_KEYS, Stream, complete_lines, to_step};
use crate::series::{Marker, RawRun};

/// A JSONL log read line by line as it grows; a partial last line (still being written) waits.
pub struct Jsonl {
    path: PathBuf,
    /// Lines read so far.
    line: usize,
    uses_epoch: bool,
    any_step: bool,
    /// The last line's planned steps and epoch, to tell a job launched again.
    plan: Option<Plan>,
}

impl Jsonl {
    /// A reader at the start of `path`.
    pub fn new(path: &Path) -> Jsonl {
        Jsonl {
            path: path.to_path_buf(),
            line: 0,
            uses_epoch: false,
            any_step: false,
            plan: None,
        }
    }

    /// The run it reads into, named after the file.
    pub fn run(path: &Path) -> RawRun {
        let name = path
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        RawRun::new(name, path.display().to_string(), "jsonl")
    }

    fn parse_err(&self, field: &str, reason: String) -> ReadError {
        ReadError::Parse {
            path: self.path.clone(),
            line: self.line,
            field: field.to_string(),
            reason,
        }
    }

    fn row(&mut self, run: &mut RawRun, line: &str, last: bool) -> Result<(), ReadError> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(());
        }
        let v = match parse_tolerant(line) {
            Ok(v) => v,
            // A last line without its newline that does not parse is still being written.
            Err(_) if last => return Ok(()),
            Err(e) => return Err(self.parse_err("json", e.to_string())),
        };
        let Some(obj) = v.as_object() else {
            return Err(self.parse_err("row", "not a JSON object".to_string()));
        };
        self.record(run, obj)
    }

    /// Takes the next of the per-epoch records a loop saved in one JSON file, as the next line.
    pub(super) fn next_record(
        &mut self,
        run: &mut RawRun,
        obj: &serde_json::Map<String, Value>,
    ) -> Result<(), ReadError> {
        self.line += 1;
        self.record(run, obj)
    }

    /// Takes one record (a line's object, or one of the per-epoch records a loop saved in one
    /// JSON file): its step, its plan, its numbers.
    fn record(&mut self, run: &mut RawRun, obj: &serde_json::Map<String, Value>) -> Result<(), ReadError> {
        let mut step = STEP_KEYS.iter().find_map(|k| obj.get(*k).and_then(value_f64));
        if step.is_some() {
            self.any_step = true;
        } else if let Some(e) = obj.get("epoch").and_then(value_f64)
            && e.fract() == 0.0
        {
            // Whole epochs are an x-axis; fractional epochs are not (use the line index).
            self.uses_epoch = !self.any_step;
            step = Some(e);
        }
        let step = to_step(step.unwrap_or(self.line as f64));
        run.at_line(self.line);
        // A line that does not say (an evaluation row) keeps what the lines before said.
        let plan = Plan {
            step,
            total: obj
                .get("total_steps")
                .or_else(|| obj.get("max_steps"))
                .and_then(Value::as_u64)
                .or(self.plan.and_then(|p| p.total)),
            epoch: obj
                .get("epoch")
                .and_then(value_f64)
                .or(self.plan.and_then(|p| p.epoch)),
        };
        if self
            .plan
            .is_some_and(|p| p.evaluated_after(plan, obj.get("loss").and_then(value_f64).is_some()))
        {
            return Ok(());
        }
        if self.plan.is_some_and(|p| p.relaunched(plan)) {
            run.mark_segment(Some(Marker::Relaunch), None);
        }
        self.plan = Some(plan);
        if run.hints.total_steps.is_none() {
            run.hints.total_steps = plan.total;
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
            } else if let Some(inner) = val.as_object() {
                // A loop's metrics nested by role (`{"train": {"loss": …}, "val": {…}}`): one
                // level down, named as TensorBoard's tags are (`val/loss`).
                for (k2, v2) in inner {
                    if let Some(x) = value_f64(v2) {
                        run.push(&format!("{k}/{k2}"), step, x);
                    }
                }
            }
        }
        Ok(())
    }
}

impl Stream for Jsonl {
    fn feed(&mut self, run: &mut RawRun, data: &[u8], eof: bool) -> Result<usize, ReadError> {
        let used = complete_lines(data, eof);
        let text = String::from_utf8_lossy(&data[..used]);
        let unterminated = eof && !text.ends_with('\n');
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            self.line += 1;
            self.row(run, line, unterminated && i + 1 == lines.len())?;
        }
        Ok(used)
    }

    fn finish(&self, run: &mut RawRun) {
        if self.uses_epoch {
            run.hints.x_unit = crate::series::XUnit::Epoch;
        }
    }
}
