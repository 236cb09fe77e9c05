//! The kernels' arithmetic on host slices: GELU with its derivative, the softmax and LayerNorm
//! backward passes, row by row and spread over the cores.
//!
//! Every loop is written so that LLVM vectorises it (no branches, lane-wise accumulators for sums)
//! and compiled for AVX-512, AVX2 + FMA and plain x86-64; `multiversion` picks one at run time,
//! so one binary serves both machine kinds. Work is split into fixed chunks whatever the number
//! of threads, and partial sums are added in chunk order: the same inputs give the same bits on
//! any thread count.

use multiversion::multiversion;
use rayon::prelude::*;

/// Elements a parallel task handles in element-wise kernels.
const CHUNK: usize = 16 * 1024;
/// Lanes of the accumulators in row reductions (a multiple of every SIMD width).
const LANES: usize = 16;

/// `erf(x)`: Eigen's rational approximation on [-4, 4] (outside it erf is ±1 in f32); error
/// about 1e-7, no branches.
#[inline(always)]
fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = x2.mul_add(-2.726_142_3e-10, 2.770_681_4e-8);
    p = x2.mul_add(p, -2.101_024e-6);
    p = x2.mul_add(p, -5.692_506_4e-5);
    p = x2.mul_add(p, -7.349_906_3e-4);
    p = x2.mul_add(p, -2.954_6e-3);
    p = x2.mul_add(p, -1.609_603_3e-2);
    let mut q = x2.mul_add(-1.456_607_2e-5, -2.133_740_6e-4);
    q = x2.mul_add(q, -1.682_827e-3);
    q = x2.mul_add(q, -7.373_329_2e-3);
    q = x2.mul_add(q, -1.426_473_9e-2);
    x * p / q
}

/// `exp(x)` for x ≤ 0 (Cephes' polynomial, 2ⁿ built from bits); relative error about 2e-7, no
/// branches; exactly 0 below −87, where exp leaves the normal floats. (It used to return exp(−87)
/// there: a padded key's attention probability, normalised, became a subnormal ~1e-40 — 23 % of
/// the default run's probabilities, and through them of its gradients; BENCHMARKS.md
/// "Denormals".)
#[inline(always)]
fn exp_neg(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 × 2²³: adding it rounds to an integer in the low bits
    // Comparisons, not `max`, so that NaN stays NaN (a non-finite loss must be seen).
    let under = x < -87.0;
    let x = if under { -87.0 } else { x };
    let t = x.mul_add(std::f32::consts::LOG2_E, MAGIC);
    let n = t - MAGIC;
    let k = t.to_bits() as i32 - MAGIC.to_bits() as i32;
    let r = n.mul_add(-0.693_359_4, x);
    let r = n.mul_add(2.121_944_4e-4, r);
    let mut p = r.mul_add(1.987_569_1e-4, 1.398_2e-3);
    p = r.mul_add(p, 8.333_452e-3);
    p = r.mul_add(p, 4.166_579_6e-2);
    p = r.mul_add(p, 0.166_666_65);
    p = r.mul_add(p, 0.5);
    let e = (r * r).mul_add(p, r) + 1.0;
    let e = e * f32::from_bits(((k + 127) << 23) as u32);
    if under { 0.0 } else { e }
}

const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// 1/√(2π).
const INV_SQRT_2PI: f32 = 0.398_942_3;

/// GELU with the exact (erf) form, as PyTorch's and Hugging Face's `gelu`.
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * FRAC_1_SQRT_2))
}

/// The derivative of [`gelu`] times the incoming gradient.
#[inline(always)]
pub fn gelu_grad(x: f32, g: f32) -> f32 {
    let cdf = 0.5 * (1.0 + erf(x * FRAC_1_SQRT_2));
    let pdf = INV_SQRT_2PI * exp_neg(-0.5 * x * x);
    g * x.mul_add(pdf, cdf)
}

/// GELU of every element of `x` into `y` (the same length), on this core.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma", "x86_64+avx2+fma"))]
pub(crate) fn gelu_chunk(x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = gelu(x);
    }
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma", "x86_64+avx2+fma"))]
fn gelu_grad_chunk(x: &[f32], g: &[f32], out: &mut [f32]) {
    for ((o, &x), &g) in out.iter_mut().zip(x).zip(g) {
        *o = gelu_grad(x, g);
    }
}

