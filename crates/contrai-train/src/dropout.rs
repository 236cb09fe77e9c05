//! Dropout with a cheap, seeded mask.
//!
//! `burn_nn::Dropout` draws every mask element through ChaCha20 on one thread, ~35 % of a step
//! (`../shared/DESIGN.md` §5). Here a mask is a pure function of (seed, step, micro-batch, site)
//! ([`contrai_kernels::dropout::Mask`]): the same inputs give the same mask on any number of
//! threads, a kernel can draw its own part of it, and nothing needs saving for an exact resume.

use burn::tensor::{Device, Tensor, TensorData};
pub use contrai_kernels::dropout::{Mask, mix};

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

    /// The mask of `site`; `None` when nothing drops.
    pub fn mask(&self, site: u64) -> Option<Mask> {
        Mask::new(self.p, self.key, site)
    }

    /// Applies the mask of `site` to `x`.
    pub fn apply<const D: usize>(&self, x: Tensor<D>, site: u64, device: &Device) -> Tensor<D> {
        let Some(mask) = self.mask(site) else {
            return x;
        };
        let shape = x.dims();
        let n = shape.iter().product();
        x * Tensor::<D>::from_data(TensorData::new(mask.values(n), shape), device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_are_deterministic_and_drop_about_p() {
        let values = |d: Dropout, site| d.mask(site).unwrap().values(100_000);
        let d = Dropout::new(0.1, 42, 7, 0);
        let a = values(d, 3);
        assert_eq!(a, values(d, 3));
        assert_ne!(a, values(d, 4), "sites differ");
        assert_ne!(a, values(Dropout::new(0.1, 42, 8, 0), 3), "steps differ");
        let dropped = a.iter().filter(|v| **v == 0.0).count() as f64 / a.len() as f64;
        assert!((dropped - 0.1).abs() < 0.005, "{dropped}");
        assert!(a.iter().all(|v| *v == 0.0 || (*v - 1.0 / 0.9).abs() < 1e-6));
    }
}
