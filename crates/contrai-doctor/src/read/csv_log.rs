//! Lightning CSVLogger `metrics.csv` (sparse rows), Keras CSVLogger (`NA` for missing, runs
//! appended without a header), and any CSV with a step/epoch column and metric columns.

use std::path::{Path, PathBuf};

use super::{ReadError, Stream, complete_lines, parse_num, to_step};
use crate::series::{Marker, RawRun, XUnit};
use crate::tags;

/// Names of a column that says each row's role, in a log written a row per role.
const ROLE_COLUMNS: [&str; 6] = ["type", "split", "phase", "mode", "stage", "subset"];

/// The tag prefix for a row of role `cell` (`train`, `validation`, `test`, as a long table of
/// one loop's rows writes it): its metrics are that role's; `None` for a cell that names none.
fn role_prefix(cell: &str) -> Option<&'static str> {
    match cell.trim().to_ascii_lowercase().as_str() {
        "train" | "training" => Some("train"),
        "val" | "valid" | "validation" | "eval" | "evaluation" | "dev" => Some("val"),
        "test" => Some("test"),
        _ => None,
    }
}

/// Column that carries the x-axis, and its unit.
fn step_column(header: &[String]) -> Option<(usize, XUnit)> {
    let lower: Vec<String> = header.iter().map(|h| h.trim().to_ascii_lowercase()).collect();
    for key in super::STEP_KEYS {
        if let Some(i) = lower.iter().position(|h| h == key) {
            return Some((i, XUnit::Step));
        }
    }
    lower.iter().position(|h| h == "epoch").map(|i| (i, XUnit::Epoch))
}

/// A CSV log read row by row as it grows; a partial last row (still being written) waits.
pub struct Csv {
    path: PathBuf,
    delim: Option<u8>,
    /// Records read so far.
    record: usize,
    header: Option<Vec<String>>,
    step_col: Option<(usize, XUnit)>,
    metric_cols: Vec<(usize, String)>,
    /// An `epoch` column beside the step column: it tells the epochs' length (`RawRun::push`).
    epoch_col: Option<(usize, String)>,
    /// A column naming each row's role (`type`, `split`, `phase`: `train`, `validation`) in a
    /// log that writes a row per role ([`role_prefix`]).
    role_col: Option<usize>,
    row_index: u64,
    offset: u64,
    prev_step: Option<u64>,
    max_step: u64,
}

impl Csv {
    /// A reader at the start of `path`.
    pub fn new(path: &Path) -> Csv {
        Csv {
            path: path.to_path_buf(),
            delim: None,
            record: 0,
            header: None,
            step_col: None,
            metric_cols: Vec::new(),
            epoch_col: None,
            role_col: None,
            row_index: 0,
            offset: 0,
            prev_step: None,
            max_step: 0,
        }
    }

    /// The run it reads into, named after the file's folder (Lightning's `version_N`).
    pub fn run(path: &Path) -> RawRun {
        let name = path
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        RawRun::new(name, path.display().to_string(), "csv")
    }

    fn parse_err(&self, field: &str, reason: String) -> ReadError {
        ReadError::Parse {
            path: self.path.clone(),
            line: self.record,
            field: field.to_string(),
            reason,
        }
    }

    fn row(&mut self, run: &mut RawRun, cells: Vec<String>) -> Result<(), ReadError> {
        if cells.iter().all(String::is_empty) {
            return Ok(());
        }
        let Some(h) = &self.header else {
            self.step_col = step_column(&cells);
            let step = self.step_col.map(|s| s.0);
            self.metric_cols = cells
                .iter()
                .enumerate()
                .filter(|(j, c)| Some(*j) != step && tags::classify(c).is_some())
                .map(|(j, c)| (j, c.clone()))
                .collect();
            self.epoch_col = cells
                .iter()
                .position(|c| c.eq_ignore_ascii_case("epoch"))
                .filter(|j| Some(*j) != step)
                .map(|j| (j, "epoch".to_string()));
            self.role_col = cells
                .iter()
                .position(|c| ROLE_COLUMNS.contains(&c.trim().to_ascii_lowercase().as_str()));
            self.header = Some(cells);
            return Ok(());
        };
        run.at_line(self.record);
        if &cells == h {
            // A header repeated by an appending logger: the logger started again.
            run.mark_segment(Some(Marker::RepeatedHeader), None);
            return Ok(());
        }
        self.row_index += 1;
        // A row that holds only validation-batch values (Lightning's `val_loss_step`) counts
        // its steps on the validation loop's own counter: not on the training axis.
        let filled = |(j, _): &&(usize, String)| cells.get(*j).is_some_and(|c| !c.is_empty());
        if self
            .metric_cols
            .iter()
            .filter(filled)
            .all(|(_, t)| tags::on_validation_counter(t))
            && self.metric_cols.iter().any(|c| filled(&c))
        {
            return Ok(());
        }
        let raw_step = match self.step_col {
            Some((j, _)) => match cells.get(j).and_then(|c| parse_num(c)) {
                Some(x) => to_step(x),
                None => return Ok(()), // a row without a step (e.g. a summary line)
            },
            None => self.row_index - 1,
        };
        // Appended runs restart their epochs: keep the x-axis monotonic, and mark the restart
        // with the file's own steps for the resume rule.
        if let Some(p) = self.prev_step
            && raw_step.saturating_add(self.offset) < p
            && raw_step.saturating_add(self.offset).saturating_add(1) < self.max_step
        {
            run.mark_segment(None, Some((p.saturating_sub(self.offset), raw_step)));
            self.offset = self.max_step.saturating_add(1).saturating_sub(raw_step);
        }
        let step = raw_step.saturating_add(self.offset);
        self.prev_step = Some(step);
        self.max_step = self.max_step.max(step);
        let role = self.role_col.and_then(|j| role_prefix(cells.get(j)?));
        for (j, tag) in self.metric_cols.iter().chain(&self.epoch_col) {
            let Some(cell) = cells.get(*j) else {
                continue;
            };
            let named;
            let tag = match role {
                Some(r) if tag != "epoch" => {
                    named = format!("{r}/{tag}");
                    &named
                }
                _ => tag,
            };
            if cell.is_empty() {
                // pandas' `to_csv` writes NaN as an empty field: in a table with no step column
                // (a row an epoch, every metric in every row) an empty metric is a NaN; beside a
                // step column (Lightning's sparse rows) it was not logged at that step.
                if self.step_col.is_none() {
                    run.push(tag, step, f64::NAN);
                }
                continue;
            }
            match parse_num(cell) {
                Some(x) => run.push(tag, step, x),
                None if matches!(cell.as_str(), "NA" | "N/A" | "na" | "None" | "null" | "-") => {}
                None => return Err(self.parse_err(tag, format!("`{cell}` is not a number"))),
            }
        }
        Ok(())
    }
}

