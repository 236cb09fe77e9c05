//! `contrai data`: audit a dataset, split it without leaks, or write the demo set.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use contrai_data::commit::Existing;
use contrai_data::contamination::{self, Contamination, ContaminationConfig, EvalSet};
use contrai_data::demo::{self, DemoConfig};
use contrai_data::drift::{DriftConfig, Version, drift};
use contrai_data::parent;
use contrai_data::split::{Dedup, OnConflict, SplitConfig, split};
use contrai_data::store::StoreDir;

use crate::flag_values::choice;
use contrai_data::read::QuotedField;
use contrai_data::{Audit, AuditConfig, FieldSpec, Format, IndexConfig, Source};

use crate::progress::Bars;

/// The `contrai data` subcommands.
#[derive(Subcommand)]
pub enum DataCommand {
    /// Find exact and near duplicates, label conflicts, empty texts, length outliers and class
    /// balance. Exit code 0 when clean, 1 when something needs attention, 2 on bad input.
    ///
    /// With --against, also the samples that share a 13-word run or a near-duplicate with an
    /// evaluation set (a benchmark, your own test data): contamination, exit code 1.
    ///
    /// Example: contrai data audit mail.jsonl --text body --label is_spam
    ///          contrai data audit train.jsonl --against gsm8k-test.jsonl:question --against ours.csv
    Audit {
        #[command(flatten)]
        input: InputArgs,
        #[command(flatten)]
        against: AgainstArgs,
        /// Print the full report (every cluster) as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Split into train, val and holdout so that no sample, and no near-copy of one, sits in
    /// two partitions. Writes DIR/{train,val,holdout}.<ext> in the input's format and
    /// DIR/manifest.json, then re-reads them to prove there is no leak.
    ///
    /// Near-copies: texts whose words differ by at most 5 % (one word from 8 words, two from 40,
    /// ...), or that share 80 % of their word 5-grams (character 5-grams under 20 words).
    ///
    /// The split is written beside DIR and put in place in one step: a crash leaves the old
    /// split or the new one, never a mix, and a failed split leaves nothing. A split already in
    /// DIR is replaced only with --force.
    ///
    /// A new version of the data splits with `--from` the old split: every old sample keeps its
    /// partition, a new near-copy of one follows it (or is dropped when it resembles samples of
    /// two partitions), new samples are placed as before, and the manifest records its parent.
    ///
    /// Example: contrai data split mail.csv --out splits/mail --ratios 0.8,0.1,0.1 --seed 7
    ///          contrai data split mail-december.csv --from splits/mail --out splits/mail-v2
    Split {
        #[command(flatten)]
        input: InputArgs,
        /// Output directory.
        #[arg(long, short)]
        out: PathBuf,
        /// Shares of train, val and holdout, comma-separated; they must sum to 1
        /// [default: 0.85,0.10,0.05, or the parent's].
        #[arg(long, value_parser = parse_ratios)]
        ratios: Option<[f64; 3]>,
        /// Seed of the placement hash: the same seed and data give the same split, byte for byte
        /// [default: 42, or the parent's].
        #[arg(long)]
        seed: Option<u64>,
        /// Clusters whose members disagree on the label: drop them, keep the majority, or keep all
        /// [default: drop, or the parent's].
        #[arg(long, value_parser = choice::<OnConflict>())]
        on_conflict: Option<OnConflict>,
        /// Duplicates to drop: one per identical text (exact), one per cluster (near), or none
        /// [default: exact, or the parent's].
        #[arg(long, value_parser = choice::<Dedup>())]
        dedup: Option<Dedup>,
        /// The split this data is a new version of (its directory or manifest.json), checked
        /// against its files. Its parameters and fields are the defaults; a differing one is refused.
        #[arg(long)]
        from: Option<PathBuf>,
        /// With --from: accept a holdout that lost some of the parent's samples (they left the
        /// data); without it that is an error, since its figures no longer compare.
        #[arg(long, requires = "from")]
        allow_shrink: bool,
        /// Replace a split already in --out, once the new one is complete (the folder is swapped
        /// in one step: a crash leaves the old split or the new one, never a mix).
        #[arg(long)]
        force: bool,
        /// With --force: keep the replaced split as <out>.prev.
        #[arg(long)]
        keep_previous: bool,
        /// Evaluation sets whose matches are dropped from every partition (see `audit --against`).
        #[command(flatten)]
        against: AgainstArgs,
        /// Print the manifest as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Compare two versions of a dataset (two files, or two split directories partition by
    /// partition): rows added, removed and changed; new near-copies of old samples; label shift
    /// (chi-square), length shift (Kolmogorov–Smirnov) and vocabulary shift (Jensen–Shannon
    /// divergence against random halves, with the n-grams that moved most). Exit code 0 when
    /// nothing shifted, 1 on drift, 2 on bad input.
    ///
    /// Example: contrai data drift mail-2025.jsonl mail-2026.jsonl --label is_spam --html drift.html
    Drift {
        /// The old version: a .jsonl, .csv, .tsv or .parquet file, or a split directory.
        old: PathBuf,
        /// The new version, the same way.
        new: PathBuf,
        /// The files' format, when the extension does not tell it.
        #[arg(long)]
        format: Option<Format>,
        #[command(flatten)]
        fields: FieldArgs,
        /// Print the full report as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// Also write the report as a self-contained HTML page.
        #[arg(long)]
        html: Option<PathBuf>,
    },
    /// Write the built-in demo dataset (product reviews with planted defects) as JSONL.
    Demo {
        /// Output file.
        #[arg(long, short)]
        out: PathBuf,
        /// Original reviews before defects are planted (the file holds about 9 % more rows).
        #[arg(long, default_value_t = DemoConfig::default().base)]
        base: usize,
        /// Seed.
        #[arg(long, default_value_t = DemoConfig::default().seed)]
        seed: u64,
    },
}

/// What to read and how to compare texts.
#[derive(Args)]
pub struct InputArgs {
    /// A .jsonl, .csv, .tsv or .parquet file.
    #[arg(required_unless_present = "demo", conflicts_with = "demo")]
    path: Option<PathBuf>,
    /// Use the built-in demo dataset instead of a file.
    #[arg(long)]
    demo: bool,
    /// The format, when the extension does not tell it: jsonl, csv, tsv or parquet.
    #[arg(long)]
    format: Option<Format>,
    /// A CSV/TSV file without a header row: its columns' names, in order (e.g. label,text).
    #[arg(long, value_delimiter = ',')]
    columns: Vec<String>,
    /// A CSV quoted field spanning more lines than this is taken for a quote never closed: an
    /// error at the line where it opened (with --skip-bad that row is skipped and counted), and
    /// the rows after it are read.
    #[arg(long, value_name = "LINES", default_value_t = QuotedField::default().lines)]
    max_field_lines: u64,
    /// The same for a quoted field holding more bytes than this.
    #[arg(long, value_name = "BYTES", default_value_t = QuotedField::default().bytes)]
    max_field_bytes: u64,
    #[command(flatten)]
    fields: FieldArgs,
}

/// Evaluation sets to check the data against.
#[derive(Args)]
pub struct AgainstArgs {
    /// An evaluation set: a .jsonl, .csv, .tsv or .parquet file, its text in the --text field,
    /// or FILE:FIELD. Repeat for several.
    #[arg(long, value_name = "FILE[:FIELD]")]
    against: Vec<String>,
    /// Words of the runs compared with the evaluation sets (13, as lm-evaluation-harness).
    #[arg(long, default_value_t = contrai_data::contamination::NGRAM)]
    ngram: usize,
}

impl AgainstArgs {
    fn sets(&self, text: &str) -> anyhow::Result<Vec<EvalSet>> {
        Ok(self
            .against
            .iter()
            .map(|a| EvalSet::parse(a, text))
            .collect::<Result<_, _>>()?)
    }
}

/// Which fields to read and how to compare texts.
#[derive(Args)]
pub struct FieldArgs {
    /// Field holding the text [default: text].
    #[arg(long)]
    text: Option<String>,
    /// Field holding the label (ignored if absent, unless given explicitly).
    #[arg(long)]
    label: Option<String>,
    /// Field holding a unique id (default: `id` if present, else the line number).
    #[arg(long)]
    id: Option<String>,
    /// Skip and count malformed rows instead of stopping at the first one.
    #[arg(long)]
    skip_bad: bool,
    /// Jaccard similarity of shingles (word 5-grams; character 5-grams under 20 words) at or
    /// above which two texts are near-copies [default: 0.8].
    #[arg(long)]
    threshold: Option<f64>,
    /// Texts whose words differ by at most this share of the longer one's are near-copies too:
    /// words replaced, inserted or deleted, at least one, for texts of 8 words or more
    /// [default: 0.05, one word in 20; 0 turns this rule off].
    #[arg(long, value_name = "SHARE")]
    edit_share: Option<f64>,
    /// MinHash permutations [default: 256].
    #[arg(long)]
    num_perm: Option<usize>,
    /// Keep the texts' hashes in a persisted index in .contrai-index/ beside the data, and
    /// reuse those already there: an unchanged file is not hashed again, an appended one only
    /// for its new rows.
    #[arg(long)]
    index: bool,
    /// The persisted index in this folder instead (implies --index).
    #[arg(long, value_name = "DIR")]
    index_dir: Option<PathBuf>,
}

impl InputArgs {
    fn source(&self) -> anyhow::Result<Source> {
        if self.demo {
            return Ok(demo::generate(DemoConfig::default()).source());
        }
        let path = self.path.clone().context("give a data file or --demo")?;
        let limit = QuotedField {
            lines: self.max_field_lines,
            bytes: self.max_field_bytes,
        };
        Ok(Source::file(path, self.format)?
            .headerless(&self.columns)?
            .quoted_field(limit))
    }
}

impl FieldArgs {
    fn audit_config(&self) -> AuditConfig {
        self.audit_config_over(&AuditConfig::default())
    }

    /// The settings given, else those of `base` (the defaults, or a parent split's).
    fn audit_config_over(&self, base: &AuditConfig) -> AuditConfig {
        let field = |given: &Option<String>, was: Option<&String>, role: &str| {
            Some(given.clone().or(was.cloned()).unwrap_or_else(|| role.into()))
        };
        let (index, fields) = (&base.index, &base.fields);
        AuditConfig {
            index: {
                let given = IndexConfig {
                    threshold: self.threshold.unwrap_or(index.threshold),
                    num_perm: self.num_perm.unwrap_or(index.num_perm),
                    ..*index
                };
                match self.edit_share {
                    Some(share) => given.with_edit_share(share),
                    None => given,
                }
            },
            fields: FieldSpec {
                text: self.text.clone().unwrap_or_else(|| fields.text.clone()),
                label: field(&self.label, fields.label.as_ref(), "label"),
                id: field(&self.id, fields.id.as_ref(), "id"),
                explicit: self.label.is_some() || self.id.is_some() || fields.explicit,
            },
            skip_bad: self.skip_bad,
            store: match (&self.index_dir, self.index) {
                (Some(d), _) => Some(StoreDir::In(d.clone())),
                (None, true) => Some(StoreDir::Beside),
                (None, false) => None,
            },
        }
    }
}

fn parse_ratios(s: &str) -> Result<[f64; 3], String> {
    let parts: Vec<f64> = s
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<f64>()
                .map_err(|_| format!("`{p}` is not a number"))
        })
        .collect::<Result<_, _>>()?;
    <[f64; 3]>::try_from(parts)
        .map_err(|p| format!("expected three ratios (train,val,holdout), got {}", p.len()))
}

