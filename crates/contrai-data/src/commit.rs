//! A split committed whole: written into a folder beside its target and put in place by one
//! rename, so that whenever the process stops — an error, Ctrl-C, SIGKILL, a power cut — the target
//! holds the old split or the new one, never a mix of the two, and a failed split leaves nothing.
//!
//! | step | what a crash there leaves |
//! | --- | --- |
//! | writing `.<name>.contrai-XXXXXX.tmp/` | the old split; the temporary folder, removed by the next split |
//! | the new folder swapped with the old (`renameat2(RENAME_EXCHANGE)`) | the new split; the old one in the temporary folder, removed next time |
//! | where the system cannot swap: old moved to `.<name>.contrai-aside`, new moved in | the old split, put back by the next split |
//! | the old one removed, or kept as `<name>.prev` | the new split |

use std::path::{Path, PathBuf};
use std::time::Duration;

use contrai_base::{DirLock, exchange, sync_dir};

use crate::error::{DataError, Result};

/// What happens to a split already at the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Existing {
    /// It is kept, and the new split refused (naming its manifest).
    #[default]
    Refuse,
    /// It is replaced once the new split is complete.
    Replace,
    /// It is replaced, and kept as `<out>.prev`.
    KeepPrevious,
}

/// The manifest that makes a folder a split.
const MANIFEST: &str = "manifest.json";
/// Milliseconds to wait between the commit's steps (`CONTRAI_SLOW_COMMIT_MS`): only for tests
/// that kill a split while it commits.
const SLOW_COMMIT: &str = "CONTRAI_SLOW_COMMIT_MS";

/// A split being written beside its target.
#[derive(Debug)]
pub struct Staging {
    target: PathBuf,
    dir: PathBuf,
    existing: Existing,
    committed: bool,
    /// What an interrupted earlier split left, and what became of it.
    pub notes: Vec<String>,
    _lock: DirLock,
}

impl Staging {
    /// Takes the target's lock, repairs what an interrupted split left, checks what the target
    /// holds against `existing`, and makes the folder the split is written into.
    pub fn open(target: &Path, existing: Existing) -> Result<Staging> {
        let lock = DirLock::beside(target)?;
        let parent = parent_of(target);
        let name = name_of(target);
        let mut notes = recover(target, &parent, &name)?;
        check(target, existing)?;
        let dir = tempfile::Builder::new()
            .prefix(&format!(".{name}.contrai-"))
            .suffix(".tmp")
            .tempdir_in(&parent)
            .map_err(|e| DataError::io(&parent, e))?
            .keep();
        notes.retain(|n| !n.is_empty());
        Ok(Staging {
            target: target.to_path_buf(),
            dir,
            existing,
            committed: false,
            notes,
            _lock: lock,
        })
    }

    /// The folder the split's files are written into.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Puts the written split in place of the target in one rename, then removes the old split
    /// (or keeps it as `<target>.prev`). The files in it must already be on disk.
    pub fn commit(mut self) -> Result<()> {
        sync_dir(&self.dir);
        let parent = parent_of(&self.target);
        pause();
        if !self.target.exists() || is_empty_dir(&self.target) {
            std::fs::rename(&self.dir, &self.target).map_err(|e| DataError::io(&self.target, e))?;
            self.committed = true;
            sync_dir(&parent);
            return Ok(());
        }
        // The old split ends up at `old`.
        let old = if exchange(&self.dir, &self.target)? {
            self.dir.clone()
        } else {
            let aside = parent.join(format!(".{}.contrai-aside", name_of(&self.target)));
            std::fs::rename(&self.target, &aside).map_err(|e| DataError::io(&self.target, e))?;
            sync_dir(&parent);
            pause();
            std::fs::rename(&self.dir, &self.target).map_err(|e| DataError::io(&self.target, e))?;
            aside
        };
        self.committed = true;
        sync_dir(&parent);
        pause();
        match self.existing {
            Existing::KeepPrevious => {
                let prev = previous(&self.target);
                if prev.join(MANIFEST).is_file() {
                    std::fs::remove_dir_all(&prev).map_err(|e| DataError::io(&prev, e))?;
                }
                std::fs::rename(&old, &prev).map_err(|e| DataError::io(&prev, e))?;
            }
            _ => std::fs::remove_dir_all(&old).map_err(|e| DataError::io(&old, e))?,
        }
        sync_dir(&parent);
        Ok(())
    }
}

impl Drop for Staging {
    /// A split that never committed leaves nothing behind.
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Where `<target>.prev` is.
pub fn previous(target: &Path) -> PathBuf {
    parent_of(target).join(format!("{}.prev", name_of(target)))
}

fn parent_of(target: &Path) -> PathBuf {
    target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

fn name_of(target: &Path) -> String {
    target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Cleans what a split killed in an earlier run left beside `target`: an unfinished temporary
/// folder is removed; an old split moved aside is put back when the new one never arrived.
fn recover(target: &Path, parent: &Path, name: &str) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    let aside = parent.join(format!(".{name}.contrai-aside"));
    if aside.is_dir() {
        if target.exists() {
            std::fs::remove_dir_all(&aside).map_err(|e| DataError::io(&aside, e))?;
            notes.push(format!(
                "removed {}, the split an interrupted commit replaced",
                aside.display()
            ));
        } else {
            std::fs::rename(&aside, target).map_err(|e| DataError::io(target, e))?;
            notes.push(format!(
                "put back {}, which an interrupted split had moved aside",
                target.display()
            ));
        }
    }
    let prefix = format!(".{name}.contrai-");
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Ok(notes);
    };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let file = file.to_string_lossy();
        if file.starts_with(&prefix) && file.ends_with(".tmp") && entry.path().is_dir() {
            std::fs::remove_dir_all(entry.path()).map_err(|e| DataError::io(entry.path(), e))?;
            notes.push(contrai_base::lock::removed_note(&entry.path()));
        }
    }
    Ok(notes)
}

/// What may be at the target: nothing, an empty folder, or a split when it may be replaced.
fn check(target: &Path, existing: Existing) -> Result<()> {
    if !target.exists() {
        return Ok(());
    }
    if !target.is_dir() {
        return Err(DataError::Output {
            path: target.to_path_buf(),
            message: "is a file, not a folder: give --out a new or empty folder".into(),
        });
    }
    if is_empty_dir(target) {
        return Ok(());
    }
    let manifest = target.join(MANIFEST);
    if !manifest.is_file() {
        let first = std::fs::read_dir(target)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .unwrap_or_default();
        return Err(DataError::Output {
            path: target.to_path_buf(),
            message: format!(
                "holds files but no {MANIFEST} (e.g. `{first}`), so it is not a split: nothing there is replaced; give --out a new or empty folder"
            ),
        });
    }
    if existing == Existing::Refuse {
        return Err(DataError::Output {
            path: manifest,
            message: "a split is already there: pass --force to replace it once the new one is complete (--keep-previous keeps it as <out>.prev), or choose another --out".into(),
        });
    }
    Ok(())
}

fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none())
}

/// The wait between commit steps that tests ask for.
fn pause() {
    if let Some(ms) = std::env::var(SLOW_COMMIT)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
}
