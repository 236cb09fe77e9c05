//! Where the runs of a path live and how each is read: the logs a folder holds (the same search
//! for a one-off read and for a log followed as it grows), and the reader of each file.

use std::fs;
use std::path::{Path, PathBuf};

use super::{
    Format, ReadError, Skipped, Stream, burn, csv_log, detect_format, file_head, file_name, hf, io_err,
    is_trainer_state, jsonl, keras_json, mlflow, mlflow_db, opens_trainer_state, sqlite_format, tensorboard,
    trackio, wandb, wandb_run,
};
use crate::series::{RawRun, Run};

/// A log file written by appending, and which reader takes its bytes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Appended {
    pub path: PathBuf,
    kind: Kind,
}

/// The reader of an appended file.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Jsonl,
    Csv,
    /// A TensorBoard event file, with its folder's role, and whether it is its role's first.
    Events(Option<&'static str>, bool),
    /// A W&B run file.
    Wandb,
}

impl Appended {
    /// A new reader at the start of the file.
    pub fn stream(&self) -> Box<dyn Stream> {
        match self.kind {
            Kind::Jsonl => Box::new(jsonl::Jsonl::new(&self.path)),
            Kind::Csv => Box::new(csv_log::Csv::new(&self.path)),
            Kind::Events(role, first) => Box::new(tensorboard::Events::new(&self.path, role, first)),
            Kind::Wandb => Box::new(wandb_run::WandbRun::new(&self.path)),
        }
    }
}

/// A Contrai run directory's own name and gradient clip, given to the run of its `metrics.jsonl`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RunDirHints {
    name: Option<String>,
    clip_norm: Option<f64>,
}

/// One source of runs under a path.
#[derive(Clone, Debug)]
pub(crate) enum Source {
    /// Files written by appending, read as they grow into one run: a JSONL or CSV log, or a
    /// TensorBoard run's event files.
    Appended {
        /// The run the files read into, empty.
        run: Box<RawRun>,
        files: Vec<Appended>,
        run_dir: Option<RunDirHints>,
        /// A file that fails to read gives no run instead of an error (a `.log` that looked
        /// like a table at its start).
        lenient: bool,
    },
    /// Files read whole whenever one changes: a Trainer state (rewritten at each save), an
    /// MLflow or Burn run, the W&B CSV exports of one folder (merged by run name).
    Whole { format: Format, paths: Vec<PathBuf> },
}

impl Source {
    /// What identifies the source across searches of a folder that grows: its format and where.
    pub fn key(&self) -> (String, PathBuf) {
        match self {
            Source::Appended { run, .. } => (run.format.clone(), PathBuf::from(&run.source)),
            Source::Whole { format, paths } => {
                (format.name().into(), paths.first().cloned().unwrap_or_default())
            }
        }
    }

    /// The format its files are read as.
    pub fn format(&self) -> Format {
        match self {
            Source::Appended { files, .. } => match files.first().map(|f| f.kind) {
                Some(Kind::Jsonl) => Format::Jsonl,
                Some(Kind::Csv) => Format::Csv,
                Some(Kind::Wandb) => Format::Wandb,
                _ => Format::Tensorboard,
            },
            Source::Whole { format, .. } => *format,
        }
    }

    /// The runs of a whole source.
    pub fn read_whole(format: Format, paths: &[PathBuf]) -> Result<Vec<Run>, ReadError> {
        let mut raws = Vec::new();
        for p in paths {
            raws.extend(match format {
                Format::HfTrainerState => vec![hf::read(p)?],
                Format::KerasJson => keras_json::read(p)?,
                Format::WandbCsv => wandb::read(p)?,
                Format::Mlflow => mlflow::read(p)?,
                Format::MlflowDb => mlflow_db::read(p)?,
                Format::Trackio => trackio::read(p)?,
                Format::Burn => vec![burn::read(&burn::file_root(p).unwrap_or_else(|| p.clone()))?],
                // Appended formats are never whole sources.
                Format::Tensorboard | Format::Csv | Format::Jsonl | Format::Wandb => Vec::new(),
            });
        }
        let runs = raws.into_iter().flat_map(RawRun::into_runs).collect();
        Ok(if format == Format::WandbCsv {
            merged_by_name(runs)
        } else {
            runs
        })
    }

    /// The runs of an appended source whose files were read into `raw` by `streams`.
    pub fn finish_appended(raw: &RawRun, streams: &[&dyn Stream], run_dir: Option<&RunDirHints>) -> Vec<Run> {
        let mut raw = raw.clone();
        for s in streams {
            s.finish(&mut raw);
        }
        let mut runs = raw.into_runs();
        if let Some(h) = run_dir {
            for r in &mut runs {
                if let Some(n) = &h.name {
                    r.name.clone_from(n);
                }
                r.hints.clip_norm = h.clip_norm;
            }
        }
        runs
    }
}

