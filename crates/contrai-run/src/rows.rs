//! `metrics.jsonl`: one flat JSON object a line, any tool's JSONL reader can follow it; this
//! module is its typed form, written by the engines and read back by the report and on resume.

use std::collections::BTreeMap;

use contrai_recipe::Phase;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};

/// A training row, written after every optimizer step.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainRow {
    /// Optimizer steps done (1-based).
    pub step: u64,
    /// Phase of the step.
    pub phase: Phase,
    /// Training samples seen.
    pub samples: u64,
    /// Mean loss of the step's effective batch.
    #[serde(with = "crate::nonfinite")]
    #[cfg_attr(feature = "schema", schemars(with = "f64"))]
    pub train_loss: f32,
    /// Learning rate used by the step.
    #[serde(with = "crate::nonfinite")]
    #[cfg_attr(feature = "schema", schemars(with = "f64"))]
    pub lr: f64,
    /// Global gradient norm before clipping.
    #[serde(with = "crate::nonfinite")]
    #[cfg_attr(feature = "schema", schemars(with = "f64"))]
    pub grad_norm: f32,
    /// Effective batch of the step.
    pub batch_size: usize,
    /// Seconds of training so far (summed over resumed sessions).
    pub wall_s: f64,
}

/// An evaluation row, written at eval steps.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRow {
    /// Optimizer steps done.
    pub step: u64,
    /// Phase of the evaluation.
    pub phase: Phase,
    /// Mean validation loss.
    #[serde(with = "crate::nonfinite")]
    #[cfg_attr(feature = "schema", schemars(with = "f64"))]
    pub val_loss: f32,
    /// Validation accuracy in [0, 1].
    #[serde(with = "crate::nonfinite")]
    #[cfg_attr(feature = "schema", schemars(with = "f64"))]
    pub val_accuracy: f32,
}

/// A validate-phase row: the loss of the one batch being overfitted.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidateRow {
    /// Global step (validate takes the first steps).
    pub step: u64,
    /// Always `validate`.
    pub phase: Phase,
    /// Loss on the one batch.
    #[serde(with = "crate::nonfinite")]
    #[cfg_attr(feature = "schema", schemars(with = "f64"))]
    pub validate_loss: f32,
}

/// The sparsity of the pruned weights after the masks changed: overall and per module
/// (`sparsity/blocks.0.ffn`).
#[derive(Debug, Clone, PartialEq)]
pub struct SparsityRow {
    /// Global step.
    pub step: u64,
    /// Phase.
    pub phase: Phase,
    /// Share of zeros over all masked weights.
    pub overall: f64,
    /// Share of zeros of each masked module.
    pub modules: BTreeMap<String, f64>,
}

/// Key prefix of a module's sparsity.
const SPARSITY_PREFIX: &str = "sparsity/";

impl Serialize for SparsityRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Keys in sorted order, as the format's first writer (a sorted JSON map) put them.
        let mut m = s.serialize_map(Some(3 + self.modules.len()))?;
        m.serialize_entry("phase", &self.phase)?;
        m.serialize_entry("sparsity", &self.overall)?;
        for (module, share) in &self.modules {
            m.serialize_entry(&format!("{SPARSITY_PREFIX}{module}"), share)?;
        }
        m.serialize_entry("step", &self.step)?;
        m.end()
    }
}

/// One line of `metrics.jsonl`.
#[derive(Debug, Clone, PartialEq)]
pub enum MetricsRow {
    /// An optimizer step.
    Train(TrainRow),
    /// An evaluation on validation.
    Eval(EvalRow),
    /// A step of the validate phase's check.
    Validate(ValidateRow),
    /// The pruning masks' sparsity.
    Sparsity(SparsityRow),
}

impl MetricsRow {
    /// The row's step.
    pub fn step(&self) -> u64 {
        match self {
            MetricsRow::Train(r) => r.step,
            MetricsRow::Eval(r) => r.step,
            MetricsRow::Validate(r) => r.step,
            MetricsRow::Sparsity(r) => r.step,
        }
    }

    /// The row's phase.
    pub fn phase(&self) -> Phase {
        match self {
            MetricsRow::Train(r) => r.phase,
            MetricsRow::Eval(r) => r.phase,
            MetricsRow::Validate(r) => r.phase,
            MetricsRow::Sparsity(r) => r.phase,
        }
    }

    /// Reads one line; the error says which row was expected.
    pub fn parse(line: &str) -> Result<MetricsRow, String> {
        let map: Map = serde_json::from_str(line).map_err(|e| format!("not a JSON object: {e}"))?;
        MetricsRow::from_map(map)
    }