/// Why a CSV, from its first bytes (`head`, all of it when `whole`), is a summary of runs and
/// no run's course: its rows are named (`baseline`, `hho`: a comparison of runs, each name
/// once, in a first column that is no time), or it holds one row and no step column (a run's
/// final metrics: no course to judge), or none yet (too short to tell). `None`: a log.
pub(crate) fn summary(head: &[u8], whole: bool) -> Option<String> {
    let complete = &head[..head.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)];
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(delimiter(complete).unwrap_or(b','))
        .from_reader(complete);
    let mut records = rdr.records().filter_map(Result::ok);
    let header: Vec<String> = records.next()?.iter().map(|c| c.trim().to_string()).collect();
    if step_column(&header).is_some() {
        return None;
    }
    let rows: Vec<Vec<String>> = records
        .map(|r| r.iter().map(|c| c.trim().to_string()).collect())
        .filter(|r: &Vec<String>| r.iter().any(|c| !c.is_empty()))
        .collect();
    let names: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.first().map(String::as_str))
        .collect();
    let timed = ["time", "timestamp", "date", "datetime", "wall_time"]
        .iter()
        .any(|t| header.first().is_some_and(|h| h.eq_ignore_ascii_case(t)));
    let word = |c: &&str| parse_num(c).is_none() && !c.contains(':') && c.chars().any(char::is_alphabetic);
    let distinct = names.iter().collect::<std::collections::HashSet<_>>().len() == names.len();
    let named = names.len() == rows.len() && !names.is_empty() && names.iter().all(word);
    if !timed && named && distinct {
        return Some(format!(
            "a table of named rows (`{}`): it compares runs, no run's course",
            names.iter().take(3).copied().collect::<Vec<_>>().join("`, `")
        ));
    }
    match rows.len() {
        // Looked at again as it grows (a log and a table of results open alike).
        0 => Some("no row yet and no step column: too short to tell a log from a summary".into()),
        1 if whole => Some("one row and no step column: a run's summary, no course to judge".into()),
        _ => None,
    }
}

/// The delimiter a CSV header uses: the most frequent of comma, tab and semicolon (Keras's
/// `CSVLogger(separator=";")`, a European locale's export), `None` when it has none of them.
pub(crate) fn delimiter(header: &[u8]) -> Option<u8> {
    [b',', b'\t', b';']
        .into_iter()
        .map(|d| (d, header.iter().filter(|&&b| b == d).count()))
        .filter(|&(_, n)| n > 0)
        .max_by_key(|&(d, n)| (n, d == b','))
        .map(|(d, _)| d)
}

impl Stream for Csv {
    fn feed(&mut self, run: &mut RawRun, data: &[u8], eof: bool) -> Result<usize, ReadError> {
        let used = complete_lines(data, eof);
        if used == 0 {
            return Ok(0);
        }
        let data = &data[..used];
        let delim = *self.delim.get_or_insert_with(|| {
            let first = data.split(|b| *b == b'\n').next().unwrap_or(&[]);
            delimiter(first).unwrap_or(b',')
        });
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .delimiter(delim)
            .from_reader(data);
        for rec in rdr.records() {
            self.record += 1;
            let rec = rec.map_err(|e| self.parse_err("row", e.to_string()))?;
            self.row(run, rec.iter().map(|c| c.trim().to_string()).collect())?;
        }
        Ok(used)
    }

    fn finish(&self, run: &mut RawRun) {
        run.hints.x_unit = match self.step_col {
            Some((_, u)) => u,
            None => XUnit::Epoch,
        };
    }
}
