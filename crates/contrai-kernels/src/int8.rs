//! Linear layers that run in int8: the weights stay integers, each input row is quantized on the
//! fly (symmetric, its own scale: PyTorch's dynamic quantization), the products are summed in
//! 32-bit integers, and one multiplication per output turns the sum back into f32.
//!
//! The inner loop multiplies unsigned 8-bit inputs by signed 8-bit weights. With VNNI (AVX-512
//! VNNI, or AVX-VNNI) one `vpdpbusd` adds four such products into each 32-bit lane. Without it,
//! adjacent pairs are added into 16 bits (`vpmaddubsw`, 32 products an AVX2 instruction), two such
//! 16-bit results (eight products) are added and only then widened into 32-bit sums (`vpmaddwd`):
//! three multiplying instructions for 64 products instead of four, the pipes that bound the kernel
//! there. For that the four products a 16-bit lane sums must stay within ±32767: inputs are
//! quantized to 7 bits (±63, stored shifted by 64 as 1…127, PyTorch's `reduce_range` on x86) and
//! each output's weights to at most ±63 ([`WMAX`]): a column of the per-tensor int8 weights that
//! uses more is re-quantized with its own scale, which loses one bit on that column only. The
//! shift is taken back out with each output's weight sum. The VNNI paths take the same quantized
//! values and packing. The sums are exact integers, so every path (AVX-512 VNNI, AVX-VNNI, AVX2,
//! plain Rust for other CPUs), chosen at run time, gives the same bits.

use std::borrow::Cow;
use std::mem::MaybeUninit;

use multiversion::multiversion;
use rayon::prelude::*;

use crate::math;

/// Outputs a packed block holds (one 256-bit register of 32-bit sums).
const LANES: usize = 8;
/// Blocks a packed panel holds: one group of a panel's outputs is 128 contiguous bytes, what the
/// AVX-512 kernel multiplies with two 512-bit registers and the 256-bit kernels with two of four.
const PANEL: usize = 4;
/// Inputs a packed group holds (four bytes of one output: one 32-bit lane).
const GROUP: usize = 4;
/// Input rows a parallel task handles.
const ROWS: usize = 32;
/// The largest quantized input magnitude (7 bits).
const QMAX: f32 = 63.0;
/// The shift that makes quantized inputs unsigned.
const SHIFT: i32 = 64;
/// The largest weight magnitude the kernel multiplies: 127 · 63 · 4 products fit in 16 bits.
const WMAX: i32 = 63;

/// A linear layer's weights as int8 (at most ±[`WMAX`]) with one scale an output, packed for the
/// kernel: for each panel of [`PANEL`] blocks of [`LANES`] outputs and each group of [`GROUP`]
/// inputs, 32 bytes a block — output `o`'s four weights in lane `o` — so that one broadcast input
/// group multiplies eight outputs (a 256-bit register) or sixteen (512 bits) at once and the sums
/// need no horizontal reduction. Each output's weight sum takes the inputs' shift back out.
#[derive(Debug, Clone)]
pub struct Int8Weights {
    packed: Vec<i8>,
    sums: Vec<i32>,
    /// One scale an output (`w ≈ value · scale`), padded with zeros to whole blocks.
    scales: Vec<f32>,
    k: usize,
    groups: usize,
    n: usize,
    /// Output blocks, padded to whole panels: what the x86 kernels walk (the portable path reads
    /// `n`).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    blocks: usize,
}

impl Int8Weights {
    /// Weights `values` of a `[k, n]` matrix (inputs × outputs, row-major) with scale `scale`
    /// (`w ≈ values · scale`).
    ///
    /// # Panics
    /// When `values` does not hold `k × n` entries.
    pub fn new(values: &[i8], k: usize, n: usize, scale: f32) -> Self {
        assert_eq!(values.len(), k * n, "int8 weights: {k} × {n} values expected");
        // Groups come in pairs (the AVX2 kernel sums two in 16 bits), blocks in panels.
        let groups = padded(k) / GROUP;
        let blocks = n.div_ceil(PANEL * LANES) * PANEL;
        let (shrink, scales) = column_scales(values, n, scale, blocks * LANES);
        let mut packed = vec![0i8; blocks * groups * LANES * GROUP];
        let mut sums = vec![0i32; n];
        for (t, row) in values.chunks(n).enumerate() {
            for (j, &v) in row.iter().enumerate() {
                let v = shrink[j].map_or(v, |f| (f32::from(v) * f).round() as i8);
                packed[packed_at(groups, j, t)] = v;
                sums[j] += i32::from(v);
            }
        }
        Int8Weights {
            packed,
            sums,
            scales,
            k,
            groups,
            n,
            blocks,
        }
    }

