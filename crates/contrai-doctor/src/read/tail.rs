//! Following a log as it grows: each poll reads only the bytes written since the last one, and
//! reads again from the start a file that was truncated or replaced (a resumed run).

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::mlflow_server::{Location, Server};
use super::source::{self, Appended, Source};
use super::{Format, ReadError, Skipped, Stream, context, detect_format, io_err};
use crate::series::{RawRun, Run};

/// How much of a file one read takes at most (a 100 MB log is read in pieces, not at once).
const CHUNK: usize = 8 << 20;
/// Bytes kept from the end of what was read, to tell a file rewritten under the same name.
const SAMPLE: usize = 64;

/// A log path followed as it grows: a file, a run directory or any folder the doctor reads.
pub struct Tail {
    path: PathBuf,
    format: Option<Format>,
    /// A one-off read: a last line without its newline is read too.
    once: bool,
    /// The folder's entries when its sources were last searched.
    listing: Option<Vec<PathBuf>>,
    followed: Vec<Followed>,
    /// Bytes read from the logs so far.
    bytes_read: u64,
    /// Files under the folder that gave no run at the last poll, and why.
    skipped: Vec<Skipped>,
    /// Of those, the ones the folder's search passed over (its listing unchanged, kept), each
    /// with its stamp then.
    passed_over: Vec<(Skipped, Option<Stamp>)>,
    /// The tracking server the path names (`mlflow://...`), read instead of files.
    server: Option<Server>,
}

/// A file's identity and size as last seen: unchanged, it is not opened.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Stamp {
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let m = fs::metadata(path).ok()?;
        Some(Stamp {
            ino: m.ino(),
            len: m.len(),
            modified: m.modified().ok(),
        })
    }
}

/// An appended file, read up to `read`.
struct FileTail {
    file: Appended,
    stream: Box<dyn Stream>,
    read: u64,
    stamp: Option<Stamp>,
    /// The last bytes read (up to [`SAMPLE`]).
    sample: Vec<u8>,
}

impl FileTail {
    fn new(file: Appended) -> FileTail {
        FileTail {
            stream: file.stream(),
            file,
            read: 0,
            stamp: None,
            sample: Vec::new(),
        }
    }

    /// Whether the file is no longer the one read so far: replaced, truncated or rewritten.
    fn replaced(&self, now: &Stamp) -> bool {
        let Some(was) = self.stamp else {
            return false;
        };
        if now.ino != was.ino || now.len < self.read {
            return true;
        }
        let mut at_end = vec![0u8; self.sample.len()];
        let start = self.read - self.sample.len() as u64;
        let same = fs::File::open(&self.file.path)
            .and_then(|mut f| {
                f.seek(SeekFrom::Start(start))
                    .and_then(|_| f.read_exact(&mut at_end))
            })
            .is_ok_and(|()| at_end == self.sample);
        !same
    }

    /// Feeds what was appended since the last read to the stream.
    fn read_new(&mut self, run: &mut RawRun, now: Stamp, once: bool, io: &mut u64) -> Result<(), ReadError> {
        let path = &self.file.path;
        let mut f = fs::File::open(path).map_err(|e| io_err(path, e))?;
        f.seek(SeekFrom::Start(self.read)).map_err(|e| io_err(path, e))?;
        let mut left = now.len - self.read;
        let mut buf: Vec<u8> = Vec::new();
        while left > 0 {
            let want = CHUNK.min(usize::try_from(left).unwrap_or(CHUNK));
            let have = buf.len();
            buf.resize(have + want, 0);
            let n = f.read(&mut buf[have..]).map_err(|e| io_err(path, e))?;
            buf.truncate(have + n);
            *io += n as u64;
            left = if n == 0 { 0 } else { left - n as u64 };
            let used = self.stream.feed(run, &buf, once && left == 0)?;
            self.read += used as u64;
            self.sample
                .extend_from_slice(&buf[used.saturating_sub(SAMPLE)..used]);
            let cut = self.sample.len().saturating_sub(SAMPLE);
            self.sample.drain(..cut);
            buf.drain(..used);
        }
        self.stamp = Some(now);
        Ok(())
    }

