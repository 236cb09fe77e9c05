//! Inference latency of the default transformer (batch 32, seq 128, random tokens, no padding):
//! the f32 model against its int8 model (`quantize_int8`, per-tensor scales), interleaved run by
//! run; medians in milliseconds.
//!
//! `cargo run --release --example infer_profile -p contrai-train [RUNS] [f32|int8]` (one model
//! alone, for a profiler); `CONTRAI_INT8_KERNEL=avx2` (or `avx512vnni`, `avxvnni`, `portable`)
//! times another int8 kernel than the best this CPU runs. The line says which ran.

use burn::tensor::Device;
use contrai_recipe::Recipe;
use contrai_train::model::{Batch, Classifier, TextBatch};
use contrai_train::quantize::quantize_int8;

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(30)
        .max(1);
    contrai_train::process::setup();
    let recipe = Recipe::default();
    let spec = &recipe.model;
    let device = Device::flex();
    let f32_model = match Classifier::new(spec, 2, 0, recipe.run.seed, &device) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let int8 = quantize_int8(f32_model.clone(), None);
    let (b, s) = (32, spec.seq_len);
    let ids: Vec<i32> = (0..b * s)
        .map(|i| (2 + (i * 7919) % (spec.vocab - 2)) as i32)
        .collect();
    let batch = Batch::Text(TextBatch::new(&ids, &vec![0; b], s, &device));
    let time = |m: &Classifier| {
        let t = std::time::Instant::now();
        let _ = m.forward(&batch, None).into_data();
        t.elapsed().as_secs_f64() * 1e3
    };
    let only = std::env::args().nth(2);
    let skip = |name: &str| only.as_deref().is_some_and(|o| o != name);
    let (mut a, mut q) = (Vec::new(), Vec::new());
    for i in 0..runs + 3 {
        let x = if skip("f32") { 0.0 } else { time(&f32_model) };
        let y = if skip("int8") { 0.0 } else { time(&int8) };
        if i >= 3 {
            a.push(x);
            q.push(y);
        }
    }
    let (a, q) = (
        contrai_stats::median(&a).unwrap(),
        contrai_stats::median(&q).unwrap(),
    );
    println!(
        "f32 {a:.2} ms, int8 {q:.2} ms a batch of {b}: int8 / f32 = {:.2} (int8 kernel {})",
        q / a,
        contrai_kernels::int8::kernel()
    );
}
