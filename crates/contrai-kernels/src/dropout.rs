//! Seeded dropout masks that any part can draw alone.
//!
//! A mask is a pure function of a key (seed, step, micro-batch and site folded together): 16-bit
//! uniforms from SplitMix64 streams, one stream per 4,096-element chunk, four uniforms a draw.
//! Any element's value is computable without the others, so a kernel draws the part of the mask
//! it needs where it needs it — attention draws each head's `seq × seq` block inside its task, in
//! cache, instead of reading a mask of the whole `[batch, heads, seq, seq]` from memory — and the
//! whole mask is the same values on any number of threads. Nothing needs saving for an exact
//! resume.

use multiversion::multiversion;
use rayon::prelude::*;

/// Elements a stream covers.
const CHUNK: usize = 4096;
/// Uniforms a draw gives (16 bits each of 64).
const PER_DRAW: usize = 4;
/// SplitMix64's increment (the golden ratio in 64 bits).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's finaliser: a strong 64-bit mix.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One site's mask: each element 0 (dropped, with probability `p`) or `1 / (1 − p)` (kept).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mask {
    /// The site's stream key.
    base: u64,
    /// Uniforms below it drop (16-bit: `p` exact to 1 / 65,536).
    threshold: u64,
    /// What a kept element is multiplied by.
    scale: f32,
}

impl Mask {
    /// The mask of `site` under `key` with drop probability `p`; `None` when nothing drops.
    pub fn new(p: f64, key: u64, site: u64) -> Option<Mask> {
        (p > 0.0).then(|| Mask {
            base: mix(key ^ mix(site)),
            threshold: (p * 65536.0).round() as u64,
            scale: (1.0 / (1.0 - p)) as f32,
        })
    }

    /// Calls `f(i, value)` for elements `start .. start + n` of the mask, `i` counted from 0.
    #[inline]
    fn each(&self, start: usize, n: usize, mut f: impl FnMut(usize, f32)) {
        let (mut e, end) = (start, start + n);
        while e < end {
            let (chunk, at) = (e / CHUNK, e % CHUNK);
            let stream = mix(self.base ^ chunk as u64);
            let (mut draw, mut lane) = (at / PER_DRAW, at % PER_DRAW);
            let stop = end.min((chunk + 1) * CHUNK);
            while e < stop {
                let bits = mix(stream.wrapping_add((draw as u64 + 1).wrapping_mul(GAMMA)));
                while lane < PER_DRAW && e < stop {
                    let u = (bits >> (lane * 16)) & 0xFFFF;
                    f(e - start, if u < self.threshold { 0.0 } else { self.scale });
                    (lane, e) = (lane + 1, e + 1);
                }
                (draw, lane) = (draw + 1, 0);
            }
        }
    }

    /// Elements `start .. start + out.len()` of the mask, into `out`: the whole draws inside a
    /// stream in one vectorised loop ([`whole_draws`]), the ends through [`Mask::each`].
    pub fn fill(&self, start: usize, out: &mut [f32]) {
        let (mut e, end) = (start, start + out.len());
        while e < end {
            let stop = end.min((e / CHUNK + 1) * CHUNK);
            // The whole draws of `e..stop`.
            let first = e.next_multiple_of(PER_DRAW).min(stop);
            let last = first + (stop - first) / PER_DRAW * PER_DRAW;
            self.each(e, first - e, |i, v| out[e - start + i] = v);
            let stream = mix(self.base ^ (e / CHUNK) as u64);
            let draw = (first % CHUNK) / PER_DRAW;
            whole_draws(
                stream,
                draw,
                self.threshold,
                self.scale,
                &mut out[first - start..last - start],
            );
            self.each(last, stop - last, |i, v| out[last - start + i] = v);
            e = stop;
        }
    }

    /// `x` times elements `start .. start + x.len()` of the mask.
    pub fn apply(&self, start: usize, x: &mut [f32]) {
        const PIECE: usize = 1024;
        let mut mask = [0f32; PIECE];
        for (k, x) in x.chunks_mut(PIECE).enumerate() {
            let mask = &mut mask[..x.len()];
            self.fill(start + k * PIECE, mask);
            x.iter_mut().zip(mask.iter()).for_each(|(x, m)| *x *= m);
        }
    }

    /// The first `n` elements, drawn in parallel.
    pub fn values(&self, n: usize) -> Vec<f32> {
        let mut out = vec![0f32; n];
        out.par_chunks_mut(CHUNK)
            .enumerate()
            .for_each(|(c, chunk)| self.fill(c * CHUNK, chunk));
        out
    }
}

/// The mask's values for whole draws `draw, draw + 1, …` of `stream` into `out` (four a draw):
/// what [`Mask::each`] computes, in a loop the compiler vectorises (64-bit multiplies in AVX-512).
#[multiversion(targets("x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma", "x86_64+avx2+fma"))]
fn whole_draws(stream: u64, draw: usize, threshold: u64, scale: f32, out: &mut [f32]) {
    for (d, out) in out.chunks_exact_mut(PER_DRAW).enumerate() {
        let bits = mix(stream.wrapping_add(((draw + d) as u64 + 1).wrapping_mul(GAMMA)));
        for (lane, out) in out.iter_mut().enumerate() {
            let u = (bits >> (lane * 16)) & 0xFFFF;
            *out = if u < threshold { 0.0 } else { scale };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_part_of_a_mask_is_the_same_values_as_the_whole() {
        let m = Mask::new(0.1, 42, 3).unwrap();
        let n = 3 * CHUNK + 777;
        let whole = m.values(n);
        // Parts that start and end inside a draw, inside a chunk, and across chunks.
        for (start, len) in [
            (0, 1),
            (1, 6),
            (4093, 9),
            (CHUNK - 2, CHUNK + 5),
            (5000, 777),
            (n - 3, 3),
        ] {
            let mut part = vec![0f32; len];
            m.fill(start, &mut part);
            assert_eq!(part, whole[start..start + len], "{start} + {len}");
            let mut x = vec![2.0f32; len];
            m.apply(start, &mut x);
            let want: Vec<f32> = whole[start..start + len].iter().map(|v| v * 2.0).collect();
            assert_eq!(x, want);
        }
        let dropped = whole.iter().filter(|v| **v == 0.0).count() as f64 / n as f64;
        assert!((dropped - 0.1).abs() < 0.01, "{dropped}");
        assert!(whole.iter().all(|v| *v == 0.0 || (*v - 1.0 / 0.9).abs() < 1e-6));
        assert_ne!(whole, Mask::new(0.1, 42, 4).unwrap().values(n), "sites differ");
        assert_eq!(Mask::new(0.0, 42, 3), None);
    }
}