/// A new buffer of `len` elements whose chunk `i` (elements `i · chunk ..`, the last one shorter)
/// is written by `fill(i, chunk)`, the chunks in parallel. Each task zeroes its own chunk just
/// before filling it: a zeroed `vec!` would first clear the whole buffer on one core.
pub(crate) fn filled(len: usize, chunk: usize, fill: impl Fn(usize, &mut [f32]) + Sync) -> Vec<f32> {
    let mut out = Vec::with_capacity(len);
    out.spare_capacity_mut()[..len]
        .par_chunks_mut(chunk.max(1))
        .enumerate()
        .for_each(|(i, c)| {
            c.iter_mut().for_each(|v| {
                v.write(0.0);
            });
            // SAFETY: every element of the chunk was just initialised.
            let c = unsafe { &mut *(c as *mut [std::mem::MaybeUninit<f32>] as *mut [f32]) };
            fill(i, c);
        });
    // SAFETY: the chunks cover all `len` elements, each initialised.
    unsafe { out.set_len(len) };
    out
}

/// GELU of every element.
pub fn gelu_all(x: &[f32]) -> Vec<f32> {
    filled(x.len(), CHUNK, |i, y| gelu_chunk(&x[i * CHUNK..][..y.len()], y))
}

/// The gradient of GELU at `x` given the output's gradient `g`.
pub fn gelu_backward(x: &[f32], g: &[f32]) -> Vec<f32> {
    assert_eq!(
        x.len(),
        g.len(),
        "gelu backward: input and gradient differ in size"
    );
    filled(x.len(), CHUNK, |i, o| {
        let at = i * CHUNK;
        gelu_grad_chunk(&x[at..at + o.len()], &g[at..at + o.len()], o)
    })
}

/// Σ a·b with lane-wise partial sums (vectorisable, same order every time).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (a, b) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] = a[i].mul_add(b[i], acc[i]);
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(a, b)| a * b).sum();
    acc.iter().sum::<f32>() + tail
}

