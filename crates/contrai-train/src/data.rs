//! The data stage of a run: audit and leakage-proof split (or an existing split), then the
//! partitions read into memory. The holdout stays sealed until [`Holdout::read_once`].

use std::path::{Path, PathBuf};

use contrai_data::split::{Manifest, SplitConfig, split};
use contrai_data::text::hash_hex;
use contrai_data::{AuditConfig, Content, FieldSpec, Format, IndexConfig, Progress, Source};
use contrai_recipe::{ModelKind, Recipe};
use xxhash_rust::xxh3::xxh3_128;

use crate::error::{Result, TrainError};

/// One partition's ids, texts and labels (as written in the data).
#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// Sample ids (the id field, or line numbers).
    pub ids: Vec<String>,
    /// Texts.
    pub texts: Vec<String>,
    /// Labels, one per text.
    pub labels: Vec<String>,
}

impl Samples {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }
}

/// The holdout partition, read at most once.
#[derive(Debug)]
pub struct Holdout {
    file: Option<PathBuf>,
    format: Format,
    fields: FieldSpec,
    reads: usize,
    ledger: Option<PathBuf>,
}

impl Holdout {
    /// Counts reads in `path` across sessions: a run killed after reading its holdout and resumed
    /// reads it again, and says so.
    pub fn with_ledger(mut self, path: PathBuf) -> Holdout {
        self.ledger = Some(path);
        self
    }

    /// Reads the holdout; a second call is refused.
    pub fn read_once(&mut self) -> Result<Samples> {
        if self.reads > 0 {
            return Err(TrainError::HoldoutReadTwice);
        }
        // Counted before the read, so a session that dies while reading is counted too.
        self.reads = match &self.ledger {
            Some(ledger) => contrai_run::holdout::record_read(ledger)?,
            None => 1,
        };
        match &self.file {
            Some(f) => read_partition(f, self.format, &self.fields),
            None => Ok(Samples::default()),
        }
    }

    /// How many times the holdout was read: 0 or 1, more when an earlier session of the run read
    /// it and did not finish.
    pub fn reads(&self) -> usize {
        self.reads
    }
}

/// The split partitions of a run.
#[derive(Debug)]
pub struct Prepared {
    /// The split directory (holds `manifest.json`).
    pub dir: PathBuf,
    /// The split's manifest.
    pub manifest: Manifest,
    /// Training samples.
    pub train: Samples,
    /// Validation samples.
    pub val: Samples,
    /// The sealed holdout.
    pub holdout: Holdout,
}

/// The split configuration a recipe asks for.
pub fn split_config(recipe: &Recipe) -> SplitConfig {
    let d = &recipe.data;
    SplitConfig {
        ratios: [d.split.train, d.split.val, d.split.holdout],
        seed: recipe.run.seed,
        on_conflict: d.on_label_conflict,
        dedup: d.dedup,
        audit: AuditConfig {
            index: IndexConfig {
                content: match recipe.model.kind {
                    ModelKind::Mlp => Content::Numeric,
                    _ => Content::Text,
                },
                threshold: d.near_duplicates.threshold,
                ..IndexConfig::default().with_edit_share(d.near_duplicates.edit_share)
            },
            fields: fields(recipe),
            skip_bad: false,
            store: None,
        },
        // The run owns its `data/`: a split left by an attempt that never trained is replaced.
        existing: contrai_data::commit::Existing::Replace,
        ..SplitConfig::default()
    }
}

fn fields(recipe: &Recipe) -> FieldSpec {
    FieldSpec {
        text: recipe.data.text.clone(),
        label: Some(recipe.data.label.clone()),
        id: Some(recipe.data.id.clone()),
        explicit: false,
    }
}

/// Which split a run reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// A fresh run: the recipe's data split (or its split directory copied) into `<run>/data`.
    No,
    /// A resumed run: the split in `<run>/data`, refused when the recipe's data changed since.
    Checked,
    /// The split in `<run>/data`, whatever became of the recipe's data.
    Kept,
}

/// Splits the recipe's data into `<run>/data` (or, on `reuse`, the split already there; or the
/// split directory the recipe names), refuses leaking partitions, and reads train and val.
pub fn prepare(recipe: &Recipe, run_dir: &Path, progress: &dyn Progress, reuse: Reuse) -> Result<Prepared> {
    let own = run_dir.join("data");
    let given = PathBuf::from(&recipe.data.path);
    let dir = if reuse != Reuse::No && own.join("manifest.json").is_file() {
        if reuse == Reuse::Checked {
            unchanged_since(recipe, &own)?;
        }
        own
    } else if !recipe.data.path.is_empty() && given.join("manifest.json").is_file() {
        copy_split(&given, &own)?;
        own
    } else {
        let source = if recipe.data.path.is_empty() {
            contrai_data::demo::generate(contrai_data::demo::DemoConfig::default()).source()
        } else {
            Source::file(&given, recipe.data.format)?.headerless(&recipe.data.columns)?
        };
        split(source, &own, &split_config(recipe), progress)?;
        own
    };
    let manifest = read_manifest(&dir)?;
    refuse_leaks(&dir, &manifest)?;
    let fields = FieldSpec {
        explicit: true,
        ..fields(recipe)
    };
    let file = |name: &str| -> Option<PathBuf> {
        let p = manifest.partitions.iter().find(|p| p.name == name)?;
        let f = dir.join(&p.file);
        (p.count > 0 && f.is_file()).then_some(f)
    };
    let read = |name: &str| match file(name) {
        Some(f) => read_partition(&f, manifest.format, &fields),
        None => Ok(Samples::default()),
    };
    let train = read("train")?;
    let val = read("val")?;
    if train.is_empty() {
        return Err(TrainError::BadData(format!(
            "the train partition in {} is empty",
            dir.display()
        )));
    }
    let holdout = Holdout {
        file: file("holdout"),
        format: manifest.format,
        fields,
        reads: 0,
        ledger: None,
    };
    Ok(Prepared {
        dir,
        manifest,
        train,
        val,
        holdout,
    })
}

