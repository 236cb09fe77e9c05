//! The matrix products of one MiniLM-L6 training step (4,096 rows: batch 32 × seq 128; widths 384
//! and 1,536) and of the default transformer (4,096 rows, 128 and 512) through `contrai-kernels`'
//! linear layer, forward and both backward products, in GFLOP/s (medians) — to set beside
//! PyTorch's on the same shapes (`scripts/bench/train/gemm_shapes.py`) and the machine's peak.
//!
//! On a CPU with AVX512-BF16 each shape is timed again with the products in bf16
//! (`contrai_kernels::bf16`).
//!
//! `cargo run --release --example gemm_shapes -p contrai-kernels [reps]`

use contrai_kernels::matmul::{linear, linear_backward_w, linear_backward_x};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn filled(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 31 + seed) % 97) as f32 - 48.0) / 97.0)
        .collect()
}

fn main() {
    let reps: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(9);
    let rows = 4096;
    let precisions: &[bool] = if contrai_kernels::bf16::available() {
        &[false, true]
    } else {
        &[false]
    };
    println!(
        "precision | shape (rows x in -> out) | forward | backward x | backward w  (GFLOP/s, median of {reps})"
    );
    for &bf16 in precisions {
        contrai_kernels::bf16::set_products(bf16).expect("checked available");
        let name = if bf16 { "bf16" } else { "f32" };
        for (d_in, d_out) in [
            (384, 384),
            (384, 1536),
            (1536, 384),
            (128, 128),
            (128, 512),
            (512, 128),
        ] {
            let x = filled(rows * d_in, 1);
            let w = filled(d_in * d_out, 2);
            let b = filled(d_out, 3);
            let g = filled(rows * d_out, 4);
            let flops = 2.0 * (rows * d_in * d_out) as f64;
            let mut t = [Vec::new(), Vec::new(), Vec::new()];
            for _ in 0..reps {
                let s = Instant::now();
                std::hint::black_box(linear(&x, &w, &b, d_in, d_out));
                t[0].push(s.elapsed().as_secs_f64());
                let s = Instant::now();
                std::hint::black_box(linear_backward_x(&g, &w, d_in, d_out));
                t[1].push(s.elapsed().as_secs_f64());
                let s = Instant::now();
                std::hint::black_box(linear_backward_w(&x, &g, d_in, d_out));
                t[2].push(s.elapsed().as_secs_f64());
            }
            let [f, bx, bw] = t.map(|v| flops / median(v) / 1e9);
            println!("{name} | {rows} x {d_in} -> {d_out} | {f:.1} | {bx:.1} | {bw:.1}");
        }
    }
}