    /// Feeds the bytes left unread at the file's end as its end (as a one-off read takes them):
    /// a last line without its newline read whole, a record cut short said as a partial read.
    /// True when there were any.
    fn end(&mut self, run: &mut RawRun, io: &mut u64) -> Result<bool, ReadError> {
        let Some(now) = self.stamp.filter(|s| s.len > self.read) else {
            return Ok(false);
        };
        self.read_new(run, now, true, io)?;
        Ok(true)
    }
}

/// A source and what was read of it.
struct Followed {
    source: Source,
    state: State,
}

enum State {
    Appended {
        raw: Box<RawRun>,
        files: Vec<FileTail>,
        /// The files' stamps when reading them failed: not read again until they change.
        failed: Option<Vec<Option<Stamp>>>,
    },
    Whole {
        stamps: Vec<Option<Stamp>>,
        runs: Vec<Run>,
    },
}

impl Followed {
    fn new(source: Source) -> Followed {
        let state = match &source {
            Source::Appended { run, files, .. } => State::Appended {
                raw: run.clone(),
                files: files.iter().cloned().map(FileTail::new).collect(),
                failed: None,
            },
            Source::Whole { .. } => State::Whole {
                stamps: Vec::new(),
                runs: Vec::new(),
            },
        };
        Followed { source, state }
    }

    /// Reads what changed; true when something did.
    fn update(&mut self, once: bool, io: &mut u64) -> Result<bool, ReadError> {
        match &mut self.state {
            State::Appended { raw, files, failed } => {
                let now: Vec<Option<Stamp>> = files.iter().map(|f| Stamp::of(&f.file.path)).collect();
                if failed.as_ref() == Some(&now) || files.iter().zip(&now).all(|(f, n)| f.stamp == *n) {
                    return Ok(false);
                }
                // Only the files that are there and changed are opened.
                let changed = |f: &FileTail, n: &Option<Stamp>| n.filter(|n| f.stamp != Some(*n));
                if files
                    .iter()
                    .zip(&now)
                    .any(|(f, n)| changed(f, n).is_some_and(|n| f.replaced(&n)))
                {
                    *self = Followed::new(self.source.clone());
                    return self.update(once, io);
                }
                let res = files
                    .iter_mut()
                    .zip(&now)
                    .filter_map(|(f, n)| Some((changed(f, n)?, f)))
                    .try_for_each(|(n, f)| f.read_new(raw, n, once, io));
                if let Err(e) = res {
                    // Start again from nothing when the files change (some rows were taken).
                    let lenient = matches!(self.source, Source::Appended { lenient: true, .. });
                    *self = Followed::new(self.source.clone());
                    if let State::Appended { failed, .. } = &mut self.state {
                        *failed = Some(now);
                    }
                    return if lenient { Ok(true) } else { Err(e) };
                }
                Ok(true)
            }
            State::Whole { stamps, runs } => {
                let Source::Whole { format, paths } = &self.source else {
                    return Ok(false);
                };
                let now: Vec<Option<Stamp>> = paths
                    .iter()
                    .map(|p| tree_stamp(p))
                    .chain(wal_stamps(paths))
                    .collect();
                if *stamps == now {
                    return Ok(false);
                }
                // A file being rewritten may not parse yet: it is read again when it changes.
                *runs = Source::read_whole(*format, paths)?;
                *io += now.iter().flatten().map(|s| s.len).sum::<u64>();
                *stamps = now;
                Ok(true)
            }
        }
    }