/// The source of one log file or folder read as `format`.
pub(crate) fn of_format(path: &Path, format: Format) -> Result<Source, ReadError> {
    let appended = |run: RawRun, files: Vec<(PathBuf, Kind)>| Source::Appended {
        run: Box::new(run),
        files: files
            .into_iter()
            .map(|(path, kind)| Appended { path, kind })
            .collect(),
        run_dir: None,
        lenient: false,
    };
    let one = |kind: Kind| vec![(path.to_path_buf(), kind)];
    Ok(match format {
        Format::Tensorboard => {
            let (run, files) = tensorboard::source(path)?;
            let mut roles = Vec::new();
            let files = files.into_iter().map(|(f, role)| {
                let first = !roles.contains(&role);
                roles.push(role);
                (f, Kind::Events(role, first))
            });
            appended(run, files.collect())
        }
        Format::Jsonl => appended(jsonl::Jsonl::run(path), one(Kind::Jsonl)),
        Format::Csv => appended(csv_log::Csv::run(path), one(Kind::Csv)),
        Format::Wandb => appended(wandb_run::WandbRun::run(path), one(Kind::Wandb)),
        Format::HfTrainerState
        | Format::KerasJson
        | Format::WandbCsv
        | Format::Mlflow
        | Format::MlflowDb
        | Format::Trackio
        | Format::Burn => Source::Whole {
            format,
            paths: vec![path.to_path_buf()],
        },
    })
}

/// A Contrai run's gradient clip (`[main] clip_norm` of the resolved `recipe.toml` it keeps), or
/// `None` when the directory holds no such recipe or the run does not clip.
fn recipe_clip_norm(root: &Path) -> Option<f64> {
    let text = fs::read_to_string(root.join("recipe.toml")).ok()?;
    let recipe: toml::Table = text.parse().ok()?;
    let v = recipe.get("main")?.get("clip_norm")?;
    let clip = v.as_float().or_else(|| v.as_integer().map(|i| i as f64))?;
    (clip.is_finite() && clip > 0.0).then_some(clip)
}

/// Runs of one name (a W&B export a metric a file: `train_loss.csv`, `val_loss.csv` of the same
/// run) as one run: the series of each, the first file's where two give the same one.
fn merged_by_name(runs: Vec<Run>) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for r in runs {
        match out.iter_mut().find(|o| o.name == r.name) {
            Some(o) => {
                for (s, data) in r.series {
                    o.series.entry(s).or_insert(data);
                }
                o.source = format!("{} + {}", o.source, r.source);
            }
            None => out.push(r),
        }
    }
    out
}