/// Runs a `contrai data` subcommand.
pub fn run(cmd: DataCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        DataCommand::Audit { input, against, json } => {
            let cfg = input.fields.audit_config();
            let sets = against.sets(&cfg.fields.text)?;
            let source = input.source()?;
            let audit = Audit::run(vec![source.clone()], cfg.clone(), &Bars::default())?;
            let report = audit.report();
            let contamination = if sets.is_empty() {
                None
            } else {
                let check = ContaminationConfig {
                    ngram: against.ngram,
                    index: cfg.index,
                };
                Some(contamination::check(
                    &source,
                    &cfg.fields,
                    &sets,
                    &check,
                    Some(&audit.index),
                    &Bars::default(),
                )?)
            };
            if json {
                let out = AuditJson {
                    report: &report,
                    contamination: contamination.as_ref(),
                };
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                print!("{report}");
                if let Some(c) = &contamination {
                    print!("{c}");
                }
            }
            let clean = report.problems.is_empty() && contamination.is_none_or(|c| c.contaminated == 0);
            Ok(ExitCode::from(if clean { 0 } else { 1 }))
        }
        DataCommand::Split {
            input,
            out,
            ratios,
            seed,
            on_conflict,
            dedup,
            from,
            allow_shrink,
            force,
            keep_previous,
            against,
            json,
        } => {
            // Each setting given, else the parent's (a version keeps them), else the default.
            let base = match from.as_deref() {
                Some(dir) => parent::settings(dir)?,
                None => SplitConfig::default(),
            };
            let cfg = SplitConfig {
                ratios: ratios.unwrap_or(base.ratios),
                seed: seed.unwrap_or(base.seed),
                on_conflict: on_conflict.unwrap_or(base.on_conflict),
                dedup: dedup.unwrap_or(base.dedup),
                audit: input.fields.audit_config_over(&base.audit),
                parent: from,
                allow_shrink,
                against: Vec::new(),
                ngram: against.ngram,
                existing: match (force, keep_previous) {
                    (_, true) => Existing::KeepPrevious,
                    (true, false) => Existing::Replace,
                    (false, false) => Existing::Refuse,
                },
            };
            let cfg = SplitConfig {
                against: against.sets(&cfg.audit.fields.text)?,
                ..cfg
            };
            let outcome = split(input.source()?, &out, &cfg, &Bars::default())?;
            for note in &outcome.leftovers {
                eprintln!("{note}");
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&outcome.manifest)?);
                return Ok(ExitCode::SUCCESS);
            }
            print!("{}", outcome.report);
            print_split(&outcome.manifest, &out);
            if let Some(w) = outcome.manifest.heavy_drop() {
                eprintln!("\nwarning: {w}");
            }
            Ok(ExitCode::SUCCESS)
        }
        DataCommand::Drift {
            old,
            new,
            format,
            fields,
            json,
            html,
        } => {
            let (old, new) = (Version::open(&old, format)?, Version::open(&new, format)?);
            let cfg = DriftConfig {
                audit: fields.audit_config(),
            };
            let report = drift(&old, &new, &cfg, &Bars::default())?;
            if let Some(path) = &html {
                contrai_base::write_atomic(path, contrai_report::drift::page(&report).as_bytes())?;
                eprintln!("wrote {}", path.display());
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{report}");
            }
            Ok(ExitCode::from(u8::from(report.drifted)))
        }
        DataCommand::Demo { out, base, seed } => {
            if base == 0 {
                bail!("--base must be at least 1");
            }
            let set = demo::generate(DemoConfig { base, seed });
            let mut bytes = set.lines.join("\n").into_bytes();
            bytes.push(b'\n');
            contrai_base::write_atomic(&out, &bytes)?;
            eprintln!("wrote {} rows to {}", set.lines.len(), out.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `audit --json`: the report, and the contamination found when asked for.
#[derive(serde::Serialize)]
struct AuditJson<'a> {
    #[serde(flatten)]
    report: &'a contrai_data::audit::AuditReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    contamination: Option<&'a Contamination>,
}

fn print_split(m: &contrai_data::split::Manifest, out: &std::path::Path) {
    println!("\nsplit into {} (seed {}):", out.display(), m.params.seed);
    for p in &m.partitions {
        println!(
            "  {:<8} {:>7} samples  {}",
            p.name,
            p.count,
            out.join(&p.file).display()
        );
    }
    let dropped: Vec<String> = m
        .dropped
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    if !dropped.is_empty() {
        println!("  dropped: {}", dropped.join(", "));
    }
    if let Some(c) = &m.contamination {
        for s in &c.sets {
            println!(
                "  against {}: {} samples matched ({}-grams or near-duplicates), dropped",
                s.file, s.matched, c.ngram
            );
        }
    }
    if let Some(p) = &m.parent {
        println!(
            "  version {} of {} (version {}): kept {:?}, new {:?}, gone {:?} (train, val, holdout); {} new placed with their near-copies, {} dropped between partitions",
            m.version, p.manifest, p.version, p.kept, p.added, p.lost, p.pulled, p.bridges
        );
    }
    if !m.locked_conflicts.is_empty() {
        println!(
            "  {} new rows conflict with a locked sample of the parent (another label on the same text or a near-copy): dropped, the parent's kept",
            m.locked_conflicts.len()
        );
        for c in m.locked_conflicts.iter().take(5) {
            println!("    {} ({}) ~ {} in {}", c.id, c.label, c.parent_id, c.partition);
        }
        if m.locked_conflicts.len() > 5 {
            println!(
                "    … {} more (--json lists them all)",
                m.locked_conflicts.len() - 5
            );
        }
    }
    println!(
        "  guard: {} shared texts, {} cross-partition near-duplicate pairs: {}",
        m.guard.shared_content_hashes,
        m.guard.cross_partition_near_pairs,
        if m.guard.passed { "no leak" } else { "LEAK" }
    );
    println!("  manifest: {}", out.join("manifest.json").display());
}
