//! Matrix products in bf16 on CPUs with AVX512-BF16 (`model.precision = "bf16"`): both operands
//! rounded to bf16 (to nearest, ties to even) as they are packed, and their products summed in
//! f32 by `vdpbf16ps`, which multiplies pairs of bf16 along the inner dimension and adds both into
//! one f32 lane. Everything outside the products — the master weights, the optimizer, LayerNorm,
//! softmax, GELU, the loss — stays f32, as PyTorch's CPU autocast does.
//!
//! Layout (BLIS's): the right operand is packed once into panels of [`NR`] columns, each a run of
//! the inner dimension's pairs (`NR` u32 a pair: column `c`'s two bf16 of rows `2p`, `2p + 1`); the
//! left operand is packed by blocks of [`MC`] rows into panels of [`MR`] rows the same way; a
//! microkernel keeps an `MR × NR` tile of f32 sums in 16 registers over the whole inner dimension.
//! Tasks own row blocks and write disjoint rows, and each output is one chain of sums over the
//! inner dimension in order: the same inputs give the same bits on any thread count.

use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use crate::matmul::{Out, View};

/// Rows of the microkernel's tile.
const MR: usize = 8;
/// Columns of the microkernel's tile: two vectors of 16 f32.
const NR: usize = 32;
/// Rows a task packs and computes at a time.
const MC: usize = 64;

/// Whether this CPU multiplies in bf16 (AVX512-BF16 and the AVX-512 foundation it extends).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the matrix products run in bf16 (off until [`set_products`] turns them on).
static PRODUCTS: AtomicBool = AtomicBool::new(false);

/// The matrix products in bf16 from now on (`on`), or in f32; refused where the CPU cannot.
pub fn set_products(on: bool) -> Result<(), Unavailable> {
    if on && !available() {
        return Err(Unavailable);
    }
    PRODUCTS.store(on, Ordering::Relaxed);
    Ok(())
}

/// Whether the matrix products run in bf16 ([`set_products`]).
pub fn products() -> bool {
    PRODUCTS.load(Ordering::Relaxed)
}

/// bf16 products asked of a CPU without AVX512-BF16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable;

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("this CPU has no AVX512-BF16 (bf16 dot products), so bf16 would be emulated and run slower than f32")
    }
}

impl std::error::Error for Unavailable {}

/// `v` rounded to bf16, to nearest with ties to even (a NaN stays a NaN).
#[inline(always)]
pub fn round(v: f32) -> u16 {
    let bits = v.to_bits();
    let rounded = (bits.wrapping_add(0x7FFF + ((bits >> 16) & 1)) >> 16) as u16;
    // A NaN keeps its sign and gets a quiet bit (rounding could carry it into infinity).
    if v.is_nan() {
        ((bits >> 16) | 0x40) as u16
    } else {
        rounded
    }
}

