//! `run.json`: the version of the run-directory format and who wrote the run. A reader meeting
//! another version refuses it and says which it found.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Result, RunDir, RunError, read_json_if, write_json};

/// The format this code reads and writes. Runs written before `run.json` existed have the same
/// layout and count as this version.
pub const FORMAT: u32 = 1;

/// `run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFormat {
    /// The run-directory format.
    pub format: u32,
    /// The program that wrote the run (`contrai 0.1.0 (burn)`, `contrai-py 0.1.0 (transformers)`).
    pub writer: String,
}

impl RunFormat {
    /// Writes `run.json` for a new run, unless one is there already (a resumed run keeps it).
    pub fn stamp(run: &RunDir, writer: &str) -> Result<()> {
        let path = run.format();
        if path.is_file() {
            return Self::check(run);
        }
        write_json(
            &path,
            &RunFormat {
                format: FORMAT,
                writer: writer.to_string(),
            },
        )
    }

    /// Refuses a run directory written in another format version.
    pub fn check(run: &RunDir) -> Result<()> {
        check_file(&run.format())
    }
}

fn check_file(path: &Path) -> Result<()> {
    match read_json_if::<RunFormat>(path)? {
        Some(f) if f.format != FORMAT => Err(RunError::Version {
            path: path.to_path_buf(),
            found: f.format,
            expected: FORMAT,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_version_is_refused_with_the_version_found() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::new(dir.path());
        RunFormat::check(&run).unwrap();
        RunFormat::stamp(&run, "test").unwrap();
        RunFormat::check(&run).unwrap();
        std::fs::write(run.format(), r#"{"format": 7, "writer": "future"}"#).unwrap();
        let e = RunFormat::check(&run).unwrap_err().to_string();
        assert!(e.contains("format 7") && e.contains("format 1"), "{e}");
    }
}
