//! The checkpoint envelope both engines write into, and the one answer to "how is a checkpoint
//! written and verified".
//!
//! A checkpoint is a directory under the run's `checkpoints/`: `step-NNNNNNNN` on the lifecycle's
//! schedule ([`Kind::Scheduled`], what rollbacks go back to) or `stop-NNNNNNNN` where a stopped
//! run stopped ([`Kind::Stop`], only a resume starts from it; the next scheduled checkpoint
//! removes it). An engine writes only its own files into a [`Pending`] checkpoint — the Burn
//! engine `model.bpk`, `optimizer.bpk`, `masks.json`; the PyTorch engine `model.pt`,
//! `optimizer.pt`, `masks.pt` — and its `state.json`; the envelope does the rest:
//!
//! | step | rule |
//! | --- | --- |
//! | write | every file into `.tmp-<name>/`, each forced to disk |
//! | seal | `SHA256SUMS` over every file (`sha256sum`'s format: `sha256sum -c SHA256SUMS` checks one by hand) |
//! | place | the directory renamed to `<name>` in one step; a checkpoint already there is set aside first and removed after, so a kill leaves the old one or the new one, never half |
//! | verify | a file is read only through [`Sealed`], which checks its sum; a checkpoint that fails is never loaded ([`latest`] passes over it) |
//! | keep | the newest `keep_last` scheduled checkpoints and the best ones; every stop checkpoint goes when a scheduled one is written ([`keep_last`]) |
//!
//! Old checkpoints still read: the Burn engine's format 3 is this layout; the PyTorch engine's
//! format 2 held its sums in `state.json` (`"sha256"`), which [`Sealed::open`] reads when there is
//! no `SHA256SUMS`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use contrai_base::sync_dir;
use sha2::{Digest, Sha256};

use crate::{Result, RunError};

/// The checksums of a checkpoint's files.
pub const SUMS: &str = "SHA256SUMS";
/// The engine's record: counters, journal lengths and the conductor's state.
pub const STATE: &str = "state.json";

/// Why a checkpoint was written, which decides its directory's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// On the lifecycle's schedule (`step-N`): what rollbacks go back to.
    Scheduled,
    /// Where a stopped run stopped (`stop-N`): only a resume starts from it.
    Stop,
}

impl Kind {
    /// The directory name's prefix.
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::Scheduled => "step-",
            Kind::Stop => "stop-",
        }
    }

    /// The directory name of step `step`'s checkpoint of this kind.
    pub fn dir_name(self, step: u64) -> String {
        format!("{}{step:08}", self.prefix())
    }
}

/// A checkpoint's file that is not what its envelope says.
fn corrupt(path: impl Into<PathBuf>, message: impl Into<String>) -> RunError {
    RunError::Corrupt {
        path: path.into(),
        message: message.into(),
    }
}

fn hex(digest: impl AsRef<[u8]>) -> String {
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of a file, read in blocks (a model's weights need not fit in memory twice).
fn file_sum(path: &Path) -> Result<String> {
    let mut f = File::open(path).map_err(|e| RunError::io(path, e))?;
    let mut digest = Sha256::new();
    let mut block = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut block).map_err(|e| RunError::io(path, e))?;
        if n == 0 {
            return Ok(hex(digest.finalize()));
        }
        digest.update(&block[..n]);
    }
}

fn sync_file(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| RunError::io(path, e))
}

/// A checkpoint being written: a temporary directory the engine fills, sealed and placed by
/// [`Pending::commit`]. Dropped without a commit, it stays a `.tmp-*` directory, which
/// [`discard_after`] removes.
#[derive(Debug)]
pub struct Pending {
    root: PathBuf,
    name: String,
    tmp: PathBuf,
    sums: BTreeMap<String, String>,
}