/// The f32 a bf16 stands for.
pub fn widen(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// Rounds elements `(i, j)` and `(i, j + 1)` of `v` into one pair; outside `rows × cols` a zero.
///
/// # Safety
/// Every element inside `rows × cols` of `v` must be readable.
#[inline(always)]
unsafe fn pair(v: View, i: usize, j: usize, rows: usize, cols: usize) -> u32 {
    let at = |j: usize| -> u32 {
        if i < rows && j < cols {
            // SAFETY: inside the matrix, as the caller promised.
            u32::from(round(unsafe {
                *v.ptr.offset(i as isize * v.rs + j as isize * v.cs)
            }))
        } else {
            0
        }
    };
    at(j) | (at(j + 1) << 16)
}

/// Lines `first .. first + width` of `v` (`lines × k`) into `panel`: each of the inner dimension's
/// pairs, `width` u32 a pair (line `l`'s two bf16 of columns `2p`, `2p + 1`); lines past the last
/// are zeros. Both operands are packed so — the right one through its transpose.
///
/// # Safety
/// `v` must address a `lines × k` matrix.
unsafe fn pack_panel(v: View, first: usize, lines: usize, k: usize, width: usize, panel: &mut [u32]) {
    let whole = first + width <= lines;
    // SAFETY: a whole panel's lines lie inside `v`; `pair` reads only inside it.
    unsafe {
        match (whole, v.rs, v.cs) {
            (true, 1, _) => across(v.ptr.add(first), v.cs as usize, k, width, panel),
            (true, _, 1) => along(
                v.ptr.offset(first as isize * v.rs),
                v.rs as usize,
                k,
                width,
                panel,
            ),
            _ => {
                for p in 0..k.div_ceil(2) {
                    for l in 0..width {
                        panel[p * width + l] = pair(v, first + l, 2 * p, lines, k);
                    }
                }
            }
        }
    }
}

/// A panel of `width` lines whose elements sit side by side, the pair's two elements `stride`
/// apart (line `l`, pair `p`: elements `2p · stride + l` and `(2p + 1) · stride + l`): the
/// panel's `pairs × width` u32.
///
/// # Safety
/// `k` rows of `width` elements, `stride` apart, must be readable from `from`.
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx512f,avx512bw"))]
unsafe fn across(from: *const f32, stride: usize, k: usize, width: usize, panel: &mut [u32]) {
    for (p, out) in panel.chunks_exact_mut(width).enumerate() {
        // SAFETY: rows `2p` and `2p + 1` (when below `k`) hold `width` elements each.
        let lo = unsafe { std::slice::from_raw_parts(from.add(2 * p * stride), width) };
        if 2 * p + 1 < k {
            // SAFETY: as above.
            let hi = unsafe { std::slice::from_raw_parts(from.add((2 * p + 1) * stride), width) };
            for ((o, &a), &b) in out.iter_mut().zip(lo).zip(hi) {
                *o = u32::from(round(a)) | (u32::from(round(b)) << 16);
            }
        } else {
            for (o, &a) in out.iter_mut().zip(lo) {
                *o = u32::from(round(a));
            }
        }
    }
}

/// A panel of `width` lines each `stride` apart whose pairs are side by side (line `l`, pair
/// `p`: elements `l · stride + 2p` and `l · stride + 2p + 1`): the panel's `pairs × width` u32.
///
/// # Safety
/// `width` lines of `k` elements, `stride` apart, must be readable from `from`.
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "avx512f,avx512bw"))]
unsafe fn along(from: *const f32, stride: usize, k: usize, width: usize, panel: &mut [u32]) {
    // Each line's pairs rounded side by side first (a loop the compiler vectorises), then laid
    // into the panel `width` apart.
    let mut line_pairs = vec![0u32; k.div_ceil(2)];
    for l in 0..width {
        // SAFETY: line `l` holds `k` elements.
        let line = unsafe { std::slice::from_raw_parts(from.add(l * stride), k) };
        let pairs = line.chunks_exact(2);
        if let Some(&a) = pairs.remainder().first() {
            line_pairs[k / 2] = u32::from(round(a));
        }
        for (o, two) in line_pairs.iter_mut().zip(pairs) {
            *o = u32::from(round(two[0])) | (u32::from(round(two[1])) << 16);
        }
        for (p, &v) in line_pairs.iter().enumerate() {
            panel[p * width + l] = v;
        }
    }
}

/// The right operand `k × n` packed: panels of `NR` columns, each `pairs × NR` u32.
///
/// # Safety
/// `rhs` must address a `k × n` matrix.
unsafe fn pack_rhs(rhs: View, k: usize, n: usize, parallel: bool) -> Vec<u32> {
    let size = k.div_ceil(2) * NR;
    let mut out = vec![0u32; n.div_ceil(NR) * size];
    // SAFETY: `rhs.t()` is `n × k`, as the caller promised of `rhs`.
    let pack = |(jp, panel): (usize, &mut [u32])| unsafe { pack_panel(rhs.t(), jp * NR, n, k, NR, panel) };
    if parallel {
        out.par_chunks_mut(size).enumerate().for_each(pack);
    } else {
        out.chunks_mut(size).enumerate().for_each(pack);
    }
    out
}