/// Every log found under a directory: each TensorBoard folder, trainer_state.json, JSONL, CSV,
/// W&B run folder, MLflow run and Burn artifact root is a source. A Contrai run directory is read
/// through its `metrics.jsonl` alone (its data partitions and decisions are not logs).
pub(crate) fn in_dir(root: &Path, skipped: &mut Vec<Skipped>) -> Result<Vec<Source>, ReadError> {
    let metrics = root.join("metrics.jsonl");
    if metrics.is_file() {
        let mut source = of_format(&metrics, Format::Jsonl)?;
        if let Source::Appended { run_dir, .. } = &mut source {
            *run_dir = Some(RunDirHints {
                name: root.file_name().map(|n| n.to_string_lossy().into_owned()),
                clip_norm: recipe_clip_norm(root),
            });
        }
        return Ok(vec![source]);
    }
    let mut sources = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    // Each folder once, however many links lead to it (a link to a folder above makes a loop).
    let mut seen = std::collections::HashSet::new();
    while let Some((dir, depth)) = stack.pop() {
        if !seen.insert(fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone())) {
            continue;
        }
        if let Some(file) = wandb_run::file_in(&dir) {
            sources.push(of_format(&file, Format::Wandb)?);
            continue;
        }
        if burn::is_burn_root(&dir) || mlflow::is_run_dir(&dir) {
            let format = if burn::is_burn_root(&dir) {
                Format::Burn
            } else {
                Format::Mlflow
            };
            sources.push(Source::Whole {
                format,
                paths: vec![dir],
            });
            continue;
        }
        let mut entries: Vec<PathBuf> = fs::read_dir(&dir)
            .map_err(|e| io_err(&dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        let mut has_events = false;
        let mut wandb = Vec::new();
        for p in &entries {
            if p.is_dir() {
                // Keras-style train/ and validation/ event folders belong to this run.
                if tensorboard::split_role(p).is_some() && tensorboard::has_event_files(p) {
                    has_events = true;
                } else if depth < 8 {
                    stack.push((p.clone(), depth + 1));
                }
                continue;
            }
            let name = file_name(p);
            let lower = name.to_ascii_lowercase();
            if name.starts_with("events.out.tfevents") {
                has_events = true;
            } else if name == "trainer_state.json" {
                sources.push(of_format(p, Format::HfTrainerState)?);
            } else if name == "trainer_log.jsonl" && dir.join("trainer_state.json").is_file() {
                // LLaMA-Factory writes both for one run: the Trainer's state is the fuller record
                // (the log tells the task, `context::from_folder`).
                continue;
            } else if lower.ends_with(".wandb") {
                sources.push(of_format(p, Format::Wandb)?);
            } else if lower.ends_with(".db")
                && let Some(format) = sqlite_format(p)
            {
                sources.push(of_format(p, format)?);
            } else if lower.ends_with(".jsonl") || lower.ends_with(".ndjson") {
                sources.push(of_format(p, Format::Jsonl)?);
            } else if lower.ends_with(".csv") || lower.ends_with(".log") {
                // Keras' CSVLogger writes any name (`training.log`, `predict_age.log`); a `.log`
                // that is no metrics table is someone's text log, passed over.
                match detect_format(p) {
                    Ok(Format::WandbCsv) => wandb.push(p.clone()),
                    Ok(Format::Csv) => {
                        // A table of runs' results beside their logs is passed over and said.
                        let head = file_head(p)?;
                        if let Some(reason) = csv_log::summary(&head, head.len() < super::HEAD_BYTES) {
                            skipped.push(Skipped {
                                path: p.clone(),
                                reason,
                            });
                            continue;
                        }
                        let mut csv = of_format(p, Format::Csv)?;
                        if let Source::Appended { lenient, .. } = &mut csv {
                            *lenient = lower.ends_with(".log");
                        }
                        sources.push(csv);
                    }
                    Ok(_) => {}
                    Err(_) if lower.ends_with(".log") => {}
                    // A table that is no log (a class list, an empty file) is passed over,
                    // said, and the logs beside it are read.
                    Err(e) => skipped.push(Skipped {
                        path: p.clone(),
                        reason: e.to_string(),
                    }),
                }
            } else if lower.ends_with(".json") {
                json_file(p, &mut sources, skipped)?;
            } else if is_trainer_state(p) {
                // A Trainer state saved under another name (the content tells, not the name).
                sources.push(of_format(p, Format::HfTrainerState)?);
            }
        }
        if !wandb.is_empty() {
            sources.push(Source::Whole {
                format: Format::WandbCsv,
                paths: wandb,
            });
        }
        if has_events {
            sources.push(of_format(&dir, Format::Tensorboard)?);
        }
    }
    Ok(newest_checkpoints(sources))
}

/// A `.json` file by its first bytes, read once: a Trainer state saved under another name or a
/// Keras History is a source; one too short to tell yet (being written) is passed over and said,
/// to be looked at again once it grows; any other (a model's config, a tokenizer) is no log.
fn json_file(p: &Path, sources: &mut Vec<Source>, skipped: &mut Vec<Skipped>) -> Result<(), ReadError> {
    let head = file_head(p)?;
    let head = String::from_utf8_lossy(&head);
    if opens_trainer_state(&head) {
        sources.push(of_format(p, Format::HfTrainerState)?);
    } else if keras_json::looks_like(&head) {
        sources.push(of_format(p, Format::KerasJson)?);
    } else if keras_json::undecided(&head) {
        skipped.push(Skipped {
            path: p.to_path_buf(),
            reason: "too short to tell its format yet (empty, or cut before its first value)".into(),
        });
    }
    Ok(())
}

/// The step of a Trainer's `checkpoint-<step>/` folder holding `state`, and the folder above it.
fn checkpoint_of(state: &Path) -> Option<(u64, &Path)> {
    let ckpt = state.parent()?;
    let step = file_name(ckpt).strip_prefix("checkpoint-")?.parse().ok()?;
    Some((step, ckpt.parent()?))
}

/// A Trainer writes its whole state into every `checkpoint-<step>/` it saves: the newest holds
/// the history of every earlier one, so it alone is read (one run for one output directory).
fn newest_checkpoints(sources: Vec<Source>) -> Vec<Source> {
    fn state(s: &Source) -> Option<(u64, &Path)> {
        match s {
            Source::Whole {
                format: Format::HfTrainerState,
                paths,
            } => paths.first().and_then(|p| checkpoint_of(p)),
            _ => None,
        }
    }
    let newer_beside = |s: &Source| {
        state(s).is_some_and(|(step, out)| {
            sources
                .iter()
                .filter_map(state)
                .any(|(n, o)| o == out && n > step)
        })
    };
    let keep: Vec<bool> = sources.iter().map(|s| !newer_beside(s)).collect();
    sources
        .into_iter()
        .zip(keep)
        .filter_map(|(s, k)| k.then_some(s))
        .collect()
}
