//! Where a training step of a text model spends its time: batch upload, forward, backward,
//! gradient norm + clipping, optimizer. Random tokens, the recipe's batch and sequence length,
//! dropout on. Without a recipe: the built-in default transformer (batch 32, seq 128).
//!
//! `cargo run --release --example step_profile -p contrai-train [STEPS] [RECIPE.toml]`
//! (a pretrained encoder's recipe, `model.kind = "bert"`, times its fine-tuning step).

use contrai_recipe::Recipe;
use contrai_train::calibrate::{PARTS, calibrate};

fn main() {
    let mut args = std::env::args().skip(1);
    let steps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(30);
    let recipe = match args.next() {
        None => Ok(Recipe::default()),
        Some(path) => Recipe::from_file(std::path::Path::new(&path))
            .map_err(|e| e.to_string())
            .and_then(|r| contrai_train::setup::sized(r).map_err(|e| e.to_string())),
    };
    let c = match recipe.and_then(|r| calibrate(&r, steps).map_err(|e| e.to_string())) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let total: f64 = c.ms_per_part.iter().sum();
    println!("{steps} steps, {total:.1} ms a step");
    println!("  median     {:>7.1} ms", c.ms_per_step);
    for (n, v) in PARTS.iter().zip(c.ms_per_part) {
        println!("  {n:<10} {v:>7.1} ms  {:>5.1} %", v / total * 100.0);
    }
}
