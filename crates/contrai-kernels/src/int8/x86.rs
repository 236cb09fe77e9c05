//! The int8 kernels for x86-64 (AVX-512 VNNI, AVX-VNNI, AVX2) and the choice among them.

use std::arch::x86_64::*;

use super::{GROUP, Int8Weights, LANES, MaybeUninit, SHIFT};

/// The x86 kernels, best first; [`Kernel::best`] picks the first this CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kernel {
    /// `vpdpbusd` on 256-bit registers, EVEX-encoded (AVX-512 VNNI with VL): 32 registers,
    /// eight rows a pass.
    Avx512Vnni,
    /// `vpdpbusd` VEX-encoded (AVX-VNNI, on CPUs without AVX-512): 16 registers, four rows.
    AvxVnni,
    /// `vpmaddubsw` + `vpmaddwd`, two groups summed in 16 bits.
    Avx2,
}

impl Kernel {
    /// Every kernel, best first.
    pub(super) const ALL: [Kernel; 3] = [Kernel::Avx512Vnni, Kernel::AvxVnni, Kernel::Avx2];

    /// Whether this CPU has the kernel's instructions.
    pub(super) fn runs_here(self) -> bool {
        match self {
            Kernel::Avx512Vnni => {
                is_x86_feature_detected!("avx512vnni")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("fma")
            }
            Kernel::AvxVnni => is_x86_feature_detected!("avxvnni") && is_x86_feature_detected!("fma"),
            Kernel::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
        }
    }

    /// The name [`super::kernel`] gives it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kernel::Avx512Vnni => "avx512vnni",
            Kernel::AvxVnni => "avxvnni",
            Kernel::Avx2 => "avx2",
        }
    }

    /// The kernel this process runs, if any (chosen once): the one [`super::KERNEL_VAR`]
    /// names when this CPU runs it (none for `portable`), else the best this CPU runs.
    pub(super) fn best() -> Option<Kernel> {
        static BEST: std::sync::OnceLock<Option<Kernel>> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            let here = || Kernel::ALL.into_iter().find(|k| k.runs_here());
            match std::env::var(super::KERNEL_VAR).ok().as_deref() {
                Some("portable") => None,
                Some(name) => Kernel::ALL
                    .into_iter()
                    .find(|k| k.name() == name && k.runs_here())
                    .or_else(here),
                None => here(),
            }
        })
    }

    /// [`super::rows`] with this kernel.
    ///
    /// # Safety
    /// The CPU runs the kernel ([`Kernel::runs_here`]); `q` holds whole padded rows, one per
    /// entry of `scales` and row of `y`.
    pub(super) unsafe fn rows(
        self,
        q: &[u8],
        scales: &[f32],
        w: &Int8Weights,
        bias: &[f32],
        y: &mut [MaybeUninit<f32>],
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            match self {
                Kernel::Avx512Vnni => rows_avx512vnni(q, scales, w, bias, y),
                Kernel::AvxVnni => rows_avxvnni(q, scales, w, bias, y),
                Kernel::Avx2 => rows_avx2(q, scales, w, bias, y),
            }
        }
    }
}

/// How a kernel adds one group of four input bytes (broadcast in `x`) times a packed weight
/// register into 32-bit sums, for sixteen outputs (two weight registers) at once.
trait Dot {
    /// `acc += x · w` lane by lane, four byte products a lane.
    unsafe fn dot(acc: __m256i, x: __m256i, w: __m256i) -> __m256i;
}

struct Evex;
impl Dot for Evex {
    #[inline(always)]
    unsafe fn dot(acc: __m256i, x: __m256i, w: __m256i) -> __m256i {
        // SAFETY: called only from `rows_avx512vnni`, compiled for AVX-512 VNNI and VL.
        unsafe { _mm256_dpbusd_epi32(acc, x, w) }
    }
}

struct Vex;
impl Dot for Vex {
    #[inline(always)]
    unsafe fn dot(acc: __m256i, x: __m256i, w: __m256i) -> __m256i {
        // SAFETY: called only from `rows_avxvnni`, compiled for AVX-VNNI.
        unsafe { _mm256_dpbusd_avx_epi32(acc, x, w) }
    }
}

/// The VNNI kernel compiled for AVX-512 VNNI (the target features are what differs).
#[target_feature(enable = "avx512vnni,avx512vl,avx512f,avx2,fma")]
unsafe fn rows_avx512vnni(
    q: &[u8],
    scales: &[f32],
    w: &Int8Weights,
    bias: &[f32],
    y: &mut [MaybeUninit<f32>],
) {
    // SAFETY: forwarded from `Kernel::rows`.
    unsafe { rows_dpbusd::<Evex, 8>(q, scales, w, bias, y) }
}

/// The VNNI kernel compiled for AVX-VNNI.
#[target_feature(enable = "avxvnni,avx2,fma")]
unsafe fn rows_avxvnni(q: &[u8], scales: &[f32], w: &Int8Weights, bias: &[f32], y: &mut [MaybeUninit<f32>]) {
    // SAFETY: forwarded from `Kernel::rows`.
    unsafe { rows_dpbusd::<Vex, 4>(q, scales, w, bias, y) }
}

