//! Dropout with a cheap, seeded mask.
//!
//! `burn_nn::Dropout` draws every mask element through ChaCha20 on one thread, ~35 % of a step
//! (`../shared/DESIGN.md` §5). Here a mask is a pure function of (seed, step, micro-batch, site):
//! SplitMix64 streams, one per 4,096-element chunk, filled in parallel. The same inputs give the
//! same mask on any number of threads, and nothing needs saving for an exact resume.

use burn::tensor::{Device, Tensor, TensorData};
use rayon::prelude::*;

const CHUNK: usize = 4096;

/// SplitMix64's finaliser: a strong 64-bit mix.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Where in training a mask is drawn: the same key gives the same masks.
#[derive(Debug, Clone, Copy)]
pub struct Dropout {
    /// Drop probability.
    pub p: f64,
    /// Run seed, step and micro-batch folded together.
    pub key: u64,
}

impl Dropout {
    /// Dropout for optimizer step `step` (0-based), micro-batch `micro`.
    pub fn new(p: f64, seed: u64, step: u64, micro: u64) -> Self {
        Dropout {
            p,
            key: mix(mix(mix(seed ^ 0xD80F) ^ step) ^ micro),
        }
    }

    /// The mask of `site` as host values: 0 (dropped) or 1 / (1 - p) (kept).
    pub fn mask_values(&self, site: u64, n: usize) -> Vec<f32> {
        let keep = 1.0 - self.p;
        let scale = (1.0 / keep) as f32;
        // 16-bit uniforms: the drop threshold is exact to 1 / 65,536.
        let threshold = (self.p * 65536.0).round() as u64;
        let base = mix(self.key ^ mix(site));
        let mut out = vec![0f32; n];
        out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, chunk)| {
            let mut state = mix(base ^ c as u64);
            let mut bits = 0u64;
            for (i, v) in chunk.iter_mut().enumerate() {
                if i % 4 == 0 {
                    state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                    bits = mix(state);
                }
                let u = (bits >> ((i % 4) * 16)) & 0xFFFF;
                *v = if u < threshold { 0.0 } else { scale };
            }
        });
        out
    }

    /// Applies the mask of `site` to `x`.
    pub fn apply<const D: usize>(&self, x: Tensor<D>, site: u64, device: &Device) -> Tensor<D> {
        if self.p <= 0.0 {
            return x;
        }
        let shape = x.dims();
        let n = shape.iter().product();
        let mask = Tensor::<D>::from_data(TensorData::new(self.mask_values(site, n), shape), device);
        x * mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_are_deterministic_and_drop_about_p() {
        let d = Dropout::new(0.1, 42, 7, 0);
        let a = d.mask_values(3, 100_000);
        assert_eq!(a, d.mask_values(3, 100_000));
        assert_ne!(a, d.mask_values(4, 100_000), "sites differ");
        assert_ne!(
            a,
            Dropout::new(0.1, 42, 8, 0).mask_values(3, 100_000),
            "steps differ"
        );
        let dropped = a.iter().filter(|v| **v == 0.0).count() as f64 / a.len() as f64;
        assert!((dropped - 0.1).abs() < 0.005, "{dropped}");
        assert!(a.iter().all(|v| *v == 0.0 || (*v - 1.0 / 0.9).abs() < 1e-6));
    }
}
