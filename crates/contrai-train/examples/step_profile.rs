//! Where a training step of the default transformer spends its time: batch upload, forward,
//! backward, gradient norm + clipping, optimizer. Random tokens, batch 32, seq 128, dropout on.
//!
//! `cargo run --release --example step_profile -p contrai-train [STEPS]`

use contrai_recipe::Recipe;
use contrai_train::calibrate::{PARTS, calibrate};

fn main() {
    let steps: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(30);
    let c = match calibrate(&Recipe::default(), steps) {
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