    /// Bytes the packing holds.
    pub fn bytes(&self) -> usize {
        self.packed.len() + 4 * (self.sums.len() + self.scales.len())
    }

    /// Inputs a row.
    pub fn inputs(&self) -> usize {
        self.k
    }

    /// Outputs a row.
    pub fn outputs(&self) -> usize {
        self.n
    }
}

/// Where output `j`'s weight of input `t` lies in a packing of `groups` groups.
fn packed_at(groups: usize, j: usize, t: usize) -> usize {
    let (p, o, g, kk) = (j / (PANEL * LANES), j % (PANEL * LANES), t / GROUP, t % GROUP);
    ((p * groups + g) * PANEL * LANES + o) * GROUP + kk
}

/// For each output (column of the `[k, n]` values), the factor its weights are multiplied by to
/// stay within ±[`WMAX`] (none when they already are), and its scale; the scales padded with
/// zeros to `padded` outputs.
fn column_scales(values: &[i8], n: usize, scale: f32, padded: usize) -> (Vec<Option<f32>>, Vec<f32>) {
    let mut max = vec![0i32; n];
    for row in values.chunks(n) {
        for (m, v) in max.iter_mut().zip(row) {
            *m = (*m).max(i32::from(*v).abs());
        }
    }
    let shrink: Vec<Option<f32>> = max
        .iter()
        .map(|&m| (m > WMAX).then(|| WMAX as f32 / m as f32))
        .collect();
    let mut scales = vec![0f32; padded];
    for (s, f) in scales.iter_mut().zip(&shrink) {
        *s = f.map_or(scale, |f| scale / f);
    }
    (shrink, scales)
}

/// `x · W + bias` for `x` of `x.len() / k` rows of `k` values, in int8 arithmetic.
///
/// # Panics
/// When `x` is not whole rows of the weights' inputs, or `bias` is not one value an output.
pub fn linear(x: &[f32], w: &Int8Weights, bias: Option<&[f32]>) -> Vec<f32> {
    linears(x, None, &[(w, bias)]).remove(0)
}

/// A LayerNorm applied to each row of an input just before it is quantized (a pre-norm
/// transformer block's), as [`crate::math::layer_norm`] computes it: the same bits, and the
/// normalised rows never go to memory.
#[derive(Debug, Clone, Copy)]
pub struct Norm<'a> {
    /// Scale, one a feature.
    pub gamma: &'a [f32],
    /// Shift, one a feature.
    pub beta: &'a [f32],
    /// Added to the variance.
    pub eps: f32,
}

/// One task's rows as the kernel takes them: `x`, or `x` normalised by `norm`.
fn normed<'a>(x: &'a [f32], norm: Option<Norm<'_>>) -> Cow<'a, [f32]> {
    match norm {
        None => Cow::Borrowed(x),
        Some(n) => {
            let mut y = vec![0f32; x.len()];
            math::layer_norm_rows(x, n.gamma, n.beta, n.eps, &mut y);
            Cow::Owned(y)
        }
    }
}

/// Panics unless `norm` normalises rows of `k` features.
fn check_norm(norm: Option<Norm>, k: usize) {
    if let Some(n) = norm {
        assert!(
            n.gamma.len() == k && n.beta.len() == k,
            "int8 layer norm: γ and β of {k} features expected"
        );
    }
}

