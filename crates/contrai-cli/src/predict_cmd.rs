//! `contrai predict`: a finished run's model applied to a data file.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use contrai_data::{Format, Source};
use contrai_run::FinalModel;
use contrai_train::predict::{PredictSummary, Predictor};

use crate::flag_values::choice;
use crate::progress::Bars;

/// Arguments of `contrai predict` (its help text is the subcommand's, in `main.rs`).
#[derive(Args)]
pub struct PredictArgs {
    /// The run directory `contrai train` wrote (a finished run: final/ holds its models).
    run: PathBuf,
    /// The samples: a .jsonl, .csv, .tsv or .parquet file with the run's text field.
    file: PathBuf,
    /// Which of the run's models: the refined f32 model, its int8 model, or the distilled student.
    #[arg(long, value_parser = choice::<FinalModel>(), default_value = "f32")]
    variant: FinalModel,
    /// Write the predictions here instead of stdout.
    #[arg(short, long)]
    out: Option<PathBuf>,
    /// The file's format, when the extension does not tell it: jsonl, csv, tsv or parquet.
    #[arg(long)]
    format: Option<Format>,
    /// A CSV/TSV file without a header row: its columns' names, in order (e.g. label,text).
    #[arg(long, value_delimiter = ',')]
    columns: Vec<String>,
    /// The field holding the text [default: the run's data.text].
    #[arg(long)]
    text: Option<String>,
    /// The field holding the id [default: the run's data.id; the line number when absent].
    #[arg(long)]
    id: Option<String>,
    /// The field holding a known label, for the accuracy [default: the run's data.label].
    #[arg(long)]
    label: Option<String>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `contrai predict`.
pub fn run(args: PredictArgs) -> anyhow::Result<ExitCode> {
    let mut predictor = Predictor::open(&args.run, args.variant)?;
    let fields = predictor.fields_mut();
    if let Some(t) = &args.text {
        fields.text.clone_from(t);
    }
    for (slot, given) in [(&mut fields.id, &args.id), (&mut fields.label, &args.label)] {
        if given.is_some() {
            slot.clone_from(given);
            fields.explicit = true;
        }
    }
    let source = Source::file(&args.file, args.format)?.headerless(&args.columns)?;
    let summary = match &args.out {
        Some(path) => {
            let file = contrai_base::AtomicFile::create(path)?;
            let mut w = std::io::BufWriter::new(file.handle()?);
            let summary = predictor.predict(&source, &mut w, &Bars::default())?;
            w.into_inner().map_err(|e| e.into_error())?;
            file.commit()?;
            summary
        }
        None => {
            let stdout = std::io::stdout();
            let mut w = std::io::BufWriter::new(stdout.lock());
            predictor.predict(&source, &mut w, &Bars::default())?
        }
    };
    let text = if args.json {
        serde_json::to_string_pretty(&summary)?
    } else {
        words(&summary, args.out.as_deref())
    };
    if args.out.is_some() {
        println!("{text}");
    } else {
        let _ = writeln!(std::io::stderr(), "{text}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The summary in a sentence or two.
fn words(s: &PredictSummary, out: Option<&std::path::Path>) -> String {
    let to = out.map_or(String::new(), |p| format!(" → {}", p.display()));
    let mut t = format!(
        "predicted {} samples with {} in {:.2} s ({:.0} samples/s){to}",
        s.samples, s.model, s.seconds, s.samples_per_second
    );
    if let Some(a) = s.accuracy {
        t.push_str(&format!(
            "\naccuracy on the {} labelled samples: {:.2} %",
            s.labelled,
            100.0 * a
        ));
        if s.unknown_labels > 0 {
            t.push_str(&format!(
                " ({} labels are none of the model's classes; counted as wrong)",
                s.unknown_labels
            ));
        }
    }
    t
}