impl Pending {
    /// Starts the checkpoint of `step` of `kind` under `root` (a leftover temporary of the same
    /// name is cleared).
    pub fn begin(root: &Path, kind: Kind, step: u64) -> Result<Pending> {
        std::fs::create_dir_all(root).map_err(|e| RunError::io(root, e))?;
        let name = kind.dir_name(step);
        let tmp = root.join(format!(".tmp-{name}"));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| RunError::io(&tmp, e))?;
        }
        std::fs::create_dir(&tmp).map_err(|e| RunError::io(&tmp, e))?;
        Ok(Pending {
            root: root.to_path_buf(),
            name,
            tmp,
            sums: BTreeMap::new(),
        })
    }

    /// The directory the engine writes its files into.
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    /// Writes `bytes` as the file `name`, forced to disk, its sum taken from memory.
    pub fn add(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        let path = self.tmp.join(name);
        let io = |e| RunError::io(&path, e);
        let mut f = File::create(&path).map_err(io)?;
        f.write_all(bytes).map_err(io)?;
        f.sync_all().map_err(io)?;
        self.sums.insert(name.to_string(), hex(Sha256::digest(bytes)));
        Ok(())
    }

    /// Seals and places the checkpoint: the files the engine wrote itself forced to disk and
    /// summed, `SHA256SUMS` written, the directory renamed into place. Returns its directory.
    pub fn commit(mut self) -> Result<PathBuf> {
        for entry in std::fs::read_dir(&self.tmp).map_err(|e| RunError::io(&self.tmp, e))? {
            let entry = entry.map_err(|e| RunError::io(&self.tmp, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == SUMS || self.sums.contains_key(&name) || !entry.path().is_file() {
                continue;
            }
            sync_file(&entry.path())?;
            self.sums.insert(name, file_sum(&entry.path())?);
        }
        let sums: String = self.sums.iter().map(|(f, s)| format!("{s}  {f}\n")).collect();
        self.add(SUMS, sums.as_bytes())?;
        sync_dir(&self.tmp);
        let dest = self.root.join(&self.name);
        let old = self.root.join(format!(".tmp-old-{}", self.name));
        if dest.exists() {
            std::fs::rename(&dest, &old).map_err(|e| RunError::io(&dest, e))?;
        }
        std::fs::rename(&self.tmp, &dest).map_err(|e| RunError::io(&dest, e))?;
        sync_dir(&self.root);
        if old.exists() {
            std::fs::remove_dir_all(&old).map_err(|e| RunError::io(&old, e))?;
        }
        Ok(dest)
    }
}

/// Seals a checkpoint another program wrote in place (a Hugging Face `checkpoint-N`, a Lightning
/// `.ckpt`'s directory): `SHA256SUMS` over every file below `dir` (paths relative to it, `/`
/// between folders), written atomically, so that [`Sealed`] can verify it before a resume.
pub fn seal(dir: &Path) -> Result<PathBuf> {
    let mut sums = BTreeMap::new();
    sum_tree(dir, dir, &mut sums)?;
    let text: String = sums.iter().map(|(f, s)| format!("{s}  {f}\n")).collect();
    let path = dir.join(SUMS);
    let tmp = dir.join(format!(".tmp-{SUMS}"));
    let io = |e| RunError::io(&tmp, e);
    let mut f = File::create(&tmp).map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, &path).map_err(|e| RunError::io(&path, e))?;
    sync_dir(dir);
    Ok(path)
}

/// The sums of every file below `dir`, keyed by their path relative to `root`, each forced to disk.
fn sum_tree(root: &Path, dir: &Path, sums: &mut BTreeMap<String, String>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| RunError::io(dir, e))? {
        let path = entry.map_err(|e| RunError::io(dir, e))?.path();
        let rel = path.strip_prefix(root).unwrap_or(&path);
        let name = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        if path.is_dir() {
            sum_tree(root, &path, sums)?;
        } else if name != SUMS && !name.ends_with(&format!(".tmp-{SUMS}")) {
            sync_file(&path)?;
            sums.insert(name, file_sum(&path)?);
        }
    }
    Ok(())
}

/// Writes a whole checkpoint from files in memory (`state.json` among them); returns its
/// directory.
pub fn write(root: &Path, kind: Kind, step: u64, files: &[(&str, &[u8])]) -> Result<PathBuf> {
    let mut pending = Pending::begin(root, kind, step)?;
    for (name, bytes) in files {
        pending.add(name, bytes)?;
    }
    pending.commit()
}

/// A placed checkpoint and the sums its files must match; files are read through it only.
#[derive(Debug, Clone)]
pub struct Sealed {
    dir: PathBuf,
    sums: BTreeMap<String, String>,
    /// An old PyTorch checkpoint's envelope (format 2): sums from `state.json`, which has none.
    legacy: bool,
}