    fn runs(&self) -> Vec<Run> {
        match (&self.state, &self.source) {
            (State::Appended { raw, files, .. }, Source::Appended { run_dir, .. }) => {
                let streams: Vec<&dyn Stream> = files.iter().map(|f| f.stream.as_ref()).collect();
                Source::finish_appended(raw, &streams, run_dir.as_ref())
            }
            (State::Whole { runs, .. }, _) => runs.clone(),
            _ => Vec::new(),
        }
    }
}

/// The stamps of the write-ahead logs beside SQLite databases (Trackio's): a row a job commits
/// lands there first, the database itself changing only at a checkpoint.
fn wal_stamps(paths: &[PathBuf]) -> impl Iterator<Item = Option<Stamp>> + '_ {
    paths
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "db"))
        .map(|p| {
            let mut wal = p.clone().into_os_string();
            wal.push("-wal");
            Stamp::of(Path::new(&wal))
        })
}

/// A stamp of a file, or of a folder's whole tree (sizes summed, the latest change).
fn tree_stamp(path: &Path) -> Option<Stamp> {
    let meta = fs::metadata(path).ok()?;
    if !meta.is_dir() {
        return Stamp::of(path);
    }
    let mut stamp = Stamp {
        ino: meta.ino(),
        len: 0,
        modified: meta.modified().ok(),
    };
    for p in listing(path) {
        if let Some(s) = Stamp::of(&p) {
            stamp.len = stamp.len.wrapping_add(s.len);
            stamp.modified = stamp.modified.max(s.modified);
        }
    }
    Some(stamp)
}

