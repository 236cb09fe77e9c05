//! The record the PyTorch engine keeps beside a checkpoint's tensors — its `state.json`, and the
//! record a framework's own checkpoint carries (Hugging Face's `contrai.json`, Lightning's
//! callback state): the counters, the journals' lengths, whether the adapters were merged, and
//! the conductor's state. Typed here once; `protocol.py` is generated from it and `_core` reads
//! it back, so a damaged record is refused naming its field.

use serde::{Deserialize, Serialize};

use crate::error::{ConductorError, Result};
use crate::state::State;

/// The record's format: 4, this type. Still read: 3 and 2 (`state.json` of the same fields before
/// the type; 2 with the files' sums inside it) and 1 (the record a framework's checkpoint carried).
pub const RECORD_FORMAT: u32 = 4;
/// The formats [`CheckpointRecord::parse`] reads.
pub const READ_FORMATS: [u32; 4] = [1, 2, 3, RECORD_FORMAT];

/// What a PyTorch engine's checkpoint keeps beside its tensors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CheckpointRecord {
    /// The record's format ([`RECORD_FORMAT`] when written).
    pub format: u32,
    /// Optimizer steps done.
    pub step: u64,
    /// Training samples seen.
    pub samples: u64,
    /// Bytes of `metrics.jsonl` at this step.
    pub metrics_len: u64,
    /// Bytes of `decisions.jsonl` at this step.
    pub decisions_len: u64,
    /// Bytes of `quarantine.jsonl` at this step (0: none yet).
    #[serde(default)]
    pub quarantine_len: u64,
    /// Steps that failed or that rollbacks took back, so far.
    #[serde(default)]
    pub lost_steps: u64,
    /// Whether a LoRA job's adapters had been merged into their weights.
    #[serde(default)]
    pub merged: bool,
    /// The conductor's state at this step.
    pub conductor: State,
    /// Parameters left out of the checkpoint's weights, frozen when it was written (`state.json`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frozen: Vec<String>,
    /// The LR the next step runs at (a framework's record, which a resume checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_lr: Option<f64>,
}

impl CheckpointRecord {
    /// The record in `value` (its serde form), read from `source`: a format this version does not
    /// read, or a field missing or of another type, is an error naming `source` and the field.
    pub fn parse(value: serde_json::Value, source: &str) -> Result<CheckpointRecord> {
        let format = value.get("format").and_then(serde_json::Value::as_u64);
        match format {
            Some(f) if READ_FORMATS.contains(&(f as u32)) => {}
            _ => {
                return Err(ConductorError::Record(format!(
                    "{source}: field `format` is {}; this Contrai reads a checkpoint record of format {}",
                    format.map_or("missing".into(), |f| f.to_string()),
                    READ_FORMATS.map(|f| f.to_string()).join(", ")
                )));
            }
        }
        serde_path_to_error::deserialize(value)
            .map_err(|e| ConductorError::Record(format!("{source}: field `{}`: {}", e.path(), e.inner())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(format: u32) -> serde_json::Value {
        let conductor = serde_json::to_value(State::fresh(contrai_recipe::Phase::Validate)).unwrap();
        serde_json::json!({"format": format, "step": 40, "samples": 1280, "metrics_len": 900,
                           "decisions_len": 120, "merged": true, "conductor": conductor,
                           "order": [{"epoch": 1}]})
    }

    #[test]
    fn every_format_still_read_parses_and_others_are_refused_by_name() {
        for f in READ_FORMATS {
            let r = CheckpointRecord::parse(record(f), "ckpt/state.json").unwrap();
            assert_eq!((r.step, r.merged, r.lost_steps, r.frozen.len()), (40, true, 0, 0));
        }
        let e = CheckpointRecord::parse(record(5), "ckpt/state.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ckpt/state.json: field `format` is 5") && e.contains("1, 2, 3, 4"),
            "{e}"
        );
    }

    #[test]
    fn a_damaged_field_is_named_with_its_path() {
        let mut v = record(RECORD_FORMAT);
        v["conductor"]["step"] = serde_json::json!("forty");
        let e = CheckpointRecord::parse(v, "contrai.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("contrai.json: field `conductor.step`"), "{e}");
        let mut v = record(RECORD_FORMAT);
        v.as_object_mut().unwrap().remove("samples");
        let e = CheckpointRecord::parse(v, "contrai.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("samples"), "{e}");
    }
}
