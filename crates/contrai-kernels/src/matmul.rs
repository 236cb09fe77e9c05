//! Linear layers and multi-head attention on host slices, forward and backward, as calls to the
//! `gemm` crate's f32 kernels (the ones Burn flex uses) with the bias, the head split and merge,
//! the softmax and the dropout mask folded around them.
//!
//! Burn builds a linear layer from a broadcast batched matmul and an add, and attention from a
//! head-split copy, two batched matmuls, a softmax and a head-merge copy. Each Burn operation
//! allocates its output zeroed and then copies it into an aligned buffer (flex's
//! `FlexTensor::empty`): 12 % of the default transformer's forward, on one core. Here each
//! output is written once: a linear layer's rows start as its bias and the product is added in
//! place; attention reads the heads straight out of the projections' `[batch, seq, heads · dh]`
//! layout and writes its context the same way, so no head ever gets its own copy.
//!
//! Determinism: `gemm` splits work over output blocks only, never over the inner dimension; the
//! parameter gradients sum fixed row chunks in chunk order, each weight-gradient column block in
//! one task: the same inputs give the same bits on any thread count.

use rayon::prelude::*;

use crate::dropout::Mask;
use crate::math;

/// Below this many multiply-adds a product runs on one core (Burn flex's threshold).
const PARALLEL_WORK: usize = 192 * 192 * 192;
/// Below this many multiply-adds a product stays f32 when the products are bf16: packing both
/// operands into bf16 pairs costs more than the bf16 arithmetic saves (one head's attention
/// products, 128 × 128 × 32, are 0.5 M).
const BF16_WORK: usize = 4 << 20;
/// Rows a task fills with the bias, and rows summed at a time in the parameter gradients.
const SUM_ROWS: usize = 256;
/// Output columns a task computes in a weight gradient.
const W_COLUMNS: usize = 64;

/// A read-only matrix: its first element and its row and column strides, in elements.
#[derive(Clone, Copy)]
pub(crate) struct View {
    pub(crate) ptr: *const f32,
    pub(crate) rs: isize,
    pub(crate) cs: isize,
}

impl View {
    /// Row-major `[rows, cols]` starting at `ptr`, rows `stride` apart.
    pub(crate) fn rows(ptr: *const f32, stride: usize) -> Self {
        View {
            ptr,
            rs: stride as isize,
            cs: 1,
        }
    }

    /// The transpose of this matrix.
    pub(crate) fn t(self) -> Self {
        View {
            ptr: self.ptr,
            rs: self.cs,
            cs: self.rs,
        }
    }
}

// SAFETY: the views point into slices borrowed for the whole call and are only read.
unsafe impl Send for View {}
unsafe impl Sync for View {}

/// A raw output pointer that tasks share; each task writes a disjoint part of it.
#[derive(Clone, Copy)]
pub(crate) struct Out(pub(crate) *mut f32);
// SAFETY: `Out` is only handed to tasks whose writes are disjoint (each function below says which
// part a task owns), and the buffer outlives the parallel loop that uses it.
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

impl Out {
    /// The element `offset` places in (a method, so that closures capture the whole `Out`).
    ///
    /// # Safety
    /// `offset` must lie inside the buffer.
    pub(crate) unsafe fn at(self, offset: usize) -> *mut f32 {
        // SAFETY: forwarded from the caller.
        unsafe { self.0.add(offset) }
    }
}

