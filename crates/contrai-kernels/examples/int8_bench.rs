//! One linear layer of the default transformer's shapes (4,096 rows, 128 → 512, 512 → 128 and
//! 128 → 128): Burn flex's f32 matmul against the int8 kernel, medians in milliseconds.
//!
//! `cargo run --release --example int8_bench -p contrai-kernels`
//!
//! Run it with the training loop's allocator settings
//! (`GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967295`,
//! `contrai_train::alloc`): without them every fresh 8 MB output is page-faulted in again, which
//! doubles the f32 and int8 times of the 128 → 512 shape alike.

use burn::tensor::{Device, Tensor, TensorData};
use contrai_kernels::int8::{Int8Weights, linear};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let device = Device::flex();
    for (m, k, n) in [(4096, 128, 512), (4096, 512, 128), (4096, 128, 128)] {
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 31 % 97) as f32 - 48.0) / 17.0).collect();
        let w: Vec<f32> = (0..k * n)
            .map(|i| ((i * 17 % 89) as f32 - 44.0) / 300.0)
            .collect();
        let xt = Tensor::<2>::from_data(TensorData::new(x.clone(), [m, k]), &device);
        let wt = Tensor::<2>::from_data(TensorData::new(w.clone(), [k, n]), &device);
        let q: Vec<i8> = w.iter().map(|v| (v / 0.15 * 127.0).round() as i8).collect();
        let iw = Int8Weights::new(&q, k, n, 0.15 / 127.0);
        let (mut f, mut i8t) = (Vec::new(), Vec::new());
        for _ in 0..30 {
            let t = std::time::Instant::now();
            let _ = xt.clone().matmul(wt.clone()).into_data();
            f.push(t.elapsed().as_secs_f64() * 1e3);
            let t = std::time::Instant::now();
            let _ = linear(&x, &iw, None);
            i8t.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let (f, q) = (median(f), median(i8t));
        println!(
            "{m}x{k}x{n}: f32 {f:.2} ms, int8 {q:.2} ms, int8/f32 {:.2}",
            q / f
        );
    }
}
