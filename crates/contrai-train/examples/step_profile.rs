//! Where a training step of a text model spends its time: batch upload, forward, backward,
//! gradient norm + clipping, optimizer. Dropout on; the recipe's batch and sequence length.
//! Without a recipe: the built-in default transformer (batch 32, seq 128).
//!
//! `cargo run --release --example step_profile -p contrai-train [STEPS] [RECIPE.toml] [--real]
//! [--denormals keep|probe]`
//!
//! - a pretrained encoder's recipe (`model.kind = "bert"`) times its fine-tuning step;
//! - `--real` trains on the batches a run of the recipe draws (its data split into a temporary
//!   directory; without `data.path`, the built-in default run's corpus) instead of random tokens;
//! - `--denormals keep` computes with denormals (as Contrai did before it flushed them);
//!   `probe` keeps them too and prints, by kernel, the share of subnormal values read and written.

use contrai_recipe::Recipe;
use contrai_train::calibrate::{PARTS, Tokens, calibrate_on};
use contrai_train::setup::Setup;
use contrai_train::{Options, Stderr};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().position(|a| a == name);
    let real = flag("--real").is_some();
    let denormals = flag("--denormals")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str);
    let plain: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with("--") && flag("--denormals").is_none_or(|d| *i != d + 1))
        .map(|(_, a)| a)
        .collect();
    let steps: usize = plain.first().and_then(|s| s.parse().ok()).unwrap_or(30);
    let recipe = match plain.get(1) {
        None => Recipe::default(),
        Some(path) => Recipe::from_file(std::path::Path::new(path)).map_err(|e| e.to_string())?,
    };
    let recipe = contrai_train::setup::sized(recipe).map_err(|e| e.to_string())?;
    contrai_train::process::setup();
    match denormals {
        None => {}
        Some("keep") => contrai_kernels::denormals::keep(),
        Some("probe") => contrai_kernels::denormals::probe(),
        Some(other) => return Err(format!("--denormals takes keep or probe, not {other:?}")),
    }
    let scratch = std::env::temp_dir().join(format!("contrai-step-profile-{}", std::process::id()));
    let c = if real {
        let setup = Setup::open(&Options::new(recipe, &scratch), &contrai_data::Silent, &Stderr);
        let c = setup.and_then(|s| {
            let classes = s.data.extras.classes.names.len();
            calibrate_on(&s.recipe, steps, Tokens::Data(&s.data.train, classes))
        });
        let _ = std::fs::remove_dir_all(&scratch);
        c
    } else {
        calibrate_on(&recipe, steps, Tokens::Random)
    }
    .map_err(|e| e.to_string())?;
    let total: f64 = c.ms_per_part.iter().sum();
    println!("{steps} steps, {total:.1} ms a step");
    println!("  median     {:>7.1} ms", c.ms_per_step);
    for (n, v) in PARTS.iter().zip(c.ms_per_part) {
        println!("  {n:<10} {v:>7.1} ms  {:>5.1} %", v / total * 100.0);
    }
    if denormals == Some("probe") {
        println!("\nsubnormal values, by kernel (share of the values read / written):");
        for (site, t) in contrai_kernels::denormals::probed() {
            let share = |(n, d): (u64, u64)| 100.0 * d as f64 / n.max(1) as f64;
            println!(
                "  {site:<24} {:>6} calls  read {:>9.5} %  written {:>9.5} %",
                t.calls,
                share(t.inputs),
                share(t.outputs)
            );
        }
    }
    Ok(())
}