/// `dst[m × n] (rows dst_rs apart) = lhs[m × k] · rhs[k × n]`, plus `dst` when `add` — in bf16
/// when [`crate::bf16::products`] says so.
///
/// # Safety
/// `dst`, `lhs` and `rhs` must address valid matrices of those shapes and strides; `dst` must not
/// overlap the inputs; with `add` false `dst` may be uninitialised (it is only written).
#[allow(clippy::too_many_arguments)]
unsafe fn product(
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
    let work = m.saturating_mul(n).saturating_mul(k);
    if crate::bf16::products() && work >= BF16_WORK {
        // SAFETY: forwarded from the caller; `products` is on only where the CPU has the
        // instructions.
        return unsafe { crate::bf16::product(m, n, k, dst, dst_rs, add, lhs, rhs, parallel) };
    }
    let parallelism = if parallel && work >= PARALLEL_WORK {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: forwarded from the caller.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_rs as isize,
            add,
            lhs.ptr,
            lhs.cs,
            lhs.rs,
            rhs.ptr,
            rhs.cs,
            rhs.rs,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// A buffer of `n` elements, each written by `fill` (not zeroed first: Burn's zeroing and copying
/// of fresh outputs is what this module saves).
///
/// # Safety
/// `fill` must write every one of the `n` elements behind the pointer it is given.
unsafe fn written(n: usize, fill: impl FnOnce(*mut f32)) -> Vec<f32> {
    let mut out = Vec::<f32>::with_capacity(n);
    fill(out.as_mut_ptr());
    // SAFETY: the caller's `fill` initialised all `n` elements.
    unsafe { out.set_len(n) };
    out
}

/// A new `m × n` row-major matrix, `lhs · rhs`.
fn new_product(m: usize, n: usize, k: usize, lhs: View, rhs: View) -> Vec<f32> {
    // SAFETY: the caller's views cover `m × k` and `k × n` elements of live slices; the product
    // writes all `m × n` elements.
    unsafe { written(m * n, |dst| product(m, n, k, dst, n, false, lhs, rhs, true)) }
}

/// `x · w + bias` for `x` of rows of `d_in` and `w` `[d_in, d_out]`: rows of `d_out`.
///
/// # Panics
/// When the lengths do not fit those shapes.
pub fn linear(x: &[f32], w: &[f32], bias: &[f32], d_in: usize, d_out: usize) -> Vec<f32> {
    assert!(
        d_in > 0 && x.len().is_multiple_of(d_in),
        "linear: rows of {d_in} inputs expected"
    );
    assert_eq!(w.len(), d_in * d_out, "linear: the weight is [{d_in}, {d_out}]");
    assert_eq!(bias.len(), d_out, "linear: one bias an output");
    let rows = x.len() / d_in;
    if d_out == 0 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(rows * d_out);
    out.spare_capacity_mut()[..rows * d_out]
        .par_chunks_mut(SUM_ROWS * d_out)
        .for_each(|c| {
            for r in c.chunks_mut(d_out) {
                r.iter_mut().zip(bias).for_each(|(o, b)| {
                    o.write(*b);
                });
            }
        });
    // SAFETY: every row was just set to the bias; `x` is `rows × d_in`, `w` `d_in × d_out`,
    // `out` `rows × d_out`, all row-major, and the product adds into `out`.
    unsafe {
        out.set_len(rows * d_out);
        let (x, w) = (View::rows(x.as_ptr(), d_in), View::rows(w.as_ptr(), d_out));
        product(rows, d_out, d_in, out.as_mut_ptr(), d_out, true, x, w, true);
    }
    out
}

/// ∂L/∂x of [`linear`]: `g · wᵀ`, rows of `d_in`.
pub fn linear_backward_x(g: &[f32], w: &[f32], d_in: usize, d_out: usize) -> Vec<f32> {
    assert!(
        d_out > 0 && g.len().is_multiple_of(d_out) && w.len() == d_in * d_out,
        "linear_backward_x: shapes"
    );
    let rows = g.len() / d_out;
    new_product(
        rows,
        d_in,
        d_out,
        View::rows(g.as_ptr(), d_out),
        View::rows(w.as_ptr(), d_out).t(),
    )
}

/// ∂L/∂w of [`linear`]: `xᵀ · g`, `[d_in, d_out]`. Each task owns [`W_COLUMNS`] output columns
/// and sums their rows [`SUM_ROWS`] at a time (one f32 chain over every row of a batch loses
/// digits: 5e-5 of the sum at 1,024 rows, 3e-5 this way), so the cores share even a small layer's
/// gradient and every column is summed in the same order on any thread count.
pub fn linear_backward_w(x: &[f32], g: &[f32], d_in: usize, d_out: usize) -> Vec<f32> {
    assert!(
        d_in > 0 && d_out > 0 && x.len() / d_in == g.len() / d_out,
        "linear_backward_w: shapes"
    );
    let rows = x.len() / d_in;
    let mut dw = vec![0f32; d_in * d_out];
    if crate::bf16::products() {
        // One product over every row: the bf16 path packs each operand once (column blocks
        // would pack `x` again for each), and its sums over rows are f32 either way.
        let (xt, g) = (View::rows(x.as_ptr(), d_in).t(), View::rows(g.as_ptr(), d_out));
        // SAFETY: `x` is `rows × d_in`, `g` `rows × d_out`, `dw` `d_in × d_out`, row-major.
        unsafe { product(d_in, d_out, rows, dw.as_mut_ptr(), d_out, false, xt, g, true) };
        return dw;
    }
    let out = Out(dw.as_mut_ptr());
    (0..d_out.div_ceil(W_COLUMNS)).into_par_iter().for_each(|block| {
        let (c0, n) = (block * W_COLUMNS, W_COLUMNS.min(d_out - block * W_COLUMNS));
        for start in (0..rows).step_by(SUM_ROWS) {
            let k = SUM_ROWS.min(rows - start);
            let x = View::rows(x[start * d_in..].as_ptr(), d_in).t();
            let g = View::rows(g[start * d_out + c0..].as_ptr(), d_out);
            // SAFETY: rows `start .. start + k` of x and g exist and g's columns `c0 .. c0 + n`;
            // this task alone writes columns `c0 .. c0 + n` of `dw` (`d_in × d_out`).
            unsafe { product(d_in, n, k, out.at(c0), d_out, true, x, g, false) };
        }
    });
    dw
}

/// ∂L/∂bias of [`linear`]: the column sums of `g` (in f64, fixed chunks added in order).
pub fn linear_backward_bias(g: &[f32], d_out: usize) -> Vec<f32> {
    assert!(
        d_out > 0 && g.len().is_multiple_of(d_out),
        "linear_backward_bias: rows of {d_out} expected"
    );
    let partial: Vec<Vec<f64>> = g
        .par_chunks(SUM_ROWS * d_out)
        .map(|c| {
            let mut acc = vec![0f64; d_out];
            for r in c.chunks(d_out) {
                acc.iter_mut().zip(r).for_each(|(a, &v)| *a += v as f64);
            }
            acc
        })
        .collect();
    let mut sum = vec![0f64; d_out];
    for p in &partial {
        sum.iter_mut().zip(p).for_each(|(s, v)| *s += v);
    }
    sum.into_iter().map(|s| s as f32).collect()
}

/// The sizes of one attention call: `[batch, seq, heads · head_dim]` projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    /// Samples.
    pub batch: usize,
    /// Positions a sample (queries and keys alike).
    pub seq: usize,
    /// Heads.
    pub heads: usize,
    /// Features a head.
    pub dim: usize,
}

impl Heads {
    /// Features a position, all heads together.
    fn width(&self) -> usize {
        self.heads * self.dim
    }

    /// Elements of one projection.
    pub fn elements(&self) -> usize {
        self.batch * self.seq * self.width()
    }

    /// Elements of the probabilities, `[batch, heads, seq, seq]`.
    pub fn probabilities(&self) -> usize {
        self.batch * self.heads * self.seq * self.seq
    }

    /// Head `h` of sample `b` (`unit` = b · heads + h) in a projection: `seq × dim`, rows
    /// `width` apart.
    fn head(&self, p: &[f32], unit: usize) -> View {
        View::rows(p[self.offset(unit)..].as_ptr(), self.width())
    }

    /// Offset of head `unit`'s first element in a projection.
    fn offset(&self, unit: usize) -> usize {
        let (b, h) = (unit / self.heads, unit % self.heads);
        b * self.seq * self.width() + h * self.dim
    }

    /// Panics unless the projections fit these sizes.
    fn check(&self, [q, k, v]: [&[f32]; 3]) {
        let n = self.elements();
        assert!(
            q.len() == n && k.len() == n && v.len() == n,
            "attention: q, k, v are [{}, {}, {}]",
            self.batch,
            self.seq,
            self.width()
        );
    }
}

/// The output of [`attention`]: the context and, when asked for, the probabilities.
pub struct Attended {
    /// `[batch, seq, heads · dim]`.
    pub context: Vec<f32>,
    /// `[batch, heads, seq, seq]` before dropout (empty unless kept).
    pub probabilities: Vec<f32>,
}

/// Multi-head attention: for each sample and head, `softmax(q kᵀ · scale + key_bias) ⊙ drop · v`.
/// `q`, `k`, `v` and the context are `[batch, seq, heads · dim]` (the projections' own layout);
/// `key_bias` is `[batch, seq]` (0 for real keys, −1e4 for padding); `drop`, when given, is the
/// dropout mask of the probabilities, `[batch, heads, seq, seq]`, each head's block drawn inside
/// its task. The probabilities are returned when `keep` is set (the backward pass needs them).
#[allow(clippy::too_many_arguments)]
pub fn attention(
    shape: Heads,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    key_bias: &[f32],
    drop: Option<Mask>,
    scale: f32,
    keep: bool,
) -> Attended {
    shape.check([q, k, v]);
    assert_eq!(
        key_bias.len(),
        shape.batch * shape.seq,
        "attention: the key bias is [batch, 1, 1, seq]"
    );
    let s = shape.seq;
    let kept_len = if keep { shape.probabilities() } else { 0 };
    if s == 0 || shape.dim == 0 {
        return Attended {
            context: vec![0f32; shape.elements()],
            probabilities: vec![0f32; kept_len],
        };
    }
    let mut probabilities = Vec::new();
    // SAFETY: the units together write every element of the context (each its head's `s × dim`
    // block) and of the kept probabilities (each its `s × s` block).
    let context = unsafe {
        written(shape.elements(), |context| {
            probabilities = written(kept_len, |kept| {
                attend_units(
                    shape,
                    [q, k, v],
                    key_bias,
                    drop,
                    scale,
                    Out(context),
                    keep.then_some(Out(kept)),
                )
            })
        })
    };
    Attended {
        context,
        probabilities,
    }
}

/// [`attention`]'s work, one task a (sample, head), into `out` and (when given) `kept`.
#[allow(clippy::too_many_arguments)]
fn attend_units(
    shape: Heads,
    [q, k, v]: [&[f32]; 3],
    key_bias: &[f32],
    drop: Option<Mask>,
    scale: f32,
    out: Out,
    kept: Option<Out>,
) {
    let (s, units) = (shape.seq, shape.batch * shape.heads);
    (0..units).into_par_iter().for_each_init(
        || (vec![0f32; s * s], vec![0f32; s * s]),
        |(scores, probs), unit| {
            let b = unit / shape.heads;
            // SAFETY: head `unit` of q and k is `s × dim`; `scores` is `s × s`.
            unsafe {
                product(
                    s,
                    s,
                    shape.dim,
                    scores.as_mut_ptr(),
                    s,
                    false,
                    shape.head(q, unit),
                    shape.head(k, unit).t(),
                    false,
                );
            }
            let bias = &key_bias[b * s..(b + 1) * s];
            for (x, y) in scores.chunks(s).zip(probs.chunks_mut(s)) {
                math::softmax_row(x, bias, scale, y);
            }
            let at = unit * s * s;
            if let Some(kept) = kept {
                // SAFETY: task `unit` alone writes elements `at .. at + s²` of the probabilities.
                unsafe { std::ptr::copy_nonoverlapping(probs.as_ptr(), kept.at(at), s * s) };
            }
            if let Some(d) = drop {
                d.apply(at, probs);
            }
            // SAFETY: task `unit` alone writes head `unit` of the context (`s × dim`, rows
            // `width` apart); `probs` is `s × s` and head `unit` of v is `s × dim`.
            unsafe {
                let dst = out.at(shape.offset(unit));
                product(
                    s,
                    shape.dim,
                    s,
                    dst,
                    shape.width(),
                    false,
                    View::rows(probs.as_ptr(), s),
                    shape.head(v, unit),
                    false,
                );
            }
        },
    );
}

/// ∂L/∂q, ∂L/∂k, ∂L/∂v of [`attention`], given ∂L/∂context and the forward's probabilities.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    shape: Heads,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    probabilities: &[f32],
    drop: Option<Mask>,
    grad: &[f32],
    scale: f32,
) -> [Vec<f32>; 3] {
    shape.check([q, k, v]);
    assert_eq!(
        probabilities.len(),
        shape.probabilities(),
        "attention_backward: probabilities"
    );
    assert_eq!(
        grad.len(),
        shape.elements(),
        "attention_backward: the context's gradient"
    );
    let (s, units) = (shape.seq, shape.batch * shape.heads);
    let mut grads = [0, 1, 2].map(|_| vec![0f32; shape.elements()]);
    if s == 0 || shape.dim == 0 {
        return grads;
    }
    let [dq, dk, dv] = grads.each_mut().map(|g| Out(g.as_mut_ptr()));
    (0..units).into_par_iter().for_each_init(
        || (vec![0f32; s * s], vec![0f32; s * s], vec![0f32; s * s]),
        |(a, da, mask), unit| {
            let at = unit * s * s;
            let p = &probabilities[at..at + s * s];
            // The head's block of the forward's mask, drawn again.
            let m = match drop {
                Some(d) => {
                    d.fill(at, mask);
                    Some(&mask[..])
                }
                None => None,
            };
            // a = p ⊙ drop: what multiplied v.
            match m {
                Some(m) => a.iter_mut().zip(p).zip(m).for_each(|((a, p), m)| *a = p * m),
                None => a.copy_from_slice(p),
            }
            let (off, w) = (shape.offset(unit), shape.width());
            let g = shape.head(grad, unit);
            // SAFETY: every head view is `s × dim` inside its projection; `a` and `da` are
            // `s × s`; task `unit` alone writes head `unit` of dq, dk and dv.
            unsafe {
                product(
                    s,
                    shape.dim,
                    s,
                    dv.at(off),
                    w,
                    false,
                    View::rows(a.as_ptr(), s).t(),
                    g,
                    false,
                );
                product(
                    s,
                    s,
                    shape.dim,
                    da.as_mut_ptr(),
                    s,
                    false,
                    g,
                    shape.head(v, unit).t(),
                    false,
                );
            }
            if let Some(m) = m {
                da.iter_mut().zip(m).for_each(|(d, m)| *d *= m);
            }
            // ∂L/∂scores, into `a` (no longer needed).
            math::softmax_backward_rows(p, da, a, s, scale);
            // SAFETY: as above.
            unsafe {
                product(
                    s,
                    shape.dim,
                    s,
                    dq.at(off),
                    w,
                    false,
                    View::rows(a.as_ptr(), s),
                    shape.head(k, unit),
                    false,
                );
                product(
                    s,
                    shape.dim,
                    s,
                    dk.at(off),
                    w,
                    false,
                    View::rows(a.as_ptr(), s).t(),
                    shape.head(q, unit),
                    false,
                );
            }
        },
    );
    grads
}
