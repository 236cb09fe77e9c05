//! Benchmark only: the holdout accuracy of one checkpoint of a finished run (e.g. the end of
//! `main`), to compare phases side by side. A run itself reads its holdout once, at the end; this
//! tool reads it again on purpose, outside the run, and changes nothing in the run directory.
//!
//! `cargo run --release --example holdout_at -p contrai-train RUN_DIR STEP`

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::store::ModuleRecord;
use burn::tensor::{Bytes, Device};
use contrai_data::Silent;
use contrai_recipe::Recipe;
use contrai_train::batch::{Classes, Encoded};
use contrai_train::model::TextClassifier;
use contrai_train::tokenizer::Tokenizer;
use contrai_train::trainer::evaluate;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(run), Some(step)) = (args.first(), args.get(1).and_then(|s| s.parse::<u64>().ok())) else {
        eprintln!("usage: holdout_at RUN_DIR STEP");
        std::process::exit(2);
    };
    match holdout_at(Path::new(run), step) {
        Ok((acc, loss, n)) => {
            println!("{{\"step\":{step},\"holdout_accuracy\":{acc},\"holdout_loss\":{loss},\"samples\":{n}}}")
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

fn holdout_at(run: &Path, step: u64) -> Result<(f32, f32, usize), Box<dyn std::error::Error>> {
    let recipe = Recipe::from_file(&run.join("recipe.toml"))?;
    let tok = Tokenizer::load(&run.join("tokenizer.json"))?;
    let classes: Classes = serde_json::from_slice(&std::fs::read(run.join("classes.json"))?)?;
    let mut prepared = contrai_train::data::prepare(&recipe, run, &Silent, true)?;
    let holdout = prepared.holdout.read_once()?;
    let hold = Encoded::new(&holdout, &tok, &classes, recipe.model.seq_len, "holdout")?;
    let dir: PathBuf = run
        .join("checkpoints")
        .join(contrai_train::checkpoint::dir_name(step));
    let loaded = contrai_train::checkpoint::load(&dir)?;
    let device = Device::flex();
    let model = TextClassifier::new(&recipe.model, classes.names.len(), recipe.run.seed, &device)?;
    let record = ModuleRecord::from_bytes(Bytes::from_bytes_vec(loaded.model))?;
    let model = model.try_load_record(record)?;
    let (loss, acc) = evaluate(&model, &hold, 64, &device);
    Ok((acc, loss, hold.len()))
}