/// The VNNI kernels: for sixteen outputs and `R` rows at a time (as many as the vector
/// registers hold accumulators for), each group of four input bytes broadcast and added into
/// two accumulators by `D::dot`.
#[inline(always)]
unsafe fn rows_dpbusd<D: Dot, const R: usize>(
    q: &[u8],
    scales: &[f32],
    w: &Int8Weights,
    bias: &[f32],
    y: &mut [MaybeUninit<f32>],
) {
    // SAFETY: each broadcast reads four bytes of a group inside a row, each weight load 32
    // bytes of group `g` inside its block (`passes`' pointers).
    unsafe {
        passes::<R>(q, scales, w, bias, y, |rp, w0, w1| {
            let mut acc = [[_mm256_setzero_si256(); 2]; R];
            for g in 0..w.groups {
                let b0 = _mm256_loadu_si256(w0.add(g * 32).cast());
                let b1 = _mm256_loadu_si256(w1.add(g * 32).cast());
                for i in 0..R {
                    let x = _mm256_set1_epi32(rp[i].add(g * GROUP).cast::<i32>().read_unaligned());
                    acc[i][0] = D::dot(acc[i][0], x, b0);
                    acc[i][1] = D::dot(acc[i][1], x, b1);
                }
            }
            acc
        })
    }
}

/// [`super::rows`] with AVX2: for sixteen outputs and four rows at a time, each group of four
/// input bytes broadcast and multiplied with two packed weight registers (`vpmaddubsw`), two
/// groups' 16-bit results added, widened into 32-bit lanes (`vpmaddwd` by ones).
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_avx2(q: &[u8], scales: &[f32], w: &Int8Weights, bias: &[f32], y: &mut [MaybeUninit<f32>]) {
    let ones = _mm256_set1_epi16(1);
    // SAFETY: each broadcast reads four bytes of a group inside a row (`groups` is even, so
    // `g + 1` is a group), each weight load 32 bytes of group `g` or `g + 1` inside its block.
    unsafe {
        passes::<4>(q, scales, w, bias, y, |rp, w0, w1| {
            let mut acc = [[_mm256_setzero_si256(); 2]; 4];
            for g in (0..w.groups).step_by(2) {
                let (a0, a1) = (w0.add(g * 32), w1.add(g * 32));
                let b0 = _mm256_loadu_si256(a0.cast());
                let b1 = _mm256_loadu_si256(a1.cast());
                let c0 = _mm256_loadu_si256(a0.add(32).cast());
                let c1 = _mm256_loadu_si256(a1.add(32).cast());
                for (acc, p) in acc.iter_mut().zip(rp) {
                    let p = p.add(g * GROUP);
                    let x = _mm256_set1_epi32(p.cast::<i32>().read_unaligned());
                    let z = _mm256_set1_epi32(p.add(GROUP).cast::<i32>().read_unaligned());
                    // Each 16-bit lane: four products of at most 127 · 63, exact.
                    let s0 = _mm256_add_epi16(_mm256_maddubs_epi16(x, b0), _mm256_maddubs_epi16(z, c0));
                    let s1 = _mm256_add_epi16(_mm256_maddubs_epi16(x, b1), _mm256_maddubs_epi16(z, c1));
                    acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(s0, ones));
                    acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(s1, ones));
                }
            }
            acc
        })
    }
}

/// The kernels' outer loops: for each pair of packed output blocks (sixteen outputs) and each
/// `R` rows, `sums` adds up the rows' products with the two blocks' weights (given each row's
/// and each block's first byte; a short pass repeats its last row), which are then
/// dequantized and stored.
#[inline(always)]
unsafe fn passes<const R: usize>(
    q: &[u8],
    scales: &[f32],
    w: &Int8Weights,
    bias: &[f32],
    y: &mut [MaybeUninit<f32>],
    sums: impl Fn([*const u8; R], *const i8, *const i8) -> [[__m256i; 2]; R],
) {
    let kp = w.groups * GROUP;
    let m = scales.len();
    let block = w.groups * LANES * GROUP;
    // SAFETY: row pointers stay below `m` rows of `kp` bytes of `q`; blocks come in pairs, so
    // block `b + 1` is inside the packing when `b` is.
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
                store(&sums(rp, w0, w1)[..rows], r, b, scales, w, bias, y);
                r += rows;
            }
            b += 2;
        }
    }
}

/// Rows `r…` of blocks `b` and `b + 1` from their exact sums `acc`: the inputs' shift taken out
/// with the weight sums, scaled by the row's and the output's scale, the bias added; a block
/// running past the outputs written through a bounds-checked temporary.
#[inline(always)]
unsafe fn store(
    acc: &[[__m256i; 2]],
    r: usize,
    b: usize,
    scales: &[f32],
    w: &Int8Weights,
    bias: &[f32],
    y: &mut [MaybeUninit<f32>],
) {
    let n = w.n;
    // SAFETY: the callers are compiled for AVX2 and FMA; rows `r..r + acc.len()` are rows of
    // `y`, and the output scales are padded to whole blocks.
    unsafe {
        let shift = _mm256_set1_epi32(SHIFT);
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
            let ws = _mm256_loadu_ps(w.scales.as_ptr().add(j0));
            for (i, acc) in acc.iter().enumerate() {
                let exact = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[h], corr));
                let s = _mm256_mul_ps(_mm256_set1_ps(scales[r + i]), ws);
                let v = _mm256_fmadd_ps(exact, s, bv);
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
    }
}
