//! `quarantine.jsonl`: the batches spike triage took out of training, one [`QuarantineEntry`] a
//! line — the step that spiked, its training rows (and their sample ids where the engine knows
//! them), the loss, the threshold it crossed and the cause the conductor found. Both engines write
//! it through [`QuarantineLog`]; the file exists only in runs that spiked.

use std::path::PathBuf;

use contrai_recipe::Phase;
use serde::{Deserialize, Serialize};

use crate::{JsonLines, Result, RunDir};

/// Why a batch spiked, as far as the conductor can tell.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::AsRefStr,
    strum::Display,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum SpikeCause {
    /// The first spike: its batch is skipped; the cause shows when its rows or other batches spike.
    Undetermined,
    /// Samples that spiked before spiked again: they leave the training set.
    Data,
    /// Other batches spiked after an earlier spike: the LR is cut.
    Optimisation,
}

/// One line of `quarantine.jsonl`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuarantineEntry {
    /// The step that spiked (rolled back).
    pub step: u64,
    /// Its phase.
    pub phase: Phase,
    /// The training rows of its batch, in the engine's numbering (empty: the engine cannot tell).
    pub rows: Vec<u64>,
    /// The sample ids of `rows`, in the same order (empty: the engine does not know them).
    #[serde(default)]
    pub ids: Vec<String>,
    /// The rows of `rows` that left the training set (a data cause).
    #[serde(default)]
    pub left: Vec<u64>,
    /// The step's training loss.
    pub loss: f32,
    /// The loss above which the step counted as a spike.
    pub threshold: f32,
    /// What the conductor made of it.
    pub cause: SpikeCause,
}

/// `quarantine.jsonl`, opened when the first entry is written (a run with no spike has none).
#[derive(Debug)]
pub struct QuarantineLog {
    path: PathBuf,
    file: Option<JsonLines>,
}

impl QuarantineLog {
    /// The run's quarantine journal, cut back to `keep` bytes when a checkpoint says how long it
    /// was (`None`: kept whole, appended to).
    pub fn open(run: &RunDir, keep: Option<u64>) -> Result<QuarantineLog> {
        let path = run.quarantine();
        let found = match path.try_exists() {
            Ok(found) => found,
            Err(e) => return Err(crate::RunError::io(&path, e)),
        };
        let file = match (found, keep) {
            (true, Some(n)) => Some(JsonLines::open(&path, n)?),
            (true, None) => {
                let len = std::fs::metadata(&path)
                    .map_err(|e| crate::RunError::io(&path, e))?
                    .len();
                Some(JsonLines::open(&path, len)?)
            }
            (false, _) => None,
        };
        Ok(QuarantineLog { path, file })
    }

    /// Appends an entry (the file created with the first).
    pub fn write(&mut self, entry: &QuarantineEntry) -> Result<()> {
        let file = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(JsonLines::open(&self.path, 0)?),
        };
        file.write(entry)
    }

    /// Bytes written so far (what a checkpoint records; 0 without a file).
    pub fn len(&self) -> u64 {
        self.file.as_ref().map_or(0, JsonLines::len)
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forces the entries to disk (before a checkpoint refers to them).
    pub fn sync(&self) -> Result<()> {
        self.file.as_ref().map_or(Ok(()), JsonLines::sync)
    }

    /// The entries of `quarantine.jsonl` (none without the file).
    pub fn read(run: &RunDir) -> Result<Vec<QuarantineEntry>> {
        let rows = crate::journal::read_rows(&run.quarantine())?;
        Ok(rows.into_iter().map(|(_, e)| e).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(step: u64, cause: SpikeCause) -> QuarantineEntry {
        QuarantineEntry {
            step,
            phase: Phase::Main,
            rows: vec![3, 7],
            ids: vec!["a".into(), "b".into()],
            left: if cause == SpikeCause::Data {
                vec![7]
            } else {
                Vec::new()
            },
            loss: 12.5,
            threshold: 1.25,
            cause,
        }
    }

    #[test]
    fn entries_are_lines_created_on_first_write_and_cut_back_to_a_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::new(dir.path());
        let mut q = QuarantineLog::open(&run, Some(0)).unwrap();
        assert!(q.is_empty() && !run.quarantine().exists(), "no spike, no file");
        q.write(&entry(40, SpikeCause::Undetermined)).unwrap();
        let keep = q.len();
        q.write(&entry(90, SpikeCause::Data)).unwrap();
        q.sync().unwrap();
        let text = std::fs::read_to_string(run.quarantine()).unwrap();
        let first = text.lines().next().unwrap();
        assert_eq!(
            first,
            r#"{"step":40,"phase":"main","rows":[3,7],"ids":["a","b"],"left":[],"loss":12.5,"threshold":1.25,"cause":"undetermined"}"#
        );
        assert_eq!(QuarantineLog::read(&run).unwrap()[1], entry(90, SpikeCause::Data));
        // Appending keeps what is there; a resume cuts back to its checkpoint's length.
        let q = QuarantineLog::open(&run, None).unwrap();
        assert_eq!(q.len(), text.len() as u64);
        QuarantineLog::open(&run, Some(keep)).unwrap();
        assert_eq!(
            QuarantineLog::read(&run).unwrap(),
            [entry(40, SpikeCause::Undetermined)]
        );
        assert_eq!(SpikeCause::Optimisation.to_string(), "optimisation");
    }
}
