//! Files that appear only when complete: written under a temporary name, forced to disk, renamed
//! into place; and the cleanup of the temporaries a killed writer left.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use tempfile::NamedTempFile;

use crate::error::{FsError, Result};

/// The temporary name's start and end: `.contrai-XXXXXX.tmp`.
const TMP_PREFIX: &str = ".contrai-";
const TMP_SUFFIX: &str = ".tmp";

/// A file written under a temporary name beside its destination, renamed into place on commit.
///
/// Dropped without commit (error, Ctrl-C unwinding), the temporary file is removed and the
/// destination keeps whatever it held before.
#[derive(Debug)]
pub struct AtomicFile {
    tmp: NamedTempFile,
    dest: PathBuf,
}

impl AtomicFile {
    /// Starts a file that will become `dest`.
    pub fn create(dest: impl Into<PathBuf>) -> Result<AtomicFile> {
        let dest = dest.into();
        let dir = dest
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| FsError::io(dir, e))?;
        let mut builder = tempfile::Builder::new();
        builder.prefix(TMP_PREFIX).suffix(TMP_SUFFIX);
        // Like any other file: 0666 less the umask (tempfile's default is private, 0600).
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
        let tmp = builder.tempfile_in(dir).map_err(|e| FsError::io(dir, e))?;
        Ok(AtomicFile { tmp, dest })
    }

    /// The temporary file's current path (readable before commit).
    pub fn temp_path(&self) -> &Path {
        self.tmp.path()
    }

    /// The final path.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// A second handle on the temporary file, for writers that own their file.
    pub fn handle(&self) -> Result<File> {
        self.tmp
            .as_file()
            .try_clone()
            .map_err(|e| FsError::io(&self.dest, e))
    }

    /// Flushes to disk and renames into place.
    pub fn commit(self) -> Result<()> {
        let dest = self.dest;
        self.tmp.as_file().sync_all().map_err(|e| FsError::io(&dest, e))?;
        self.tmp.persist(&dest).map_err(|e| FsError::io(&dest, e.error))?;
        if let Some(dir) = dest.parent().filter(|p| !p.as_os_str().is_empty())
            && let Ok(d) = File::open(dir)
        {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// Removes the temporary files of [`AtomicFile`]s that were never committed (a writer killed
/// mid-write) in `dir` and its subdirectories down to `depth` levels; nothing else is touched.
/// Call it only while holding the directory's [`crate::DirLock`]: a live writer's file looks the
/// same. Returns the files removed.
pub fn remove_leftovers(dir: &Path, depth: usize) -> Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(removed);
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else { continue };
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if kind.is_file() && name.starts_with(TMP_PREFIX) && name.ends_with(TMP_SUFFIX) {
            std::fs::remove_file(&path).map_err(|e| FsError::io(&path, e))?;
            removed.push(path);
        } else if kind.is_dir() && depth > 0 {
            removed.extend(remove_leftovers(&path, depth - 1)?);
        }
    }
    removed.sort();
    Ok(removed)
}

/// Swaps two paths in one step (`renameat2` with `RENAME_EXCHANGE`): each then holds what the
/// other held, and no moment exists when either is missing. `Ok(false)` where the system or the
/// file system cannot (then nothing changed).
pub fn exchange(a: &Path, b: &Path) -> Result<bool> {
    #[cfg(target_os = "linux")]
    {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(|e| FsError::io(p, e.into()));
        let (ca, cb) = (c(a)?, c(b)?);
        // SAFETY: both are valid NUL-terminated paths, relative to the working directory.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                ca.as_ptr(),
                libc::AT_FDCWD,
                cb.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        if rc == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) => Ok(false),
            _ => Err(FsError::io(b, e)),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (a, b);
        Ok(false)
    }
}

/// Forces a folder's entries (renames, new files) to disk.
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Puts a finished file or folder `tmp` — written beside `dest`, on its file system — in `dest`'s
/// place: every file in it forced to disk, then one rename (a folder swapped with the old one by
/// [`exchange`], the old removed after), the parent folder synced. A crash at any moment leaves
/// the old `dest` or the new one, whole; only where the system cannot swap folders is the old one
/// moved aside first (`.<name>.contrai-aside`), a crash then leaving it there.
pub fn put_in_place(tmp: &Path, dest: &Path) -> Result<()> {
    sync_tree(tmp)?;
    let parent = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let rename = |from: &Path, to: &Path| std::fs::rename(from, to).map_err(|e| FsError::io(to, e));
    if !dest.is_dir() || !tmp.is_dir() {
        rename(tmp, dest)?;
        sync_dir(parent);
        return Ok(());
    }
    let old = if exchange(tmp, dest)? {
        tmp.to_path_buf()
    } else {
        let name = dest.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
        let aside = parent.join(format!(".{name}.contrai-aside"));
        rename(dest, &aside)?;
        rename(tmp, dest)?;
        aside
    };
    sync_dir(parent);
    std::fs::remove_dir_all(&old).map_err(|e| FsError::io(&old, e))
}

