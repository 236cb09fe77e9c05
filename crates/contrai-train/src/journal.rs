//! The run's record as it goes: `metrics.jsonl`, `decisions.jsonl`, `quarantine.jsonl`, the
//! console and the progress bar (messages go above the bar when one is drawn).

use std::io::IsTerminal;

use contrai_run::{Decision, JsonLines, MetricsRow, QuarantineEntry, QuarantineLog, RunDir};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::error::Result;
use crate::options::Log;

/// Bytes of (`metrics.jsonl`, `decisions.jsonl`, `quarantine.jsonl`) a checkpoint records.
pub type Lengths = (u64, u64, u64);

/// The journals, the console and the bar.
pub struct Journal<'a> {
    run: RunDir,
    metrics: JsonLines,
    decisions: JsonLines,
    quarantine: QuarantineLog,
    log: &'a dyn Log,
    bar: ProgressBar,
}

impl<'a> Journal<'a> {
    /// Opens the run's journals cut back to (`metrics_len`, `decisions_len`, `quarantine_len`)
    /// bytes.
    pub fn open(
        run: &RunDir,
        (metrics_len, decisions_len, quarantine_len): Lengths,
        log: &'a dyn Log,
    ) -> Result<Self> {
        Ok(Journal {
            run: run.clone(),
            metrics: JsonLines::open(&run.metrics(), metrics_len)?,
            decisions: JsonLines::open(&run.decisions(), decisions_len)?,
            quarantine: QuarantineLog::open(run, Some(quarantine_len))?,
            log,
            bar: ProgressBar::hidden(),
        })
    }

    /// Appends a row to `metrics.jsonl`.
    pub fn metric(&mut self, row: MetricsRow) -> Result<()> {
        Ok(self.metrics.write(&row)?)
    }

    /// Writes a decision to `decisions.jsonl` and the console.
    pub fn decide(&mut self, d: &Decision) -> Result<()> {
        self.say(&format!("[{} step {}] {}: {}", d.phase, d.step, d.kind, d.reason));
        Ok(self.decisions.write(d)?)
    }

    /// Appends a spike's batch to `quarantine.jsonl` and says so.
    pub fn quarantine(&mut self, entry: &QuarantineEntry) -> Result<()> {
        self.say(&format!(
            "[{} step {}] quarantined {} rows ({}; loss {} over {})",
            entry.phase,
            entry.step,
            entry.rows.len(),
            entry.cause,
            entry.loss,
            entry.threshold
        ));
        Ok(self.quarantine.write(entry)?)
    }

    /// Cuts `metrics.jsonl` back to `len` bytes (a full restore); decisions are kept, their
    /// reasons being the history of the run.
    pub fn cut_metrics(&mut self, len: u64) -> Result<()> {
        self.metrics = JsonLines::open(&self.run.metrics(), len)?;
        Ok(())
    }

    /// Bytes of the three journals, after forcing them to disk (a checkpoint refers to them).
    pub fn sync(&self) -> Result<Lengths> {
        self.metrics.sync()?;
        self.decisions.sync()?;
        self.quarantine.sync()?;
        Ok((self.metrics.len(), self.decisions.len(), self.quarantine.len()))
    }

    /// A progress line.
    pub fn say(&self, msg: &str) {
        if self.bar.is_hidden() {
            self.log.info(msg)
        } else {
            self.bar.println(msg)
        }
    }

    /// Where messages go.
    pub fn log(&self) -> &'a dyn Log {
        self.log
    }

    /// A warning.
    pub fn warn(&self, msg: &str) {
        self.log.warn(msg);
    }

    /// Draws a bar of `total` steps at `at` on stderr, when asked and stderr is a terminal.
    pub fn start_bar(&mut self, total: u64, at: u64, wanted: bool) {
        if wanted && std::io::stderr().is_terminal() && at < total {
            let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {msg}  ETA {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.set_position(at);
            self.bar = b;
        }
    }

    /// Moves the bar to `step`, with a message.
    pub fn progress(&self, step: u64, msg: Option<String>) {
        self.bar.set_position(step);
        if let Some(m) = msg {
            self.bar.set_message(m);
        }
    }

    /// Clears the bar.
    pub fn finish_bar(&self) {
        self.bar.finish_and_clear();
    }
}