/// Every entry under a folder (8 levels deep at most), sorted.
fn listing(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(rd) = fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if depth < 8 && e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((p.clone(), depth + 1));
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

impl Tail {
    /// Follows `path`, read as `format` (detected when `None`).
    pub fn new(path: &Path, format: Option<Format>) -> Tail {
        Tail {
            path: path.to_path_buf(),
            format,
            once: false,
            listing: None,
            followed: Vec::new(),
            bytes_read: 0,
            skipped: Vec::new(),
            passed_over: Vec::new(),
            server: (path.to_str().and_then(Location::parse)).map(|l| Server::new(l, path)),
        }
    }

    /// Reads `path` once, to its last byte.
    pub(crate) fn once(path: &Path, format: Option<Format>) -> Tail {
        Tail {
            once: true,
            ..Tail::new(path, format)
        }
    }

    /// The path followed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes read from the logs so far: a log that grows by n bytes costs about n more.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read + self.server.as_ref().map_or(0, Server::bytes_read)
    }

    /// The logs have ended: what is left unread at the ends of the files read so far is read as
    /// a one-off read takes it (and every later poll reads to the end); true when any was.
    pub fn end(&mut self) -> Result<bool, ReadError> {
        self.once = true;
        let mut changed = false;
        for f in &mut self.followed {
            if let State::Appended { raw, files, .. } = &mut f.state {
                for file in files.iter_mut() {
                    changed |= file.end(raw, &mut self.bytes_read)?;
                }
            }
        }
        Ok(changed)
    }

    /// Reads what was written since the last poll; true when anything changed. A path that does
    /// not exist yet, or whose format is not known yet, is an error to wait on.
    pub fn poll(&mut self) -> Result<bool, ReadError> {
        if let Some(server) = &mut self.server {
            return server.poll(self.once);
        }
        if !self.path.exists() {
            let gone = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory");
            self.followed.clear();
            self.listing = None;
            return Err(io_err(&self.path, gone));
        }
        let mut changed = self.search()?;
        let mut errors = Vec::new();
        for f in &mut self.followed {
            match f.update(self.once, &mut self.bytes_read) {
                Ok(c) => changed |= c,
                Err(e) => errors.push((f.source.key().1, e)),
            }
        }
        // Under a folder, a log that fails to read is passed over and said while the others
        // give runs; alone (a file, or the only log there), its error is the answer.
        let others_read = self.followed.len() > errors.len();
        self.skipped = self.passed_over.iter().map(|(s, _)| s.clone()).collect();
        for (path, e) in errors {
            if !(self.path.is_dir() && others_read) {
                return Err(e);
            }
            self.skipped.push(Skipped {
                path,
                reason: e.to_string(),
            });
        }
        Ok(changed)
    }

    /// Files under the folder that gave no run at the last poll, and why.
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// Finds the sources of the path when it is new or its folder's entries changed.
    fn search(&mut self) -> Result<bool, ReadError> {
        if !self.path.is_dir() {
            if !self.followed.is_empty() {
                return Ok(false);
            }
            let format = match self.format {
                Some(f) => f,
                None => detect_format(&self.path)?,
            };
            self.followed = vec![Followed::new(source::of_format(&self.path, format)?)];
            return Ok(true);
        }
        let now = listing(&self.path);
        // A file passed over (empty when first seen, say) is looked at again once it changes.
        let unchanged = |(s, stamp): &(Skipped, Option<Stamp>)| Stamp::of(&s.path) == *stamp;
        if self.listing.as_ref() == Some(&now) && self.passed_over.iter().all(unchanged) {
            return Ok(false);
        }
        let mut passed_over = Vec::new();
        let mut sources = source::in_dir(&self.path, &mut passed_over)?;
        // A folder given with a format is searched for logs of that format.
        if let Some(f) = self.format {
            sources.retain(|s| s.format() == f);
            if sources.is_empty() {
                // A TensorBoard, MLflow or Burn log is a folder itself, whatever its files' names.
                sources = match f {
                    Format::Tensorboard | Format::Mlflow | Format::Burn => {
                        vec![source::of_format(&self.path, f)?]
                    }
                    _ => {
                        return Err(ReadError::NoLogOfFormat {
                            path: self.path.clone(),
                            format: f,
                        });
                    }
                };
            }
        }
        self.passed_over = passed_over
            .into_iter()
            .map(|s| {
                let stamp = Stamp::of(&s.path);
                (s, stamp)
            })
            .collect();
        let mut old = std::mem::take(&mut self.followed);
        for s in sources {
            let kept = old
                .iter()
                .position(|f| f.source.key() == s.key())
                .map(|i| old.swap_remove(i));
            self.followed.push(match kept {
                Some(f) => f.grown_to(s),
                None => Followed::new(s),
            });
        }
        self.listing = Some(now);
        Ok(true)
    }

    /// The runs read so far (series of no canonical metric left out), with what the files beside
    /// each log say about it.
    pub fn runs(&self) -> Result<Vec<Run>, ReadError> {
        let read = match &self.server {
            Some(server) => server.runs(),
            None => self.followed.iter().flat_map(Followed::runs).collect(),
        };
        let mut runs: Vec<Run> = read.into_iter().filter(|r| !r.series.is_empty()).collect();
        for r in &mut runs {
            // A server's run has no files beside it: its metric names tell its task.
            let log = PathBuf::from(&r.source);
            match &self.server {
                Some(_) => context::from_metric_names(r),
                None => context::infer(r, if log.exists() { &log } else { &self.path }),
            }
        }
        if runs.is_empty() {
            return Err(ReadError::NoMetrics {
                path: self.path.clone(),
            });
        }
        Ok(runs)
    }
}

impl Followed {
    /// This source as a new search of its folder found it: what was read is kept when the
    /// files read so far are still its first ones (a new event file was added after them).
    fn grown_to(mut self, found: Source) -> Followed {
        let (Source::Appended { files: was, .. }, Source::Appended { files: now, .. }) =
            (&self.source, &found)
        else {
            return match (&self.source, &found) {
                (Source::Whole { paths: a, .. }, Source::Whole { paths: b, .. }) if a == b => self,
                _ => Followed::new(found),
            };
        };
        if !now.starts_with(was) {
            return Followed::new(found);
        }
        if let State::Appended { files, .. } = &mut self.state {
            files.extend(now[was.len()..].iter().cloned().map(FileTail::new));
        }
        self.source = found;
        self
    }
}