/// Forces a file, or every file under a folder and the folders themselves, to disk.
fn sync_tree(path: &Path) -> Result<()> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| FsError::io(path, e))?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).map_err(|e| FsError::io(path, e))? {
            sync_tree(&entry.map_err(|e| FsError::io(path, e))?.path())?;
        }
        sync_dir(path);
    } else if meta.is_file() {
        File::open(path)
            .and_then(|f| f.sync_all())
            .map_err(|e| FsError::io(path, e))?;
    }
    Ok(())
}

/// Writes `bytes` to `dest` atomically.
pub fn write_atomic(dest: impl Into<PathBuf>, bytes: &[u8]) -> Result<()> {
    let mut f = AtomicFile::create(dest)?;
    let dest = f.dest.clone();
    f.tmp.write_all(bytes).map_err(|e| FsError::io(&dest, e))?;
    f.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_or_a_file_put_in_place_replaces_the_old_whole() {
        let root = tempfile::tempdir().unwrap();
        let dest = root.path().join("export");
        for (i, files) in [&["a", "b"][..], &["c"][..]].iter().enumerate() {
            let tmp = root.path().join(format!(".export.{i}"));
            std::fs::create_dir(&tmp).unwrap();
            for f in *files {
                std::fs::write(tmp.join(f), f).unwrap();
            }
            put_in_place(&tmp, &dest).unwrap();
            assert!(!tmp.exists());
        }
        let mut names: Vec<String> = std::fs::read_dir(&dest)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["c"], "the old folder's files are gone with it");
        let listing: Vec<_> = std::fs::read_dir(root.path()).unwrap().collect();
        assert_eq!(listing.len(), 1, "nothing left beside it");
        let file = root.path().join("model.gguf");
        std::fs::write(&file, "old").unwrap();
        let tmp = root.path().join(".model.gguf.tmp");
        std::fs::write(&tmp, "new").unwrap();
        put_in_place(&tmp, &file).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "new");
        assert!(!tmp.exists());
    }

    #[cfg(unix)]
    #[test]
    fn atomic_files_get_the_same_mode_as_any_other_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain.txt");
        std::fs::write(&plain, b"x").unwrap();
        let atomic = dir.path().join("recipe.toml");
        write_atomic(&atomic, b"x").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&atomic), mode(&plain), "the umask decides, as for any file");
    }

    #[test]
    fn two_folders_swap_in_one_step() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        std::fs::write(a.join("x"), b"from a").unwrap();
        std::fs::write(b.join("y"), b"from b").unwrap();
        if exchange(&a, &b).unwrap() {
            assert_eq!(std::fs::read(b.join("x")).unwrap(), b"from a");
            assert_eq!(std::fs::read(a.join("y")).unwrap(), b"from b");
        } else {
            assert!(a.join("x").exists() && b.join("y").exists(), "nothing changed");
        }
    }

    #[test]
    fn leftovers_are_only_our_own_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("data/deep/deeper")).unwrap();
        let ours = [d.join(".contrai-a1B2c3.tmp"), d.join("data/.contrai-x.tmp")];
        let theirs = [
            d.join("notes.tmp"),
            d.join(".other-x.tmp"),
            d.join(".contrai-x.tmp.bak"),
            d.join("train.jsonl"),
            d.join("data/deep/deeper/.contrai-too-deep.tmp"),
        ];
        for p in ours.iter().chain(&theirs) {
            std::fs::write(p, b"x").unwrap();
        }
        // A directory named like a temporary file is not one.
        std::fs::create_dir(d.join(".contrai-dir.tmp")).unwrap();
        let removed = remove_leftovers(d, 1).unwrap();
        assert_eq!(removed, {
            let mut v = ours.to_vec();
            v.sort();
            v
        });
        assert!(ours.iter().all(|p| !p.exists()));
        assert!(theirs.iter().all(|p| p.exists()));
        assert!(d.join(".contrai-dir.tmp").is_dir());
    }
}
