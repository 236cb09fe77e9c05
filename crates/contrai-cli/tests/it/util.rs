//! What the `contrai` binary's integration tests share (as ripgrep's `tests/util.rs`): a command
//! builder for the binary, its result with stdout and stderr as text and assertions that print all
//! of it when they fail, temporary directories, and the fixtures the tests load.
//!
//! Each test file includes it with `mod util;`; not every file uses every helper.

#![allow(dead_code)]

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

use serde_json::Value;

/// The `contrai` binary Cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_contrai");

/// `contrai <args>`, ready for more arguments, environment, a working directory or stdin.
pub fn contrai<I, S>(args: I) -> Contrai
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Contrai::new().args(args)
}

/// A `contrai` command line being built. Nothing runs until [`Contrai::output`] or
/// [`Contrai::spawn`].
pub struct Contrai {
    cmd: Command,
    argv: Vec<OsString>,
    stdin: Option<Vec<u8>>,
}

impl Default for Contrai {
    fn default() -> Self {
        Self::new()
    }
}

impl Contrai {
    /// `contrai` with no arguments yet.
    pub fn new() -> Self {
        Contrai {
            cmd: Command::new(BIN),
            argv: Vec::new(),
            stdin: None,
        }
    }

    /// One more argument (a `&str`, a `Path`, …).
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.argv.push(arg.as_ref().to_owned());
        self.cmd.arg(arg);
        self
    }

    /// More arguments.
    pub fn args<I, S>(self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        args.into_iter().fold(self, Contrai::arg)
    }

    /// An environment variable for the child.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    /// An environment variable the child must not see.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.cmd.env_remove(key);
        self
    }

    /// The child's working directory.
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.cmd.current_dir(dir);
        self
    }

    /// Bytes written to the child's stdin, which is then closed.
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// The command line as a shell would show it, for failure messages.
    fn describe(&self) -> String {
        std::iter::once("contrai".into())
            .chain(self.argv.iter().map(|a| a.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs it to the end with stdout and stderr captured (stdin closed unless given).
    pub fn output(self) -> Output {
        self.spawn().wait()
    }

    /// Runs it to the end with its stdout closed before it writes a byte (a reader that stopped
    /// early, as `| head -1`): its exit code (`None` when a signal ended it) and its stderr.
    pub fn with_stdout_closed(self) -> (Option<i32>, String) {
        let mut running = self.spawn();
        drop(running.child.stdout.take());
        let out = running.wait();
        (out.code(), out.stderr.clone())
    }

    /// Starts it in the background with stdout and stderr piped (stdin closed unless given), for
    /// tests that act on it while it runs; [`Running::wait`] collects its output.
    pub fn spawn(mut self) -> Running {
        let command = self.describe();
        let stdin = self.stdin.take();
        let mut child = self
            .cmd
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{BIN}`: {e}"));
        let writer = stdin.map(|bytes| {
            let mut pipe = child.stdin.take().expect("piped stdin");
            std::thread::spawn(move || pipe.write_all(&bytes))
        });
        Running {
            command,
            child,
            writer,
        }
    }
}

/// A `contrai` process started by [`Contrai::spawn`].
pub struct Running {
    command: String,
    child: Child,
    writer: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl Running {
    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Sends it SIGTERM (with `kill`, as a user would).
    pub fn terminate(&self) {
        let killed = Command::new("kill")
            .args(["-TERM", &self.id().to_string()])
            .status()
            .expect("runs kill");
        assert!(killed.success(), "kill -TERM {} failed", self.id());
    }

    /// Kills it with SIGKILL: no handler runs, nothing is flushed.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Waits for it to exit, reading all it wrote.
    pub fn wait(self) -> Output {
        let out = self
            .child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("waiting for `{}`: {e}", self.command));
        if let Some(writer) = self.writer {
            // A child that exits without reading all its stdin breaks the pipe: not an error here.
            let _ = writer.join().expect("stdin writer");
        }
        Output::new(self.command, out)
    }
}

/// What a finished `contrai` left: its exit status and its stdout and stderr as text. Its
/// `Display` shows the command line, the exit status and both streams in full; every assertion
/// here prints it when it fails.
pub struct Output {
    /// The command line that ran.
    pub command: String,
    /// How it exited.
    pub status: ExitStatus,
    /// Its stdout (invalid UTF-8 replaced).
    pub stdout: String,
    /// Its stderr (invalid UTF-8 replaced).
    pub stderr: String,
    stdout_bytes: Vec<u8>,
}

impl Output {
    fn new(command: String, out: std::process::Output) -> Self {
        Output {
            command,
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            stdout_bytes: out.stdout,
        }
    }

    /// The exit code (`None` when a signal ended it).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Whether it exited 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// Asserts it exited 0.
    #[track_caller]
    pub fn assert_success(&self) -> &Self {
        assert!(self.success(), "expected success\n{self}");
        self
    }

    /// Asserts it did not exit 0.
    #[track_caller]
    pub fn assert_failure(&self) -> &Self {
        assert!(!self.success(), "expected failure\n{self}");
        self
    }

    /// Asserts its exit code.
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(self.code(), Some(code), "expected exit {code}\n{self}");
        self
    }

    /// Asserts stdout contains every one of `parts`.
    #[track_caller]
    pub fn assert_stdout_contains(&self, parts: &[&str]) -> &Self {
        let missing = missing(&self.stdout, parts);
        assert!(missing.is_empty(), "stdout lacks {missing:?}\n{self}");
        self
    }

    /// Asserts stderr contains every one of `parts`.
    #[track_caller]
    pub fn assert_stderr_contains(&self, parts: &[&str]) -> &Self {
        let missing = missing(&self.stderr, parts);
        assert!(missing.is_empty(), "stderr lacks {missing:?}\n{self}");
        self
    }

    /// Stdout, asserted to be valid UTF-8.
    #[track_caller]
    pub fn stdout_utf8(&self) -> &str {
        std::str::from_utf8(&self.stdout_bytes)
            .unwrap_or_else(|e| panic!("stdout is not UTF-8 ({e})\n{self}"))
    }

    /// Stdout parsed as one JSON value.
    pub fn try_json(&self) -> serde_json::Result<Value> {
        serde_json::from_slice(&self.stdout_bytes)
    }

    /// Stdout parsed as one JSON value, asserted.
    #[track_caller]
    pub fn json(&self) -> Value {
        self.try_json()
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e})\n{self}"))
    }
}

/// The ones of `parts` that `text` does not contain.
fn missing<'a>(text: &str, parts: &[&'a str]) -> Vec<&'a str> {
    parts.iter().copied().filter(|p| !text.contains(p)).collect()
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "command: {}", self.command)?;
        writeln!(f, "status: {}", self.status)?;
        writeln!(f, "--- stdout ---\n{}", self.stdout)?;
        write!(f, "--- stderr ---\n{}", self.stderr)
    }
}

/// A temporary directory, removed when dropped, with file helpers that name the path when they
/// fail.
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    /// A fresh, empty directory.
    pub fn new() -> Self {
        TempDir(tempfile::tempdir().expect("tempdir"))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// A path inside it.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path().join(rel)
    }

    /// Writes `contents` to `rel` inside it and returns the file's path.
    pub fn write(&self, rel: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.join(rel);
        std::fs::write(&path, contents).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }

    /// Makes the directory `rel` inside it and returns its path.
    pub fn mkdir(&self, rel: impl AsRef<Path>) -> PathBuf {
        let path = self.join(rel);
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        path
    }
}

impl Default for TempDir {
    fn default() -> Self {
        Self::new()
    }
}

/// A file's text, naming the file when it cannot be read.
#[track_caller]
pub fn read_to_string(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// A JSON file's value, naming the file when it cannot be read or parsed.
#[track_caller]
pub fn read_json(path: impl AsRef<Path>) -> Value {
    let path = path.as_ref();
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// The tiny BERT checkpoint `contrai-bert`'s tests keep as a fixture.
pub const TINY_BERT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../contrai-bert/tests/fixtures/tiny-bert"
);

/// The doctor's evaluation cases in `../shared/eval/doctor/cases` (each a directory with a
/// `case.json`), sorted; `None` when `../shared` is absent (see `contrai_testkit::shared`).
pub fn doctor_eval_cases() -> Option<Vec<PathBuf>> {
    let dir = contrai_testkit::shared("eval/doctor/cases")?;
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("case.json").is_file())
        .collect();
    cases.sort();
    Some(cases)
}