/// [`linear`] for several layers that take the same input (attention's query, key and value):
/// each row is quantized once for all of them, after `norm` when given.
///
/// # Panics
/// When `layers` is empty or its weights differ in inputs, when `x` is not whole rows of them,
/// `norm` is not of that width, or a bias is not one value an output.
pub fn linears(x: &[f32], norm: Option<Norm>, layers: &[(&Int8Weights, Option<&[f32]>)]) -> Vec<Vec<f32>> {
    let k = layers.first().map_or(0, |(w, _)| w.k);
    assert!(
        k > 0 && x.len().is_multiple_of(k) && layers.iter().all(|(w, _)| w.k == k),
        "int8 linear: rows of {k} inputs expected, for every layer"
    );
    check_norm(norm, k);
    let biases: Vec<Vec<f32>> = layers.iter().map(|(w, b)| bias_or_zeros(w, *b)).collect();
    let m = x.len() / k;
    let tasks = m.div_ceil(ROWS);
    // The kernels write every output once: a zeroed `vec!` would first clear the whole output on
    // one core (9 % of the int8 forward).
    let mut outputs: Vec<Vec<f32>> = layers.iter().map(|(w, _)| Vec::with_capacity(m * w.n)).collect();
    let mut parts: Vec<Vec<&mut [MaybeUninit<f32>]>> = (0..tasks).map(|_| Vec::new()).collect();
    for (y, (w, _)) in outputs.iter_mut().zip(layers) {
        let mut rest = &mut y.spare_capacity_mut()[..m * w.n];
        for (t, part) in parts.iter_mut().enumerate() {
            let (mine, others) = rest.split_at_mut(ROWS.min(m - t * ROWS) * w.n);
            part.push(mine);
            rest = others;
        }
    }
    parts
        .into_par_iter()
        .zip(x.par_chunks(ROWS * k))
        .for_each(|(ys, x)| {
            let (q, scales) = quantized(&normed(x, norm), k);
            for ((y, (w, _)), bias) in ys.into_iter().zip(layers).zip(&biases) {
                rows(&q, &scales, w, bias, y);
            }
        });
    for (y, (w, _)) in outputs.iter_mut().zip(layers) {
        // SAFETY: the tasks cover all `m × n` elements and each writes every element it is given.
        unsafe { y.set_len(m * w.n) };
    }
    outputs
}

/// A feed-forward block in int8, `gelu(x · W₁ + b₁) · W₂ + b₂` — with `norm`, the pre-norm
/// residual block `x + ffn(norm(x))` — computed block of rows by block of rows: the hidden
/// activations (four times the width of `x` in a transformer) stay in the task's cache instead of
/// going to memory three times (written, read by GELU, read to be quantized). Each step is the
/// one [`linear`], [`crate::math::gelu_all`] and [`crate::math::layer_norm`] take: the same bits.
///
/// # Panics
/// When the layers do not chain (`up`'s outputs are `down`'s inputs; with `norm`, `down`'s
/// outputs are `x`'s width), or as [`linears`].
pub fn feed_forward(
    x: &[f32],
    norm: Option<Norm>,
    (up, up_bias): (&Int8Weights, Option<&[f32]>),
    (down, down_bias): (&Int8Weights, Option<&[f32]>),
) -> Vec<f32> {
    assert_eq!(up.n, down.k, "int8 feed-forward: up's outputs are down's inputs");
    let (k, hidden, n) = (up.k, up.n, down.n);
    assert!(
        k > 0 && hidden > 0 && x.len().is_multiple_of(k),
        "int8 feed-forward: rows of {k} inputs expected"
    );
    check_norm(norm, k);
    assert!(
        norm.is_none() || n == k,
        "int8 feed-forward: a residual block's output is its input's width"
    );
    let (b1, b2) = (bias_or_zeros(up, up_bias), bias_or_zeros(down, down_bias));
    let m = x.len() / k;
    let mut y = Vec::with_capacity(m * n);
    y.spare_capacity_mut()[..m * n]
        .par_chunks_mut(ROWS * n.max(1))
        .zip(x.par_chunks(ROWS * k))
        .for_each(|(y, x)| {
            let (q, scales) = quantized(&normed(x, norm), k);
            let mut h = Vec::with_capacity(scales.len() * hidden);
            rows(
                &q,
                &scales,
                up,
                &b1,
                &mut h.spare_capacity_mut()[..scales.len() * hidden],
            );
            // SAFETY: the kernel wrote every element of the task's `rows × hidden` activations.
            unsafe { h.set_len(scales.len() * hidden) };
            let mut g = vec![0f32; h.len()];
            math::gelu_chunk(&h, &mut g);
            let (q, scales) = quantized(&g, hidden);
            rows(&q, &scales, down, &b2, y);
            if norm.is_some() {
                // SAFETY: the kernel just wrote every element of `y`.
                let y = unsafe { &mut *(y as *mut [MaybeUninit<f32>] as *mut [f32]) };
                y.iter_mut().zip(x).for_each(|(y, x)| *y += x);
            }
        });
    // SAFETY: the tasks cover all `m × n` elements and each writes every element it is given.
    unsafe { y.set_len(m * n) };
    y
}

