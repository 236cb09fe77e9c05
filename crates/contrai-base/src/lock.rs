//! One writer per directory: an exclusive lock on a directory Contrai writes into (a run, a split's
//! output), held for the whole command and released by the operating system when the process
//! ends, however it ends. Taking it also clears what an earlier writer killed mid-write left.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::atomic::remove_leftovers;
use crate::error::{FsError, Result};

/// The lock file inside a locked directory.
pub const LOCK_FILE: &str = ".contrai.lock";

/// How deep below the locked directory leftovers are looked for (a run's `data/`, `final/` …).
const LEFTOVER_DEPTH: usize = 2;

/// An exclusive lock on a directory, held until dropped.
#[derive(Debug)]
pub struct DirLock {
    file: File,
    path: PathBuf,
    removed: Vec<PathBuf>,
}

impl Drop for DirLock {
    /// Leaves the directory as it was: the lock file goes while the lock is still held.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

/// Whether the open `file` is still the one at `path`.
#[cfg(unix)]
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Elsewhere an open file cannot be unlinked, so it is still the one at `path`.
#[cfg(not(unix))]
fn same_file(_: &File, _: &Path) -> bool {
    true
}

impl DirLock {
    /// Locks `dir` (created if missing) for this process, or says which process holds it; then
    /// removes the temporary files an interrupted writer left there.
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        std::fs::create_dir_all(dir).map_err(|e| FsError::io(dir, e))?;
        let mut lock = DirLock::at(dir.join(LOCK_FILE), dir)?;
        lock.removed = remove_leftovers(dir, LEFTOVER_DEPTH)?;
        Ok(lock)
    }

    /// Locks `target` — a folder that is replaced whole, so its lock cannot live inside it — by
    /// `.<name>.contrai.lock` beside it (its parent is created if missing). Nothing is cleaned.
    pub fn beside(target: &Path) -> Result<DirLock> {
        let parent = target
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(|e| FsError::io(parent, e))?;
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        DirLock::at(parent.join(format!(".{name}.contrai.lock")), target)
    }

    /// Locks the file at `path` for `dir`.
    fn at(path: PathBuf, dir: &Path) -> Result<DirLock> {
        let mut file = loop {
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|e| FsError::io(&path, e))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    return Err(FsError::Busy {
                        dir: dir.to_path_buf(),
                        holder: Holder::read(&mut file).describe(),
                    });
                }
                Err(TryLockError::Error(e)) => return Err(FsError::io(&path, e)),
            }
            // The holder before us unlinks the file as it lets go: a lock on a file no longer
            // at `path` guards nothing, so open the new one.
            if same_file(&file, &path) {
                break file;
            }
        };
        Holder::me().write(&mut file).map_err(|e| FsError::io(&path, e))?;
        Ok(DirLock {
            file,
            path,
            removed: Vec::new(),
        })
    }

    /// The leftover temporary files removed when the lock was taken.
    pub fn removed(&self) -> &[PathBuf] {
        &self.removed
    }
}

/// What to tell the user about a leftover removed when a lock was taken.
pub fn removed_note(path: &Path) -> String {
    format!("removed {}, left by an interrupted earlier write", path.display())
}

/// Who holds a lock: what the lock file says.
#[derive(Debug, Default)]
struct Holder {
    pid: Option<u32>,
    since: Option<u64>,
    command: Option<String>,
}

impl Holder {
    /// This process.
    fn me() -> Holder {
        let command = std::env::args()
            .map(|a| match a.contains(' ') {
                true => format!("'{a}'"),
                false => a,
            })
            .collect::<Vec<_>>()
            .join(" ");
        Holder {
            pid: Some(std::process::id()),
            since: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .ok()
                .map(|d| d.as_secs()),
            command: Some(command),
        }
    }

    /// Writes `pid`, start time and command line, one a line, over the file's old content.
    fn write(&self, file: &mut File) -> std::io::Result<()> {
        let text = format!(
            "pid {}\nsince {}\ncommand {}\n",
            self.pid.unwrap_or(0),
            self.since.unwrap_or(0),
            self.command.as_deref().unwrap_or("")
        );
        file.set_len(0)?;
        file.rewind()?;
        file.write_all(text.as_bytes())?;
        file.sync_all()
    }

    /// What the lock file says (fields it cannot read stay unknown).
    fn read(file: &mut File) -> Holder {
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        let mut h = Holder::default();
        for line in text.lines() {
            match line.split_once(' ') {
                Some(("pid", v)) => h.pid = v.parse().ok(),
                Some(("since", v)) => h.since = v.parse().ok(),
                Some(("command", v)) => h.command = Some(v.to_string()),
                _ => {}
            }
        }
        h
    }

    /// "process 123 (`contrai train …`), started 5 min ago".
    fn describe(&self) -> String {
        let mut s = match self.pid {
            Some(pid) => format!("process {pid}"),
            None => "another process".to_string(),
        };
        if let Some(c) = self.command.as_deref().filter(|c| !c.is_empty()) {
            s.push_str(&format!(" (`{c}`)"));
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if let Some(since) = self.since.filter(|&t| t > 0 && t <= now) {
            s.push_str(&format!(", started {} ago", ago(now - since)));
        }
        s
    }
}

/// A duration in words: "40 s", "12 min", "3 h 5 min".
fn ago(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min", secs / 60),
        _ => format!("{} h {} min", secs / 3600, secs % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_holder_and_the_first_drop_frees_it() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(dir.path()).unwrap();
        let err = DirLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(err.contains(&format!("process {}", std::process::id())), "{err}");
        assert!(err.contains("started 0 s ago") || err.contains("s ago"), "{err}");
        drop(first);
        assert!(
            !dir.path().join(LOCK_FILE).exists(),
            "the lock file goes with the lock"
        );
        DirLock::acquire(dir.path()).unwrap();
    }

    #[test]
    fn a_lock_beside_a_folder_leaves_the_folder_alone() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("split");
        let first = DirLock::beside(&target).unwrap();
        assert!(!target.exists(), "the folder is not made");
        assert!(dir.path().join(".split.contrai.lock").is_file());
        let err = DirLock::beside(&target).unwrap_err().to_string();
        assert!(err.contains("split: in use by"), "{err}");
        drop(first);
        assert!(!dir.path().join(".split.contrai.lock").exists());
    }

    #[test]
    fn durations_read_in_words() {
        assert_eq!(ago(42), "42 s");
        assert_eq!(ago(3 * 60 + 5), "3 min");
        assert_eq!(ago(2 * 3600 + 7 * 60), "2 h 7 min");
    }
}