impl Sealed {
    /// Reads a checkpoint's envelope: `SHA256SUMS`, or the `"sha256"` of an old PyTorch
    /// checkpoint's `state.json` (format 2, whose `state.json` itself had no sum).
    pub fn open(dir: &Path) -> Result<Sealed> {
        let sums_path = dir.join(SUMS);
        let (sums, legacy) = match std::fs::read(&sums_path) {
            Ok(bytes) => (parse_sums(&sums_path, &bytes)?, false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (legacy_sums(dir)?, true),
            Err(e) => return Err(RunError::io(&sums_path, e)),
        };
        Ok(Sealed {
            dir: dir.to_path_buf(),
            sums,
            legacy,
        })
    }

    /// The checkpoint's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The files the envelope covers, by name.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.sums.keys().map(String::as_str)
    }

    /// Whether the envelope covers `name`.
    pub fn has(&self, name: &str) -> bool {
        self.sums.contains_key(name)
    }

    /// The bytes of `name`, checked against its sum.
    pub fn read(&self, name: &str) -> Result<Vec<u8>> {
        let want = self.want(name)?;
        let path = self.dir.join(name);
        let bytes = std::fs::read(&path).map_err(|e| RunError::io(&path, e))?;
        if hex(Sha256::digest(&bytes)) != want {
            return Err(mismatch(&path));
        }
        Ok(bytes)
    }

    /// `state.json`'s bytes, checked against its sum (unchecked only in an old PyTorch
    /// checkpoint, whose sums it holds itself).
    pub fn state(&self) -> Result<Vec<u8>> {
        if !self.legacy {
            return self.read(STATE);
        }
        let path = self.dir.join(STATE);
        std::fs::read(&path).map_err(|e| RunError::io(&path, e))
    }

    /// Checks every file against its sum, reading in blocks (for an engine that then loads the
    /// files itself).
    pub fn verify(&self) -> Result<()> {
        for (name, want) in &self.sums {
            let path = self.dir.join(name);
            if &file_sum(&path).map_err(|_| missing(&path))? != want {
                return Err(mismatch(&path));
            }
        }
        Ok(())
    }

    fn want(&self, name: &str) -> Result<&str> {
        self.sums
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| corrupt(&self.dir, format!("{SUMS} lists no {name}")))
    }
}

fn mismatch(path: &Path) -> RunError {
    corrupt(path, format!("does not match its SHA-256 in {SUMS}"))
}

fn missing(path: &Path) -> RunError {
    corrupt(
        path,
        "missing or unreadable, though the checkpoint's sums list it",
    )
}

fn parse_sums(path: &Path, bytes: &[u8]) -> Result<BTreeMap<String, String>> {
    let text = std::str::from_utf8(bytes).map_err(|_| corrupt(path, "not text"))?;
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let (sum, file) = line
                .split_once("  ")
                .ok_or_else(|| corrupt(path, format!("line {}: malformed `{line}`", i + 1)))?;
            Ok((file.to_string(), sum.to_string()))
        })
        .collect()
}

/// An old PyTorch checkpoint's sums, from its `state.json`'s `"sha256"` map.
fn legacy_sums(dir: &Path) -> Result<BTreeMap<String, String>> {
    let path = dir.join(STATE);
    let bytes =
        std::fs::read(&path).map_err(|_| corrupt(dir, format!("no {SUMS} and no readable {STATE}")))?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| corrupt(&path, e.to_string()))?;
    let Some(map) = value.get("sha256").and_then(|v| v.as_object()) else {
        return Err(corrupt(dir, format!("no {SUMS}, and {STATE} holds no sums")));
    };
    map.iter()
        .map(|(k, v)| match v.as_str() {
            Some(s) => Ok((k.clone(), s.to_string())),
            None => Err(corrupt(&path, format!("sha256.{k}: expected a hex string"))),
        })
        .collect()
}

/// Checkpoints of `kind` under `root`, oldest first.
pub fn list(root: &Path, kind: Kind) -> Vec<(u64, PathBuf)> {
    let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let step = name.strip_prefix(kind.prefix())?.parse::<u64>().ok()?;
            e.path().is_dir().then_some((step, e.path()))
        })
        .collect();
    out.sort();
    out
}