/// A layer's bias, or zeros when it has none.
fn bias_or_zeros(w: &Int8Weights, bias: Option<&[f32]>) -> Vec<f32> {
    match bias {
        Some(b) => {
            assert_eq!(b.len(), w.n, "int8 linear: one bias an output");
            b.to_vec()
        }
        None => vec![0f32; w.n],
    }
}

/// Rows of `k` inputs quantized for the kernel (each row padded with the shifted zero to whole
/// pairs of groups), and their scales.
fn quantized(x: &[f32], k: usize) -> (Vec<u8>, Vec<f32>) {
    let kp = padded(k);
    let mut q = vec![SHIFT as u8; x.len() / k * kp];
    let scales = x
        .chunks(k)
        .zip(q.chunks_mut(kp))
        .map(|(x, q)| quantize_row(x, &mut q[..k]))
        .collect();
    (q, scales)
}

/// Inputs a quantized row holds: `k` padded to whole pairs of groups.
fn padded(k: usize) -> usize {
    k.div_ceil(2 * GROUP) * 2 * GROUP
}

/// The environment variable that picks the int8 kernel (`avx512vnni`, `avxvnni`, `avx2` or
/// `portable`; one this CPU does not run is passed over for the best it does), so that the paths
/// can be measured side by side with one binary. They give the same bits.
pub const KERNEL_VAR: &str = "CONTRAI_INT8_KERNEL";

/// The int8 kernel this process runs (see [`KERNEL_VAR`]).
pub fn kernel() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if let Some(k) = x86::Kernel::best() {
        return k.name();
    }
    "portable"
}

/// One task's rows (quantized) times one layer's weights: every output of every row.
fn rows(q: &[u8], scales: &[f32], w: &Int8Weights, bias: &[f32], y: &mut [MaybeUninit<f32>]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = x86::Kernel::best() {
        // SAFETY: the CPU has the kernel's instructions (`best` checked them); `q` holds whole
        // padded rows, one per row of `y` and entry of `scales`.
        return unsafe { kernel.rows(q, scales, w, bias, y) };
    }
    rows_portable(q, scales, w, bias, y);
}

/// The kernel in plain Rust, for CPUs without AVX2: the same integer sums, the same outputs.
fn rows_portable(q: &[u8], scales: &[f32], w: &Int8Weights, bias: &[f32], y: &mut [MaybeUninit<f32>]) {
    let kp = w.groups * GROUP;
    for ((q, s), y) in q.chunks(kp).zip(scales).zip(y.chunks_mut(w.n)) {
        for (j, y) in y.iter_mut().enumerate() {
            let dot: i32 = (0..kp)
                .map(|t| i32::from(q[t]) * i32::from(w.packed[packed_at(w.groups, j, t)]))
                .sum();
            y.write(((dot - SHIFT * w.sums[j]) as f32).mul_add(s * w.scales[j], bias[j]));
        }
    }
}

