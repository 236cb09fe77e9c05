//! Linear layers that run in int8: the weights stay integers, each input row is quantized on the
//! fly (symmetric, its own scale: PyTorch's dynamic quantization), the products are summed in
//! 32-bit integers, and one multiplication per output turns the sum back into f32.
//!
//! The inner loop multiplies unsigned 8-bit inputs by signed 8-bit weights, adding adjacent pairs
//! into 16 bits (`vpmaddubsw`, 32 products an AVX2 instruction; AVX-512 machines run the same
//! AVX2 code — a 512-bit path is for a session that can measure it), then pairs of those into
//! 32-bit sums. Inputs are quantized to 7 bits (±63, stored shifted by 64 as 1…127,
//! PyTorch's `reduce_range` on x86) so that a pair of products never saturates 16 bits; the shift
//! is taken back out with each output's weight sum. The sums are exact integers, so both paths
//! (AVX2, plain Rust for other CPUs) give the same bits.

use std::mem::MaybeUninit;

use multiversion::multiversion;
use rayon::prelude::*;

/// Outputs a packed block holds (one 256-bit register of 32-bit sums).
const LANES: usize = 8;
/// Inputs a packed group holds (four bytes of one output: one 32-bit lane).
const GROUP: usize = 4;
/// Input rows a parallel task handles.
const ROWS: usize = 32;
/// The largest quantized input magnitude (7 bits).
const QMAX: f32 = 63.0;
/// The shift that makes quantized inputs unsigned.
const SHIFT: i32 = 64;

/// A linear layer's weights as int8 with one scale, packed for the kernel: for each block of
/// [`LANES`] outputs and each group of [`GROUP`] inputs, 32 bytes — output `o`'s four weights in
/// lane `o` — so that one broadcast input group multiplies eight outputs at once and the sums
/// need no horizontal reduction. Each output's weight sum takes the inputs' shift back out.
#[derive(Debug, Clone)]
pub struct Int8Weights {
    packed: Vec<i8>,
    sums: Vec<i32>,
    k: usize,
    groups: usize,
    n: usize,
    blocks: usize,
    scale: f32,
}

impl Int8Weights {
    /// Weights `values` of a `[k, n]` matrix (inputs × outputs, row-major) with scale `scale`
    /// (`w ≈ values · scale`).
    ///
    /// # Panics
    /// When `values` does not hold `k × n` entries.
    pub fn new(values: &[i8], k: usize, n: usize, scale: f32) -> Self {
        assert_eq!(values.len(), k * n, "int8 weights: {k} × {n} values expected");
        let groups = k.div_ceil(GROUP);
        // Blocks come in pairs: the kernel computes sixteen outputs a pass.
        let blocks = n.div_ceil(2 * LANES) * 2;
        let mut packed = vec![0i8; blocks * groups * LANES * GROUP];
        for t in 0..k {
            for j in 0..n {
                let (b, o, g, kk) = (j / LANES, j % LANES, t / GROUP, t % GROUP);
                packed[((b * groups + g) * LANES + o) * GROUP + kk] = values[t * n + j];
            }
        }
        let sums = (0..n)
            .map(|j| (0..k).map(|t| i32::from(values[t * n + j])).sum())
            .collect();
        Int8Weights {
            packed,
            sums,
            k,
            groups,
            n,
            blocks,
            scale,
        }
    }

    /// Outputs a row.
    pub fn outputs(&self) -> usize {
        self.n
    }
}