/// The newest checkpoint of `kinds` that `open` (given its step and directory) accepts (at one step, a scheduled one before a
/// stop one), with each newer one it refused and why.
pub fn latest<T, E>(
    root: &Path,
    kinds: &[Kind],
    open: impl FnMut(u64, &Path) -> std::result::Result<T, E>,
) -> (Option<T>, Vec<(u64, PathBuf, E)>) {
    latest_below(root, kinds, u64::MAX, open)
}

/// [`latest`] preferring the checkpoints of steps below `below` (a rollback that must not land
/// on the weights a step's update just made): the newest of those that `open` accepts, else the
/// newest of the rest; with each one tried before it and refused.
pub fn latest_below<T, E>(
    root: &Path,
    kinds: &[Kind],
    below: u64,
    mut open: impl FnMut(u64, &Path) -> std::result::Result<T, E>,
) -> (Option<T>, Vec<(u64, PathBuf, E)>) {
    let mut all: Vec<(u64, bool, PathBuf)> = kinds
        .iter()
        .flat_map(|&k| {
            list(root, k)
                .into_iter()
                .map(move |(s, d)| (s, k == Kind::Scheduled, d))
        })
        .collect();
    // Tried from the last: those below `below` after the rest, each group by step, and at one
    // step a scheduled checkpoint after a stop one.
    all.sort_by_key(|(s, scheduled, _)| (*s < below, *s, *scheduled));
    let mut refused = Vec::new();
    for (step, _, dir) in all.into_iter().rev() {
        match open(step, &dir) {
            Ok(found) => return (Some(found), refused),
            Err(e) => refused.push((step, dir, e)),
        }
    }
    (None, refused)
}

/// A checkpoint that failed its sums, renamed `*.corrupt` so that its step can be written again
/// and a person can look at it.
pub fn set_aside(dir: &Path) -> PathBuf {
    let aside = dir.with_extension("corrupt");
    let _ = std::fs::remove_dir_all(&aside);
    let _ = std::fs::rename(dir, &aside);
    aside
}

/// Keeps the newest `keep_last` scheduled checkpoints and those of the steps in `keep` (the best
/// ones); removes the rest, and every stop checkpoint (a scheduled one has just superseded it).
pub fn keep_last(root: &Path, keep_last: usize, keep: &[u64]) -> Result<()> {
    for (_, dir) in list(root, Kind::Stop) {
        std::fs::remove_dir_all(&dir).map_err(|e| RunError::io(&dir, e))?;
    }
    let all = list(root, Kind::Scheduled);
    let cut = all.len().saturating_sub(keep_last);
    for (step, dir) in &all[..cut] {
        if !keep.contains(step) {
            std::fs::remove_dir_all(dir).map_err(|e| RunError::io(dir, e))?;
        }
    }
    Ok(())
}

