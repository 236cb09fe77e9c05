//! Where a training step of the default transformer spends its time: batch upload, forward,
//! backward, gradient norm + clipping, optimizer. Random tokens, batch 32, seq 128, dropout on.
//!
//! `cargo run --example step_profile -p contrai-train [STEPS]`

use std::time::Instant;

use burn::optim::GradientsParams;
use burn::tensor::Device;
use contrai_recipe::Recipe;
use contrai_train::dropout::Dropout;
use contrai_train::model::{TextBatch, TextClassifier, cross_entropy};
use contrai_train::trainer::{grad_norm, optimizer, scale_grads};

fn main() {
    let steps: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(30);
    contrai_train::alloc::keep_freed_memory();
    let recipe = Recipe::default();
    let spec = &recipe.model;
    let device = Device::flex().autodiff();
    let mut model = TextClassifier::new(spec, 2, 1, &device).expect("default spec");
    let mut optim = optimizer(&recipe);
    let (b, s) = (recipe.main.batch, spec.seq_len);
    let mut x = 12345u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let names = ["batch", "forward", "backward", "norm+clip", "optimizer"];
    let mut t = [0f64; 5];
    for step in 0..steps + 3 {
        let t0 = Instant::now();
        let ids: Vec<i32> = (0..b * s)
            .map(|_| (2 + rnd() % (spec.vocab as u64 - 2)) as i32)
            .collect();
        let labels: Vec<i32> = (0..b).map(|_| (rnd() % 2) as i32).collect();
        let batch = TextBatch::new(&ids, &labels, s, &device);
        let t1 = Instant::now();
        let drop = Dropout::new(spec.dropout, 1, step as u64, 0);
        let loss = cross_entropy(model.forward(&batch, Some(&drop)), batch.labels.clone());
        let _ = loss.clone().into_scalar::<f32>();
        let t2 = Instant::now();
        let mut grads = GradientsParams::from_grads(loss.backward(), &model);
        let t3 = Instant::now();
        let norm = grad_norm(&model, &grads);
        if norm > 1.0 {
            scale_grads(&model, &mut grads, 1.0 / f64::from(norm));
        }
        let t4 = Instant::now();
        model = optim.step(1e-4, model, grads);
        let _ = model.head.weight.val().into_data();
        let t5 = Instant::now();
        if step >= 3 {
            for (k, (a, z)) in [(t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5)]
                .iter()
                .enumerate()
            {
                t[k] += (*z - *a).as_secs_f64();
            }
        }
    }
    let total: f64 = t.iter().sum();
    println!("{steps} steps, {:.1} ms a step", total * 1000.0 / steps as f64);
    for (n, v) in names.iter().zip(t) {
        println!(
            "  {n:<10} {:>7.1} ms  {:>5.1} %",
            v * 1000.0 / steps as f64,
            v / total * 100.0
        );
    }
}