/// Rows `i0 .. i0 + rows` of the left operand `m × k` packed into `buf`: panels of `MR` rows,
/// each `pairs × MR` u32.
///
/// # Safety
/// `lhs` must address an `m × k` matrix.
unsafe fn pack_lhs(lhs: View, i0: usize, rows: usize, m: usize, k: usize, buf: &mut Vec<u32>) {
    let size = k.div_ceil(2) * MR;
    buf.clear();
    buf.resize(rows.div_ceil(MR) * size, 0);
    for (ip, panel) in buf.chunks_mut(size).enumerate() {
        // SAFETY: `lhs` is `m × k`, as the caller promised.
        unsafe { pack_panel(lhs, i0 + ip * MR, m, k, MR, panel) };
    }
}

/// `dst[m × n] (rows dst_rs apart) = lhs[m × k] · rhs[k × n]` in bf16, plus `dst` when `add`;
/// row blocks spread over the cores when `parallel`.
///
/// # Safety
/// As [`crate::matmul`]'s `product`, with `k > 0`; and the CPU must have the instructions
/// ([`available`]).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn product(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_rs: usize,
    add: bool,
    lhs: View,
    rhs: View,
    parallel: bool,
) {
    debug_assert!(
        k > 0,
        "matmul::product sends only products of 4 M multiply-adds or more"
    );
    if m == 0 || n == 0 {
        return;
    }
    // SAFETY: `rhs` is `k × n`, as the caller promised.
    let b = unsafe { pack_rhs(rhs, k, n, parallel) };
    let out = Out(dst);
    let block = |buf: &mut Vec<u32>, ib: usize| {
        let (i0, rows) = (ib * MC, MC.min(m - ib * MC));
        // SAFETY: the caller's views and `dst` cover these rows; this block alone writes rows
        // `i0 .. i0 + rows` of `dst`; the CPU has the instructions.
        unsafe {
            pack_lhs(lhs, i0, rows, m, k, buf);
            block_product(
                buf,
                &b,
                k.div_ceil(2),
                (rows, n),
                out.at(i0 * dst_rs),
                dst_rs,
                add,
            );
        }
    };
    let blocks = m.div_ceil(MC);
    if parallel && blocks > 1 {
        (0..blocks).into_par_iter().for_each_init(Vec::new, block);
    } else {
        let mut buf = Vec::new();
        (0..blocks).for_each(|ib| block(&mut buf, ib));
    }
}

/// One row block: every `MR × NR` tile of packed `a` (its rows) by packed `b`.
///
/// # Safety
/// `dst` must hold `rows × n` (rows `dst_rs` apart); the CPU must have AVX512-BF16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn block_product(
    a: &[u32],
    b: &[u32],
    pairs: usize,
    (rows, n): (usize, usize),
    dst: *mut f32,
    dst_rs: usize,
    add: bool,
) {
    use std::arch::x86_64::*;
    for (jp, bp) in b.chunks(pairs * NR).enumerate() {
        let cols = NR.min(n - jp * NR);
        // Columns of the tile's two vectors that exist.
        let mask = |v: usize| -> __mmask16 {
            let c = cols.saturating_sub(16 * v).min(16);
            ((1u32 << c) - 1) as __mmask16
        };
        let masks = [mask(0), mask(1)];
        for (ip, ap) in a.chunks(pairs * MR).enumerate() {
            let mut acc = [[_mm512_setzero_ps(); 2]; MR];
            for p in 0..pairs {
                // SAFETY: `bp` holds `pairs × NR` u32 and `ap` `pairs × MR`.
                let (b0, b1) = unsafe {
                    let at = bp.as_ptr().add(p * NR);
                    (
                        _mm512_loadu_si512(at.cast()),
                        _mm512_loadu_si512(at.add(16).cast()),
                    )
                };
                let (b0, b1) = (pairs_of(b0), pairs_of(b1));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let av = pairs_of(_mm512_set1_epi32(ap[p * MR + r] as i32));
                    acc[0] = _mm512_dpbf16_ps(acc[0], av, b0);
                    acc[1] = _mm512_dpbf16_ps(acc[1], av, b1);
                }
            }
            for (r, acc) in acc.iter().enumerate().take(rows.saturating_sub(ip * MR).min(MR)) {
                // SAFETY: row `ip · MR + r` of the block and its first `cols` columns are in `dst`.
                unsafe {
                    let row = dst.add((ip * MR + r) * dst_rs + jp * NR);
                    for (v, &m) in masks.iter().enumerate() {
                        if m == 0 {
                            continue;
                        }
                        let at = row.add(16 * v);
                        let sum = if add {
                            _mm512_add_ps(acc[v], _mm512_maskz_loadu_ps(m, at))
                        } else {
                            acc[v]
                        };
                        _mm512_mask_storeu_ps(at, m, sum);
                    }
                }
            }
        }
    }
}