/// Removes the checkpoints of both kinds newer than `step` (a resume or a rollback makes them the
/// past of another run) and leftover temporaries.
pub fn discard_after(root: &Path, step: u64) -> Result<()> {
    for (s, dir) in list(root, Kind::Scheduled)
        .into_iter()
        .chain(list(root, Kind::Stop))
    {
        if s > step {
            std::fs::remove_dir_all(&dir).map_err(|e| RunError::io(&dir, e))?;
        }
    }
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with(".tmp-") {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_another_program_wrote_is_sealed_in_place_and_verified() {
        let dir = tempfile::tempdir().unwrap();
        let ckpt = dir.path().join("checkpoint-40");
        std::fs::create_dir_all(ckpt.join("global_step40")).unwrap();
        std::fs::write(ckpt.join("model.safetensors"), b"weights").unwrap();
        std::fs::write(ckpt.join("global_step40").join("optim.pt"), b"moments").unwrap();
        seal(&ckpt).unwrap();
        let s = Sealed::open(&ckpt).unwrap();
        assert_eq!(
            s.files().collect::<Vec<_>>(),
            ["global_step40/optim.pt", "model.safetensors"]
        );
        s.verify().unwrap();
        // Sealing again (a later file added) covers it, and a changed file fails.
        std::fs::write(ckpt.join("trainer_state.json"), b"{}").unwrap();
        seal(&ckpt).unwrap();
        let s = Sealed::open(&ckpt).unwrap();
        assert!(s.has("trainer_state.json"));
        std::fs::write(ckpt.join("global_step40").join("optim.pt"), b"momentz").unwrap();
        let err = s.verify().unwrap_err().to_string();
        assert!(
            err.contains("optim.pt") && err.contains("does not match"),
            "{err}"
        );
    }

    #[test]
    fn a_checkpoint_is_sealed_placed_and_read_back_checked() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("checkpoints");
        let mut p = Pending::begin(&root, Kind::Scheduled, 7).unwrap();
        p.add(STATE, b"{\"format\":3}").unwrap();
        // A file the engine wrote itself is summed at commit.
        std::fs::write(p.path().join("model.pt"), b"weights").unwrap();
        let placed = p.commit().unwrap();
        assert_eq!(placed, root.join("step-00000007"));
        let s = Sealed::open(&placed).unwrap();
        assert_eq!(s.files().collect::<Vec<_>>(), ["model.pt", STATE]);
        assert_eq!(s.read("model.pt").unwrap(), b"weights");
        s.verify().unwrap();
        std::fs::write(placed.join("model.pt"), b"weightz").unwrap();
        let err = s.read("model.pt").unwrap_err().to_string();
        assert!(err.contains("does not match its SHA-256"), "{err}");
        assert!(s.verify().is_err());
        // A sealed envelope that does not list state.json never hands it out unchecked.
        std::fs::write(
            placed.join(SUMS),
            format!("{}  model.pt\n", hex(Sha256::digest(b"weights"))),
        )
        .unwrap();
        let err = Sealed::open(&placed).unwrap().state().unwrap_err().to_string();
        assert!(err.contains("lists no state.json"), "{err}");
        // What `sha256sum -c` reads.
        let sums = std::fs::read_to_string(placed.join(SUMS)).unwrap();
        assert!(sums.lines().all(|l| l.len() == 64 + 2 + l[66..].len()), "{sums}");
    }

    #[test]
    fn latest_passes_over_a_torn_checkpoint_and_keep_last_keeps_the_best() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for step in [10, 20, 30, 40] {
            write(
                root,
                Kind::Scheduled,
                step,
                &[(STATE, b"{}"), ("model", &[step as u8])],
            )
            .unwrap();
        }
        write(root, Kind::Stop, 40, &[(STATE, b"{}")]).unwrap();
        std::fs::write(root.join("step-00000040/model"), b"").unwrap();
        let open = |_, d: &Path| Sealed::open(d).and_then(|s| s.verify().map(|()| s));
        let (found, refused) = latest(root, &[Kind::Scheduled], open);
        assert_eq!(found.unwrap().dir(), root.join("step-00000030"));
        assert_eq!(refused.iter().map(|r| r.0).collect::<Vec<_>>(), [40]);
        // At one step, the scheduled one is tried first; the stop one is newer than nothing.
        let (found, _) = latest(root, &[Kind::Scheduled, Kind::Stop], open);
        assert_eq!(found.unwrap().dir(), root.join("stop-00000040"));
        // Below a step: the newest below it; none below, the newest of the rest that opens.
        let (found, _) = latest_below(root, &[Kind::Scheduled], 25, open);
        assert_eq!(found.unwrap().dir(), root.join("step-00000020"));
        let (found, refused) = latest_below(root, &[Kind::Scheduled], 5, open);
        assert_eq!(found.unwrap().dir(), root.join("step-00000030"));
        assert_eq!(refused.iter().map(|r| r.0).collect::<Vec<_>>(), [40]);
        keep_last(root, 2, &[10]).unwrap();
        let steps = |k| list(root, k).into_iter().map(|(s, _)| s).collect::<Vec<_>>();
        assert_eq!(steps(Kind::Scheduled), [10, 30, 40]);
        assert!(steps(Kind::Stop).is_empty());
        discard_after(root, 10).unwrap();
        assert_eq!(steps(Kind::Scheduled), [10]);
    }

    #[test]
    fn an_old_pytorch_checkpoint_reads_its_sums_from_its_record() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("model.pt"), b"w").unwrap();
        let sum = hex(Sha256::digest(b"w"));
        std::fs::write(
            d.join(STATE),
            format!("{{\"format\":2,\"sha256\":{{\"model.pt\":\"{sum}\"}}}}"),
        )
        .unwrap();
        let s = Sealed::open(d).unwrap();
        s.verify().unwrap();
        assert!(s.state().unwrap().starts_with(b"{\"format\":2"));
        std::fs::write(d.join("model.pt"), b"x").unwrap();
        assert!(s.verify().is_err());
    }
}