/// Σ a with lane-wise partial sums.
#[inline(always)]
fn sum(a: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let ca = a.chunks_exact(LANES);
    let tail: f32 = ca.remainder().iter().sum();
    for a in ca {
        for i in 0..LANES {
            acc[i] += a[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// The larger of a running maximum `m` and `v`, `m` when `v` is NaN: one comparison (`vmaxps`
/// in a vector loop), where `f32::max` adds NaN handling a maximum that starts at a number never
/// needs.
#[inline(always)]
pub(crate) fn larger(m: f32, v: f32) -> f32 {
    if v > m { v } else { m }
}

/// max over a row with lane-wise partial maxima, passing over NaN as `f32::max` does (the
/// maxima start at −∞ and never become NaN).
#[inline(always)]
fn max(a: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let ca = a.chunks_exact(LANES);
    let tail = ca
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| larger(m, v));
    for a in ca {
        for i in 0..LANES {
            acc[i] = larger(acc[i], a[i]);
        }
    }
    acc.iter().fold(tail, |m, &v| larger(m, v))
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma", "x86_64+avx2+fma"))]
pub(crate) fn softmax_row(x: &[f32], bias: &[f32], scale: f32, y: &mut [f32]) {
    for ((y, &x), &b) in y.iter_mut().zip(x).zip(bias) {
        *y = x.mul_add(scale, b);
    }
    let m = max(y);
    for y in y.iter_mut() {
        *y = exp_neg(*y - m);
    }
    let inv = 1.0 / sum(y);
    for y in y.iter_mut() {
        *y *= inv;
    }
}

/// `softmax(x · scale + bias)` over rows of `row` elements. `bias` holds whole rows (an additive
/// mask, −1e4 where a key is padding); bias row `i` applies to the `i`-th consecutive block of
/// `x`'s rows, so a `[batch, 1, 1, keys]` mask covers `[batch, heads, queries, keys]` scores.
/// A row whose entries are all −∞ or NaN gives NaN, as the unfused softmax does.
pub fn softmax(x: &[f32], bias: &[f32], scale: f32, row: usize) -> Vec<f32> {
    if row == 0 || x.is_empty() {
        return vec![0f32; x.len()];
    }
    assert_eq!(x.len() % row, 0, "softmax: rows of {row} elements expected");
    assert!(
        !bias.is_empty()
            && bias.len().is_multiple_of(row)
            && (x.len() / row).is_multiple_of(bias.len() / row),
        "softmax: the mask's rows must divide the scores' rows"
    );
    let rows_per_mask = x.len() / bias.len();
    let per_task = rows_per_task(row);
    let n = per_task * row;
    filled(x.len(), n, |t, y| {
        for (k, (y, x)) in y.chunks_mut(row).zip(x[t * n..].chunks(row)).enumerate() {
            let m = (t * per_task + k) / rows_per_mask;
            softmax_row(x, &bias[m * row..(m + 1) * row], scale, y);
        }
    })
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma", "x86_64+avx2+fma"))]
pub(crate) fn softmax_backward_rows(y: &[f32], g: &[f32], out: &mut [f32], row: usize, scale: f32) {
    for ((y, g), o) in y.chunks(row).zip(g.chunks(row)).zip(out.chunks_mut(row)) {
        let d = dot(y, g);
        for ((o, &y), &g) in o.iter_mut().zip(y).zip(g) {
            *o = scale * y * (g - d);
        }
    }
}

/// Rows a parallel task handles: about [`CHUNK`] elements, at least one row.
fn rows_per_task(row: usize) -> usize {
    (CHUNK / row.max(1)).max(1)
}

/// The gradient with respect to `x` of `softmax(x · scale + bias)` over rows of `row` elements,
/// from its output `y` and the output's gradient `g`: `scale · y · (g − Σ y·g)` a row.
pub fn softmax_backward(y: &[f32], g: &[f32], row: usize, scale: f32) -> Vec<f32> {
    assert_eq!(
        y.len(),
        g.len(),
        "softmax backward: output and gradient differ in size"
    );
    if row == 0 {
        return vec![0f32; y.len()];
    }
    let n = rows_per_task(row) * row;
    filled(y.len(), n, |i, o| {
        let at = i * n;
        softmax_backward_rows(&y[at..at + o.len()], &g[at..at + o.len()], o, row, scale)
    })
}

/// The gradients of a LayerNorm: the input's, the scale's (γ) and the shift's (β).
#[derive(Debug, Clone, PartialEq)]
pub struct LayerNormGrads {
    /// ∂L/∂x, the input's shape.
    pub x: Vec<f32>,
    /// ∂L/∂γ, one per feature.
    pub gamma: Vec<f32>,
    /// ∂L/∂β, one per feature.
    pub beta: Vec<f32>,
}

/// [`layer_norm`] of whole rows of `gamma.len()` features into `y` (the same length), on this core.
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma", "x86_64+avx2+fma"))]
pub(crate) fn layer_norm_rows(x: &[f32], gamma: &[f32], beta: &[f32], eps: f32, y: &mut [f32]) {
    let d = gamma.len();
    let inv_d = 1.0 / d as f32;
    for (x, y) in x.chunks(d).zip(y.chunks_mut(d)) {
        let mean = sum(x) * inv_d;
        for (y, &x) in y.iter_mut().zip(x) {
            *y = x - mean;
        }
        let var = dot(y, y) * inv_d;
        let rstd = 1.0 / (var + eps).sqrt();
        for (y, (&g, &b)) in y.iter_mut().zip(gamma.iter().zip(beta)) {
            *y = (*y * rstd).mul_add(g, b);
        }
    }
}

/// `(x − mean) / √(var + eps) · γ + β` over rows of `gamma.len()` features (mean and variance
/// in two passes, as the backward recomputes them), rows spread over the cores.
pub fn layer_norm(x: &[f32], gamma: &[f32], beta: &[f32], eps: f32) -> Vec<f32> {
    let d = gamma.len();
    assert_eq!(beta.len(), d, "layer norm: γ and β differ in size");
    if d == 0 {
        return vec![0f32; x.len()];
    }
    assert_eq!(x.len() % d, 0, "layer norm: rows of {d} features expected");
    let n = rows_per_task(d) * d;
    filled(x.len(), n, |i, y| {
        layer_norm_rows(&x[i * n..][..y.len()], gamma, beta, eps, y)
    })
}

#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma", "x86_64+avx2+fma"))]
fn layer_norm_backward_rows(
    x: &[f32],
    g: &[f32],
    gamma: &[f32],
    eps: f32,
    dx: &mut [f32],
    dgamma: &mut [f64],
    dbeta: &mut [f64],
) {
    let d = gamma.len();
    let inv_d = 1.0 / d as f32;
    let mut xhat = vec![0f32; d];
    let mut gy = vec![0f32; d];
    for ((x, g), dx) in x.chunks(d).zip(g.chunks(d)).zip(dx.chunks_mut(d)) {
        let mean = sum(x) * inv_d;
        for (h, &x) in xhat.iter_mut().zip(x) {
            *h = x - mean;
        }
        let var = dot(&xhat, &xhat) * inv_d;
        let rstd = 1.0 / (var + eps).sqrt();
        for (h, (gy, (&g, &gm))) in xhat.iter_mut().zip(gy.iter_mut().zip(g.iter().zip(gamma))) {
            *h *= rstd;
            *gy = g * gm;
        }
        let a = sum(&gy) * inv_d;
        let b = dot(&gy, &xhat) * inv_d;
        for i in 0..d {
            dx[i] = rstd * (gy[i] - a - xhat[i] * b);
            dgamma[i] += (g[i] * xhat[i]) as f64;
            dbeta[i] += g[i] as f64;
        }
    }
}

/// The backward pass of `y = (x − mean) / √(var + eps) · γ + β` over rows of `gamma.len()`
/// features, from the input `x` and the output's gradient `g` (mean and variance recomputed:
/// one cheap pass instead of two tensors kept from the forward). γ's and β's gradients sum
/// over every row, in f64: thousands of rows with cancelling signs would lose digits in f32.
pub fn layer_norm_backward(x: &[f32], g: &[f32], gamma: &[f32], eps: f32) -> LayerNormGrads {
    assert_eq!(
        x.len(),
        g.len(),
        "layer norm backward: input and gradient differ in size"
    );
    let d = gamma.len();
    let mut dx = vec![0f32; x.len()];
    if d == 0 {
        return LayerNormGrads {
            x: dx,
            gamma: vec![],
            beta: vec![],
        };
    }
    assert_eq!(
        x.len() % d,
        0,
        "layer norm backward: rows of {d} features expected"
    );
    let n = rows_per_task(d) * d;
    let partial: Vec<(Vec<f64>, Vec<f64>)> = dx
        .par_chunks_mut(n)
        .zip(x.par_chunks(n).zip(g.par_chunks(n)))
        .map(|(dx, (x, g))| {
            let (mut dg, mut db) = (vec![0f64; d], vec![0f64; d]);
            layer_norm_backward_rows(x, g, gamma, eps, dx, &mut dg, &mut db);
            (dg, db)
        })
        .collect();
    let (mut dgamma, mut dbeta) = (vec![0f64; d], vec![0f64; d]);
    for (dg, db) in &partial {
        for i in 0..d {
            dgamma[i] += dg[i];
            dbeta[i] += db[i];
        }
    }
    let f32s = |v: Vec<f64>| v.into_iter().map(|v| v as f32).collect();
    LayerNormGrads {
        x: dx,
        gamma: f32s(dgamma),
        beta: f32s(dbeta),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// erf from its Taylor series in f64 (std has no erf): cancellation costs under 1e-9 on
    /// [-4, 4], far below the f32 errors checked.
    fn erf_ref(x: f64) -> f64 {
        let (mut term, mut s, mut n) = (x, x, 0.0);
        while term.abs() > 1e-17 {
            n += 1.0;
            term *= -x * x / n;
            s += term / (2.0 * n + 1.0);
        }
        s * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn erf_and_exp_are_accurate() {
        for i in -4000..=4000 {
            let x = i as f32 / 1000.0;
            let e = (erf(x) as f64 - erf_ref(x as f64)).abs();
            assert!(e < 5e-7, "erf({x}) off by {e}");
        }
        for i in 0..=8700 {
            let x = -(i as f32) / 100.0;
            let want = (x as f64).exp();
            let rel = ((exp_neg(x) as f64 - want) / want).abs();
            assert!(rel < 5e-7, "exp({x}) off by {rel} relative");
        }
        // Below the normal floats' range: exactly 0, never a subnormal; NaN stays NaN.
        for x in [-87.01, -100.0, -1e4, f32::NEG_INFINITY] {
            assert_eq!(exp_neg(x).to_bits(), 0, "exp({x})");
        }
        assert!(exp_neg(f32::NAN).is_nan());
    }

    #[test]
    fn padded_keys_get_exactly_zero_probability() {
        // A row of 128 keys, the last 100 padding (−1e4), as the default run's batches have.
        let x: Vec<f32> = (0..128).map(|i| (i % 7) as f32 * 0.3).collect();
        let bias: Vec<f32> = (0..128).map(|i| if i < 28 { 0.0 } else { -1e4 }).collect();
        let p = softmax(&x, &bias, 0.25, 128);
        assert!(
            p[28..].iter().all(|&v| v.to_bits() == 0),
            "a padded key's probability is not 0"
        );
        assert!(p.iter().all(|v| !v.is_subnormal()));
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn gelu_gradient_matches_finite_differences() {
        for i in -600..=600 {
            let x = i as f64 / 100.0;
            let f = |x: f64| 0.5 * x * (1.0 + erf_ref(x / 2f64.sqrt()));
            let fd = (f(x + 1e-4) - f(x - 1e-4)) / 2e-4;
            let got = gelu_grad(x as f32, 1.0) as f64;
            assert!(
                (got - fd).abs() < 1e-5,
                "gelu'({x}) = {got}, finite difference {fd}"
            );
            assert!((gelu(x as f32) as f64 - f(x)).abs() < 1e-6);
        }
    }
}
