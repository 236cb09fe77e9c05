//! Benchmark only: a finished run's partitions as token ids and class indices, exactly as Contrai
//! encoded them, so that an anchor in another framework (`scripts/bench/compress/`) trains and
//! evaluates on the same inputs. Reads the holdout outside the run on purpose.
//!
//! `cargo run --release --example export_tokens -p contrai-train RUN_DIR OUT.json`

use std::path::Path;

use contrai_train::batch::{Encoded, Inputs};
use contrai_train::compress::RunData;
use serde_json::json;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(run), Some(out)) = (args.first(), args.get(1)) else {
        eprintln!("usage: export_tokens RUN_DIR OUT.json");
        std::process::exit(2);
    };
    if let Err(e) = export(Path::new(run), Path::new(out)) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn export(run: &Path, out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let d = RunData::open(run)?;
    let part = |e: &Encoded| match &e.inputs {
        Inputs::Tokens(ids) => json!({"ids": ids, "labels": e.labels}),
        Inputs::Features(x) => json!({"features": x, "labels": e.labels}),
    };
    let doc = json!({
        "seq": d.train.width,
        "classes": d.classes.names,
        "train": part(&d.train),
        "val": part(&d.val),
        "holdout": part(&d.holdout),
    });
    std::fs::write(out, serde_json::to_vec(&doc)?)?;
    Ok(())
}