/// `x · W + bias` for `x` of `x.len() / k` rows of `k` values, in int8 arithmetic.
///
/// # Panics
/// When `x` is not whole rows of the weights' inputs, or `bias` is not one value an output.
pub fn linear(x: &[f32], w: &Int8Weights, bias: Option<&[f32]>) -> Vec<f32> {
    let (k, n) = (w.k, w.n);
    assert!(
        k > 0 && x.len().is_multiple_of(k),
        "int8 linear: rows of {k} inputs expected"
    );
    if let Some(b) = bias {
        assert_eq!(b.len(), n, "int8 linear: one bias an output");
    }
    let zeros;
    let bias = match bias {
        Some(b) => b,
        None => {
            zeros = vec![0f32; n];
            &zeros
        }
    };
    let m = x.len() / k;
    // The kernels write every output once: a zeroed `vec!` would first clear the whole output on
    // one core (9 % of the int8 forward).
    let mut y = Vec::with_capacity(m * n);
    y.spare_capacity_mut()[..m * n]
        .par_chunks_mut(ROWS * n.max(1))
        .zip(x.par_chunks(ROWS * k))
        .for_each(|(y, x)| rows(x, w, bias, y));
    // SAFETY: the tasks cover all `m × n` elements and each writes every element it is given.
    unsafe { y.set_len(m * n) };
    y
}

/// One task: its rows quantized (each row's groups of four bytes padded with the shifted zero),
/// then every output of every row.
fn rows(x: &[f32], w: &Int8Weights, bias: &[f32], y: &mut [MaybeUninit<f32>]) {
    let kp = w.groups * GROUP;
    let mut q = vec![SHIFT as u8; x.len() / w.k * kp];
    let scales: Vec<f32> = x
        .chunks(w.k)
        .zip(q.chunks_mut(kp))
        .map(|(x, q)| quantize_row(x, &mut q[..w.k]) * w.scale)
        .collect();
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above); `q` holds whole padded rows, one per row of
        // `y` and entry of `scales`.
        return unsafe { x86::rows_avx2(&q, &scales, w, bias, y) };
    }
    rows_portable(&q, &scales, w, bias, y);
}