/// 16 lanes of 32 bits read as 32 bf16 (the same 64 bytes).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn pairs_of(v: std::arch::x86_64::__m512i) -> std::arch::x86_64::__m512bh {
    // SAFETY: both are 64 bytes of plain lanes; every bit pattern is a valid value of each.
    unsafe { std::mem::transmute(v) }
}

/// Elsewhere there is no bf16 path ([`available`] is false).
#[cfg(not(target_arch = "x86_64"))]
unsafe fn block_product(_: &[u32], _: &[u32], _: usize, _: (usize, usize), _: *mut f32, _: usize, _: bool) {
    unreachable!("bf16 products need AVX512-BF16")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_to_nearest_with_ties_to_even() {
        assert_eq!(widen(round(1.0)), 1.0);
        // 1 + 2⁻⁸ lies halfway between 1 and 1 + 2⁻⁷: ties go to the even one, 1.
        assert_eq!(widen(round(1.0 + 1.0 / 256.0)), 1.0);
        assert_eq!(widen(round(1.0 + 3.0 / 256.0)), 1.0 + 4.0 / 256.0);
        assert_eq!(widen(round(-2.5)), -2.5);
        assert!(widen(round(f32::NAN)).is_nan());
        assert_eq!(widen(round(f32::INFINITY)), f32::INFINITY);
    }

    /// `lhs · rhs` in f64 from the bf16-rounded operands: what the kernel must give, up to f32
    /// summation.
    fn reference(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f64> {
        let r = |v: f32| widen(round(v)) as f64;
        (0..m * n)
            .map(|o| (0..k).map(|t| r(a[o / n * k + t]) * r(b[t * n + o % n])).sum())
            .collect()
    }

    #[test]
    fn products_of_every_edge_shape_match_the_rounded_operands() {
        if !available() {
            eprintln!("skipped: this CPU has no AVX512-BF16");
            return;
        }
        for (m, n, k) in [(1, 1, 1), (7, 33, 5), (64, 32, 2), (130, 70, 129), (9, 17, 384)] {
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 31.0)
                .collect();
            let b: Vec<f32> = (0..k * n).map(|i| ((i * 13 % 89) as f32 - 44.0) / 23.0).collect();
            let want = reference(m, n, k, &a, &b);
            // Each operand read as stored (row-major) and through the transpose of a copy that
            // is stored the other way: the two packing layouts of each side.
            let at: Vec<f32> = (0..k * m).map(|i| a[i % m * k + i / m]).collect();
            let bt: Vec<f32> = (0..n * k).map(|i| b[i % k * n + i / k]).collect();
            let lhs = [View::rows(a.as_ptr(), k), View::rows(at.as_ptr(), m).t()];
            let rhs = [View::rows(b.as_ptr(), n), View::rows(bt.as_ptr(), k).t()];
            for (add, l, r) in [
                (false, 0, 0),
                (true, 0, 0),
                (false, 1, 1),
                (true, 1, 0),
                (false, 0, 1),
            ] {
                let mut dst = vec![if add { 1.0f32 } else { f32::NAN }; m * n];
                // SAFETY: the views cover `m × k` and `k × n`; `dst` is `m × n`.
                unsafe { product(m, n, k, dst.as_mut_ptr(), n, add, lhs[l], rhs[r], true) };
                for (o, (&got, &w)) in dst.iter().zip(&want).enumerate() {
                    let w = w + if add { 1.0 } else { 0.0 };
                    let tol = 1e-5 * (1.0 + w.abs()) * k as f64;
                    assert!(
                        (got as f64 - w).abs() <= tol,
                        "{m}×{n}×{k} ({l}, {r}) [{o}]: {got} vs {w}"
                    );
                }
            }
        }
    }
}
