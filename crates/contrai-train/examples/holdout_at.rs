//! Benchmark only: the holdout accuracy of one checkpoint of a finished run (e.g. the end of
//! `main`), to compare phases side by side. A run itself reads its holdout once, at the end; this
//! tool reads it again on purpose, outside the run, and changes nothing in the run directory.
//!
//! `cargo run --release --example holdout_at -p contrai-train RUN_DIR STEP`

use std::path::Path;

use burn::module::Module;
use burn::tensor::Device;
use contrai_train::compress::RunData;
use contrai_train::evaluate::evaluate;

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
    let data = RunData::open(run)?;
    let dir = run
        .join("checkpoints")
        .join(contrai_train::checkpoint::dir_name(step));
    let model = data.model_at(&contrai_train::checkpoint::load(&dir)?)?.valid();
    let (loss, acc) = evaluate(&model, &data.holdout, 64, &Device::flex());
    Ok((acc, loss, data.holdout.len()))
}