/// The kernel in plain Rust, for CPUs without AVX2: the same integer sums, the same outputs.
fn rows_portable(q: &[u8], scales: &[f32], w: &Int8Weights, bias: &[f32], y: &mut [MaybeUninit<f32>]) {
    let kp = w.groups * GROUP;
    for ((q, s), y) in q.chunks(kp).zip(scales).zip(y.chunks_mut(w.n)) {
        for (j, y) in y.iter_mut().enumerate() {
            let (b, o) = (j / LANES, j % LANES);
            let dot: i32 = (0..kp)
                .map(|t| {
                    let wv = w.packed[((b * w.groups + t / GROUP) * LANES + o) * GROUP + t % GROUP];
                    i32::from(q[t]) * i32::from(wv)
                })
                .sum();
            y.write(((dot - SHIFT * w.sums[j]) as f32).mul_add(*s, bias[j]));
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
    // Lane-wise maxima, and `v · 0` summed: 0 for finite rows, NaN when a value is not finite
    // (`max` alone would pass over a NaN).
    let (mut lanes, mut poison) = ([0f32; 16], [0f32; 16]);
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder().iter().fold(0f32, |m, v| m.max(v.abs()));
    let tail_poison: f32 = chunks.remainder().iter().map(|v| v * 0.0).sum();
    for c in chunks {
        for i in 0..16 {
            lanes[i] = lanes[i].max(c[i].abs());
            poison[i] += c[i] * 0.0;
        }
    }
    let max = lanes.iter().fold(tail, |m, v| m.max(*v));
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
mod x86 {
    use std::arch::x86_64::*;

    use super::{GROUP, Int8Weights, LANES, MaybeUninit, SHIFT};

    /// Rows a pass of the kernel computes (each packed weight load feeds this many).
    const R: usize = 4;

    /// [`super::rows`] with AVX2: for sixteen outputs and four rows at a time, each group of four
    /// input bytes broadcast and multiplied with two packed weight registers (`vpmaddubsw`, then
    /// `vpmaddwd` by ones into 32-bit lanes), then dequantized with bias and stored.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn rows_avx2(
        q: &[u8],
        scales: &[f32],
        w: &Int8Weights,
        bias: &[f32],
        y: &mut [MaybeUninit<f32>],
    ) {
        let (n, groups) = (w.n, w.groups);
        let kp = groups * GROUP;
        let m = scales.len();
        let ones = _mm256_set1_epi16(1);
        let shift = _mm256_set1_epi32(SHIFT);
        let block = groups * LANES * GROUP;
        // SAFETY: row pointers stay below `m` rows of `kp` bytes of `q`; each broadcast reads four
        // bytes of a group inside a row; each weight load reads 32 bytes inside block `b`'s
        // `block` bytes (`b` < `w.blocks`); outputs are written through a bounds-checked
        // temporary when a block runs past `n`.
        unsafe {
            let qp = q.as_ptr();
            let mut b = 0;
            while b < w.blocks {
                let (w0, w1) = (
                    w.packed.as_ptr().add(b * block),
                    w.packed.as_ptr().add((b + 1) * block),
                );
                let mut r = 0;
                while r < m {
                    let rows = R.min(m - r);
                    let rp: [*const u8; R] = std::array::from_fn(|i| qp.add((r + i.min(rows - 1)) * kp));
                    let mut acc = [[_mm256_setzero_si256(); 2]; R];
                    for g in 0..groups {
                        let b0 = _mm256_loadu_si256(w0.add(g * 32).cast());
                        let b1 = _mm256_loadu_si256(w1.add(g * 32).cast());
                        for i in 0..R {
                            let x = _mm256_set1_epi32(rp[i].add(g * GROUP).cast::<i32>().read_unaligned());
                            let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(x, b0), ones);
                            let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(x, b1), ones);
                            acc[i][0] = _mm256_add_epi32(acc[i][0], p0);
                            acc[i][1] = _mm256_add_epi32(acc[i][1], p1);
                        }
                    }
                    for (h, j0) in [b * LANES, (b + 1) * LANES].into_iter().enumerate() {
                        if j0 >= n {
                            continue;
                        }
                        let live = LANES.min(n - j0);
                        let mut sums = [0i32; LANES];
                        let mut bs = [0f32; LANES];
                        sums[..live].copy_from_slice(&w.sums[j0..j0 + live]);
                        bs[..live].copy_from_slice(&bias[j0..j0 + live]);
                        let corr = _mm256_mullo_epi32(_mm256_loadu_si256(sums.as_ptr().cast()), shift);
                        let bv = _mm256_loadu_ps(bs.as_ptr());
                        for (i, acc) in acc.iter().enumerate().take(rows) {
                            let exact = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[h], corr));
                            let v = _mm256_fmadd_ps(exact, _mm256_set1_ps(scales[r + i]), bv);
                            let out = y.as_mut_ptr().add((r + i) * n + j0).cast::<f32>();
                            if live == LANES {
                                _mm256_storeu_ps(out, v);
                            } else {
                                let mut tmp = [0f32; LANES];
                                _mm256_storeu_ps(tmp.as_mut_ptr(), v);
                                std::ptr::copy_nonoverlapping(tmp.as_ptr(), out, live);
                            }
                        }
                    }
                    r += rows;
                }
                b += 2;
            }
        }
    }
}

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
                // Each input moves by at most half a step: the error is bounded by Σ|w| · step / 2.
                let bound: f32 = (0..k)
                    .map(|t| (f32::from(vals[t * n + j]) * scale).abs())
                    .sum::<f32>()
                    * step
                    / 2.0;
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
        let kp = w.groups * GROUP;
        let mut q = vec![SHIFT as u8; m * kp];
        let scales: Vec<f32> = x
            .chunks(k)
            .zip(q.chunks_mut(kp))
            .map(|(x, q)| quantize_row(x, &mut q[..k]) * w.scale)
            .collect();
        let mut portable = vec![MaybeUninit::uninit(); m * n];
        rows_portable(&q, &scales, &w, &bias, &mut portable);
        // SAFETY: the kernel writes every output.
        let portable: Vec<f32> = portable.into_iter().map(|v| unsafe { v.assume_init() }).collect();
        assert_eq!(portable, y);
        // A zero row gives the bias exactly.
        let zero = linear(&vec![0.0; k], &w, Some(&bias));
        assert_eq!(zero, bias);
    }
}