    /// The row a JSON object is, by the field that only it has.
    fn from_map(map: Map) -> Result<MetricsRow, String> {
        let typed = |what: &'static str| move |e: serde_json::Error| format!("{what} row: {e}");
        let value = || serde_json::Value::Object(map.clone());
        if map.contains_key("train_loss") {
            serde_json::from_value(value())
                .map(MetricsRow::Train)
                .map_err(typed("a training"))
        } else if map.contains_key("val_loss") {
            serde_json::from_value(value())
                .map(MetricsRow::Eval)
                .map_err(typed("an evaluation"))
        } else if map.contains_key("validate_loss") {
            serde_json::from_value(value())
                .map(MetricsRow::Validate)
                .map_err(typed("a validate"))
        } else if map.contains_key("sparsity") {
            sparsity(&map).map(MetricsRow::Sparsity)
        } else {
            Err("expected a row with train_loss, val_loss, validate_loss or sparsity".into())
        }
    }
}

/// A JSON object.
type Map = serde_json::Map<String, serde_json::Value>;

impl<'de> Deserialize<'de> for MetricsRow {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        MetricsRow::from_map(Map::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl Serialize for MetricsRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            MetricsRow::Train(r) => r.serialize(s),
            MetricsRow::Eval(r) => r.serialize(s),
            MetricsRow::Validate(r) => r.serialize(s),
            MetricsRow::Sparsity(r) => r.serialize(s),
        }
    }
}

/// A sparsity row from its JSON object.
fn sparsity(map: &Map) -> Result<SparsityRow, String> {
    let field = |k: &str| map.get(k).ok_or_else(|| format!("a sparsity row needs `{k}`"));
    let number = |k: &str, v: &serde_json::Value| v.as_f64().ok_or_else(|| format!("`{k}` is not a number"));
    let step = field("step")?
        .as_u64()
        .ok_or("`step` is not a non-negative integer")?;
    let phase = serde_json::from_value(field("phase")?.clone()).map_err(|e| format!("`phase`: {e}"))?;
    let overall = number("sparsity", field("sparsity")?)?;
    let mut modules = BTreeMap::new();
    for (k, v) in map {
        if let Some(module) = k.strip_prefix(SPARSITY_PREFIX) {
            modules.insert(module.to_string(), number(k, v)?);
        }
    }
    Ok(SparsityRow {
        step,
        phase,
        overall,
        modules,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_keep_the_spelling_of_the_format_and_parse_back() {
        let lines = [
            r#"{"step":3,"phase":"validate","validate_loss":0.5}"#,
            r#"{"step":31,"phase":"main","samples":32,"train_loss":0.69,"lr":0.00001,"grad_norm":1.5,"batch_size":32,"wall_s":0.25}"#,
            r#"{"step":80,"phase":"main","val_loss":0.4,"val_accuracy":0.875}"#,
            r#"{"phase":"contract","sparsity":0.25,"sparsity/blocks.0.attn":0.1,"sparsity/blocks.0.ffn":0.4,"step":90}"#,
        ];
        for line in lines {
            let row = MetricsRow::parse(line).unwrap();
            assert_eq!(serde_json::to_string(&row).unwrap(), line);
        }
        let MetricsRow::Sparsity(s) = MetricsRow::parse(lines[3]).unwrap() else {
            panic!()
        };
        assert_eq!(s.modules["blocks.0.ffn"], 0.4);
        assert_eq!(MetricsRow::parse(lines[1]).unwrap().phase(), Phase::Main);
    }

    #[test]
    fn a_diverged_evaluation_is_written_and_read_back() {
        let row = MetricsRow::Eval(EvalRow {
            step: 40,
            phase: Phase::Main,
            val_loss: f32::NAN,
            val_accuracy: 0.5,
        });
        let line = serde_json::to_string(&row).unwrap();
        assert_eq!(
            line,
            r#"{"step":40,"phase":"main","val_loss":"NaN","val_accuracy":0.5}"#
        );
        let MetricsRow::Eval(back) = MetricsRow::parse(&line).unwrap() else {
            panic!("{line}")
        };
        assert!(back.val_loss.is_nan());
        // What serde_json wrote before the words: `null`.
        let old = r#"{"step":2,"phase":"validate","validate_loss":null}"#;
        let MetricsRow::Validate(v) = MetricsRow::parse(old).unwrap() else {
            panic!()
        };
        assert!(v.validate_loss.is_nan());
    }

    #[test]
    fn a_bad_row_says_what_was_expected() {
        let e =
            MetricsRow::parse(r#"{"step":1,"phase":"main","val_loss":"x","val_accuracy":1}"#).unwrap_err();
        assert!(e.starts_with("an evaluation row"), "{e}");
        let e = MetricsRow::parse(r#"{"step":1,"phase":"mian","train_loss":1}"#).unwrap_err();
        assert!(e.contains("training"), "{e}");
        assert!(
            MetricsRow::parse(r#"{"step":1}"#)
                .unwrap_err()
                .contains("expected a row")
        );
    }
}
