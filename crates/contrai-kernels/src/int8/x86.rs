//! The int8 kernels for x86-64 (AVX-512 VNNI, AVX-VNNI, AVX2) and the choice among them.

use std::arch::x86_64::*;

use super::{GROUP, Int8Weights, LANES, MaybeUninit, PANEL, SHIFT};

/// The x86 kernels, best first; [`Kernel::best`] picks the first this CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kernel {
    /// `vpdpbusd` on 512-bit registers (AVX-512 VNNI): 32 outputs and eight rows a pass.
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

/// Bytes from one group of a panel's weights to the next.
const STRIDE: usize = PANEL * LANES * GROUP;

/// [`super::rows`] with AVX-512 VNNI: for 32 outputs (a panel: two 512-bit weight registers)
/// and eight rows at a time, each group of four input bytes broadcast and added into two
/// accumulators (`vpdpbusd`, 64 products an instruction).
#[target_feature(enable = "avx512vnni,avx512vl,avx512f,avx2,fma")]
unsafe fn rows_avx512vnni(
    q: &[u8],
    scales: &[f32],
    w: &Int8Weights,
    bias: &[f32],
    y: &mut [MaybeUninit<f32>],
) {
    // SAFETY: each broadcast reads four bytes of a group inside a row, each weight load 64 bytes
    // of the panel's group `g` (`passes`' pointers).
    unsafe {
        passes::<8, 4>(q, scales, w, bias, y, |rp, wp| {
            let mut acc = [[_mm512_setzero_si512(); 2]; 8];
            for g in 0..w.groups {
                let b0 = _mm512_loadu_si512(wp.add(g * STRIDE).cast());
                let b1 = _mm512_loadu_si512(wp.add(g * STRIDE + 64).cast());
                for (acc, p) in acc.iter_mut().zip(rp) {
                    let x = _mm512_set1_epi32(p.add(g * GROUP).cast::<i32>().read_unaligned());
                    acc[0] = _mm512_dpbusd_epi32(acc[0], x, b0);
                    acc[1] = _mm512_dpbusd_epi32(acc[1], x, b1);
                }
            }
            acc.map(|[a, b]| {
                [
                    _mm512_castsi512_si256(a),
                    _mm512_extracti64x4_epi64::<1>(a),
                    _mm512_castsi512_si256(b),
                    _mm512_extracti64x4_epi64::<1>(b),
                ]
            })
        })
    }
}

/// [`super::rows`] with AVX-VNNI (VEX-encoded `vpdpbusd`, on CPUs without AVX-512): for sixteen
/// outputs and four rows at a time (the accumulators 16 registers hold), each group of four input
/// bytes broadcast and added into two accumulators.
#[target_feature(enable = "avxvnni,avx2,fma")]
unsafe fn rows_avxvnni(q: &[u8], scales: &[f32], w: &Int8Weights, bias: &[f32], y: &mut [MaybeUninit<f32>]) {
    // SAFETY: each broadcast reads four bytes of a group inside a row, each weight load 32 bytes
    // of the blocks' group `g` (`passes`' pointers).
    unsafe {
        passes::<4, 2>(q, scales, w, bias, y, |rp, wp| {
            let mut acc = [[_mm256_setzero_si256(); 2]; 4];
            for g in 0..w.groups {
                let b0 = _mm256_loadu_si256(wp.add(g * STRIDE).cast());
                let b1 = _mm256_loadu_si256(wp.add(g * STRIDE + 32).cast());
                for (acc, p) in acc.iter_mut().zip(rp) {
                    let x = _mm256_set1_epi32(p.add(g * GROUP).cast::<i32>().read_unaligned());
                    acc[0] = _mm256_dpbusd_avx_epi32(acc[0], x, b0);
                    acc[1] = _mm256_dpbusd_avx_epi32(acc[1], x, b1);
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
    // `g + 1` is a group), each weight load 32 bytes of the blocks' group `g` or `g + 1`.
    unsafe {
        passes::<4, 2>(q, scales, w, bias, y, |rp, wp| {
            let mut acc = [[_mm256_setzero_si256(); 2]; 4];
            for g in (0..w.groups).step_by(2) {
                let (a, c) = (wp.add(g * STRIDE), wp.add((g + 1) * STRIDE));
                let b0 = _mm256_loadu_si256(a.cast());
                let b1 = _mm256_loadu_si256(a.add(32).cast());
                let c0 = _mm256_loadu_si256(c.cast());
                let c1 = _mm256_loadu_si256(c.add(32).cast());
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

/// The kernels' outer loops: for each `W` packed output blocks (`W · 8` outputs, inside one
/// panel) and each `R` rows, `sums` adds up the rows' products with the blocks' weights (given
/// each row's first byte and the first block's first byte; a short pass repeats its last row),
/// which are then dequantized and stored.
#[inline(always)]
unsafe fn passes<const R: usize, const W: usize>(
    q: &[u8],
    scales: &[f32],
    w: &Int8Weights,
    bias: &[f32],
    y: &mut [MaybeUninit<f32>],
    sums: impl Fn([*const u8; R], *const i8) -> [[__m256i; W]; R],
) {
    const { assert!(PANEL.is_multiple_of(W)) };
    let kp = w.groups * GROUP;
    let m = scales.len();
    // SAFETY: row pointers stay below `m` rows of `kp` bytes of `q`; blocks come in whole
    // panels, so blocks `b…b + W` are inside the packing when `b` is.
    unsafe {
        let qp = q.as_ptr();
        let mut b = 0;
        while b < w.blocks {
            let wp = w
                .packed
                .as_ptr()
                .add((b / PANEL) * w.groups * STRIDE + (b % PANEL) * LANES * GROUP);
            let mut r = 0;
            while r < m {
                let rows = R.min(m - r);
                let rp: [*const u8; R] = std::array::from_fn(|i| qp.add((r + i.min(rows - 1)) * kp));
                store(&sums(rp, wp)[..rows], r, b, scales, w, bias, y);
                r += rows;
            }
            b += W;
        }
    }
}

/// Rows `r…` of blocks `b…` from their exact sums `acc`: the inputs' shift taken out
/// with the weight sums, scaled by the row's and the output's scale, the bias added; a block
/// running past the outputs written through a bounds-checked temporary.
#[inline(always)]
unsafe fn store<const W: usize>(
    acc: &[[__m256i; W]],
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
        for h in 0..W {
            let j0 = (b + h) * LANES;
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