/// A resumed run trains on its own copy of the split: when the data its recipe names changed
/// since (a new version of the split directory, or another file), resuming would mix two
/// versions of the data, and it is refused.
fn unchanged_since(recipe: &Recipe, own: &Path) -> Result<()> {
    let given = PathBuf::from(&recipe.data.path);
    let (mine, mine_bytes) = Manifest::read(&own.join("manifest.json"))?;
    let what = if recipe.data.path.is_empty() {
        None
    } else if given.join("manifest.json").is_file() {
        let (now, bytes) = Manifest::read(&given.join("manifest.json"))?;
        (xxh3_128(&bytes) != xxh3_128(&mine_bytes)).then(|| {
            format!(
                "the split {} changed since the run copied it: it is version {} with {} samples, the run's is version {} with {}",
                given.display(),
                now.version,
                now.partitions.iter().map(|p| p.count).sum::<u64>(),
                mine.version,
                mine.partitions.iter().map(|p| p.count).sum::<u64>()
            )
        })
    } else if let (true, Some(was)) = (given.is_file(), &mine.source_xxh3) {
        let now = Source::file(&given, recipe.data.format)?
            .file_digest()?
            .map(hash_hex);
        (now.as_deref() != Some(was.as_str())).then(|| {
            format!(
                "{} changed since the run split it (xxh3-128 {was} then, {} now)",
                given.display(),
                now.unwrap_or_default()
            )
        })
    } else {
        None
    };
    match what {
        None => Ok(()),
        Some(what) => Err(TrainError::SplitChanged { what }),
    }
}

/// A split whose guard found leaks is refused before anything trains on it.
fn refuse_leaks(dir: &Path, manifest: &Manifest) -> Result<()> {
    if manifest.guard.passed {
        return Ok(());
    }
    Err(TrainError::Leak {
        dir: dir.to_path_buf(),
        shared: manifest.guard.shared_content_hashes,
        near: manifest.guard.cross_partition_near_pairs,
    })
}

/// Copies an existing split directory into the run's `data/` (the run keeps what it trained on,
/// whatever happens to the original), each file checked against the manifest's xxh3-128 and
/// written atomically, the manifest last. A leaking split is refused before any copy.
fn copy_split(from: &Path, to: &Path) -> Result<()> {
    let path = from.join("manifest.json");
    let (manifest, bytes) = Manifest::read(&path)?;
    refuse_leaks(from, &manifest)?;
    manifest.verify_files(from, &path)?;
    std::fs::create_dir_all(to).map_err(|e| TrainError::io(to, e))?;
    for p in manifest.partitions.iter().filter(|p| p.count > 0) {
        let src = from.join(&p.file);
        let file = std::fs::read(&src).map_err(|e| TrainError::io(&src, e))?;
        contrai_base::write_atomic(to.join(&p.file), &file)?;
    }
    contrai_base::write_atomic(to.join("manifest.json"), &bytes)?;
    Ok(())
}

fn read_manifest(dir: &Path) -> Result<Manifest> {
    Ok(Manifest::read(&dir.join("manifest.json"))?.0)
}

/// Reads one partition file; every row needs a text and a label. Rows are numbered when the
/// partition has no id field (a split of input without ids).
fn read_partition(path: &Path, format: Format, fields: &FieldSpec) -> Result<Samples> {
    let source = Source::of_format(path, format);
    let records = match source.records(fields) {
        Err(contrai_data::DataError::MissingField { role: "id", .. }) => source.records(&FieldSpec {
            id: None,
            ..fields.clone()
        }),
        other => other,
    };
    let mut out = Samples::default();
    for rec in records? {
        let rec = rec?;
        let label = rec.label.ok_or_else(|| {
            TrainError::BadData(format!(
                "{}:{}: sample `{}` has no label",
                path.display(),
                rec.line,
                rec.id
            ))
        })?;
        out.ids.push(rec.id);
        out.texts.push(rec.text.unwrap_or_default());
        out.labels.push(label);
    }
    Ok(out)
}