/// Symmetric 7-bit quantization of one row into `q`, shifted by [`SHIFT`]: returns the scale
/// (`x ≈ (q − 64) · scale`), NaN for a row holding a non-finite value (its outputs are NaN).
#[multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma+sse4.1"
))]
fn quantize_row(x: &[f32], q: &mut [u8]) -> f32 {
    // Lane-wise maxima (`math::larger`: they pass over a NaN), and `v · 0` summed: 0 for finite
    // rows, NaN when a value is not finite.
    use math::larger;
    let (mut lanes, mut poison) = ([0f32; 16], [0f32; 16]);
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder().iter().fold(0f32, |m, v| larger(m, v.abs()));
    let tail_poison: f32 = chunks.remainder().iter().map(|v| v * 0.0).sum();
    for c in chunks {
        for i in 0..16 {
            lanes[i] = larger(lanes[i], c[i].abs());
            poison[i] += c[i] * 0.0;
        }
    }
    let max = lanes.iter().fold(tail, |m, v| larger(m, *v));
    let finite = poison.iter().sum::<f32>() + tail_poison == 0.0;
    let scale = match (finite, max > 0.0) {
        (false, _) => f32::NAN,
        (true, true) => max / QMAX,
        (true, false) => 1.0,
    };
    let inv = 1.0 / scale;
    for (q, &v) in q.iter_mut().zip(x) {
        // Rounded by adding 1.5 × 2²³ (the integer lands in the low mantissa bits): plain
        // arithmetic, which vectorises where float-to-integer conversions do not.
        const MAGIC: f32 = 12_582_912.0;
        let r = (v * inv).clamp(-QMAX, QMAX) + MAGIC;
        *q = (r.to_bits() as i32 - MAGIC.to_bits() as i32 + SHIFT) as u8;
    }
    scale
}

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_linear_is_the_dequantized_product_within_the_rounding_of_its_inputs() {
        let (k, n, m) = (37, 10, 21); // odd sizes: padding and the column remainder
        let vals: Vec<i8> = (0..k * n).map(|i| ((i * 37 % 255) as i32 - 127) as i8).collect();
        let scale = 0.01;
        let w = Int8Weights::new(&vals, k, n, scale);
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0).collect();
        let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.5).collect();
        let y = linear(&x, &w, Some(&bias));
        for r in 0..m {
            let row = &x[r * k..(r + 1) * k];
            let step = row.iter().fold(0f32, |a, v| a.max(v.abs())) / QMAX;
            for j in 0..n {
                let exact: f32 = (0..k)
                    .map(|t| row[t] * f32::from(vals[t * n + j]) * scale)
                    .sum::<f32>()
                    + bias[j];
                // Each input moves by at most half a step; a column re-quantized to ±63 moves each
                // weight by at most half its new step.
                let wstep = w.scales[j];
                let wmoved = if wstep == scale { 0.0 } else { wstep / 2.0 };
                let bound: f32 = (0..k)
                    .map(|t| {
                        let wt = (f32::from(vals[t * n + j]) * scale).abs();
                        (wt + wmoved) * step / 2.0 + row[t].abs() * wmoved
                    })
                    .sum();
                let got = y[r * n + j];
                assert!(
                    (got - exact).abs() <= bound + 1e-4,
                    "row {r} col {j}: {got} vs {exact} (bound {bound})"
                );
            }
        }
        // A row holding a NaN or an infinity gives NaN outputs; the other rows are untouched.
        let mut bad = x.clone();
        bad[k + 3] = f32::NAN;
        bad[2 * k + 5] = f32::INFINITY;
        let yb = linear(&bad, &w, Some(&bias));
        assert!(yb[n..3 * n].iter().all(|v| v.is_nan()));
        assert_eq!(&yb[..n], &y[..n]);
        assert_eq!(&yb[3 * n..], &y[3 * n..]);
        // The portable kernel gives the same bits as the vector one.
        let (q, scales) = quantized(&x, k);
        let mut portable = vec![MaybeUninit::uninit(); m * n];
        rows_portable(&q, &scales, &w, &bias, &mut portable);
        // SAFETY: the kernel writes every output.
        let portable: Vec<f32> = portable.into_iter().map(|v| unsafe { v.assume_init() }).collect();
        assert_eq!(portable, y);
        // A zero row gives the bias exactly.
        let zero = linear(&vec![0.0; k], &w, Some(&bias));
        assert_eq!(zero, bias);
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn every_x86_kernel_this_cpu_runs_gives_the_bits_of_the_portable_one() {
        // Rows off every kernel's pass (8, 4), outputs off its panels (32) and passes (16),
        // inputs off its groups; weights and inputs at their extremes among ordinary values.
        let (k, n, m) = (203, 45, 29);
        let vals: Vec<i8> = (0..k * n).map(|i| ((i * 97 % 256) as i32 - 128) as i8).collect();
        let w = Int8Weights::new(&vals, k, n, 0.004);
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 53 % 41) as f32 - 20.0) / 5.0).collect();
        let bias: Vec<f32> = (0..n).map(|j| j as f32 * -0.25).collect();
        let (q, scales) = quantized(&x, k);
        let run = |f: &dyn Fn(&mut [MaybeUninit<f32>])| -> Vec<f32> {
            let mut y = vec![MaybeUninit::uninit(); m * n];
            f(&mut y);
            // SAFETY: every kernel writes every output.
            y.into_iter().map(|v| unsafe { v.assume_init() }).collect()
        };
        let portable = run(&|y| rows_portable(&q, &scales, &w, &bias, y));
        let here: Vec<_> = x86::Kernel::ALL.into_iter().filter(|k| k.runs_here()).collect();
        eprintln!(
            "int8 kernels this CPU runs: {here:?}; this process runs {}",
            kernel()
        );
        assert!(
            here.iter()
                .map(|k| k.name())
                .chain(["portable"])
                .any(|n| n == kernel())
        );
        for kernel in here {
            // SAFETY: the CPU runs the kernel (filtered above); `q` holds `m` padded rows.
            let got = run(&|y| unsafe { kernel.rows(&q, &scales, &w, &bias, y) });
            assert_eq!(got, portable, "{kernel:?}");
        }
    }

    #[test]
    fn extreme_inputs_and_weights_do_not_saturate_the_16_bit_sums() {
        // Columns at the int8 extremes (re-quantized to ±63), one inside ±63 (kept as it is);
        // rows at the input extremes, which quantize exactly (±63 steps or the shifted zero).
        let (k, n) = (72, 4);
        let column = |j: usize, t: usize| -> i8 {
            match j {
                0 => -128,
                1 => 127,
                2 => {
                    if t.is_multiple_of(2) {
                        127
                    } else {
                        -127
                    }
                }
                _ => 63 - (t % 127) as i8,
            }
        };
        let vals: Vec<i8> = (0..k * n).map(|i| column(i % n, i / n)).collect();
        let scale = 0.02;
        let w = Int8Weights::new(&vals, k, n, scale);
        assert_eq!(w.scales[3], scale, "a column within ±63 keeps the tensor's scale");
        let rows: [Vec<f32>; 3] = [
            vec![1.0; k],
            vec![-1.0; k],
            (0..k).map(|t| [1.0, -1.0][t % 2]).collect(),
        ];
        for x in rows {
            let y = linear(&x, &w, None);
            for (j, got) in y.iter().enumerate() {
                let exact: f64 = (0..k)
                    .map(|t| f64::from(x[t]) * f64::from(column(j, t)) * f64::from(scale))
                    .sum();
                assert!(
                    (f64::from(*got) - exact).abs() <= 1e-4 * exact.abs().max(1.0),
                    "column {j}: {got} vs {exact}"
                );
            }
        }
    }

    #[test]
    fn fused_feed_forward_and_shared_quantization_give_the_bits_of_the_separate_steps() {
        // 70 rows: two full row blocks and a short one; widths off the kernel's multiples.
        let (m, k, hidden, n) = (70, 24, 52, 13);
        let weights = |k: usize, n: usize, seed: usize| {
            let v: Vec<i8> = (0..k * n).map(|i| ((i * 31 + seed) % 251) as i8).collect();
            Int8Weights::new(&v, k, n, 0.003)
        };
        let (up, down, other) = (weights(k, hidden, 1), weights(hidden, n, 2), weights(k, n, 3));
        let (b1, b2): (Vec<f32>, Vec<f32>) = ((0..hidden).map(|j| j as f32 * 0.01).collect(), vec![0.5; n]);
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 23) as f32 - 11.0) / 3.0).collect();
        let separate = linear(&math::gelu_all(&linear(&x, &up, Some(&b1))), &down, Some(&b2));
        assert_eq!(
            feed_forward(&x, None, (&up, Some(&b1)), (&down, Some(&b2))),
            separate
        );
        let both = linears(&x, None, &[(&up, Some(&b1)), (&other, None)]);
        assert_eq!(both[0], linear(&x, &up, Some(&b1)));
        assert_eq!(both[1], linear(&x, &other, None));
        // With a pre-norm: the normalised rows, and the residual block `x + ffn(norm(x))` (down
        // maps back to x's width).
        let (gamma, beta): (Vec<f32>, Vec<f32>) =
            ((0..k).map(|i| 1.0 + i as f32 * 0.1).collect(), vec![0.25; k]);
        let norm = Norm {
            gamma: &gamma,
            beta: &beta,
            eps: 1e-5,
        };
        let xn = math::layer_norm(&x, &gamma, &beta, 1e-5);
        assert_eq!(
            linears(&x, Some(norm), &[(&other, None)])[0],
            linear(&xn, &other, None)
        );
        let back = weights(hidden, k, 4);
        let residual: Vec<f32> = linear(&math::gelu_all(&linear(&xn, &up, Some(&b1))), &back, None)
            .iter()
            .zip(&x)
            .map(|(f, x)| x + f)
            .collect();
        assert_eq!(
            feed_forward(&x, Some(norm), (&up, Some(&b1)), (&back, None)),
            residual
        );
    }
}
