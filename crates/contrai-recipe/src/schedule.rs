//! Learning-rate schedules: linear warmup, then cosine, linear or no decay to a floor.

use serde::{Deserialize, Serialize};

/// How the learning rate falls after warmup.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::VariantNames,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Decay {
    /// Half a cosine from the peak to the floor.
    Cosine,
    /// A straight line from the peak to the floor.
    Linear,
    /// The peak throughout.
    Constant,
}

/// One phase's schedule over `steps` optimizer steps, numbered from 0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Learning rate at the end of warmup.
    pub peak: f64,
    /// Floor reached on the last step (ignored by `Constant`).
    pub floor: f64,
    /// Warmup steps (linear from `peak / warmup` up to `peak`); 0 starts at the peak.
    pub warmup: u64,
    /// Steps in the phase.
    pub steps: u64,
    /// Decay after warmup.
    pub decay: Decay,
}

impl Schedule {
    /// The learning rate at `step` (steps past the end stay at the last value).
    pub fn lr(&self, step: u64) -> f64 {
        if self.steps == 0 {
            return self.peak;
        }
        let step = step.min(self.steps - 1);
        if step < self.warmup {
            return self.peak * (step + 1) as f64 / self.warmup as f64;
        }
        let span = self.steps.saturating_sub(self.warmup + 1);
        let p = if span == 0 {
            1.0
        } else {
            (step - self.warmup) as f64 / span as f64
        };
        match self.decay {
            Decay::Constant => self.peak,
            Decay::Linear => self.peak + (self.floor - self.peak) * p,
            Decay::Cosine => {
                self.floor + (self.peak - self.floor) * 0.5 * (1.0 + (std::f64::consts::PI * p).cos())
            }
        }
    }

    /// The schedule's warmup as a fraction of its steps.
    pub fn warmup_fraction(&self) -> f64 {
        if self.steps == 0 {
            0.0
        } else {
            self.warmup as f64 / self.steps as f64
        }
    }
}

/// Warmup steps for a fraction of `steps`, at least one when the fraction is positive.
pub fn warmup_steps(steps: u64, fraction: f64) -> u64 {
    if fraction <= 0.0 {
        0
    } else {
        ((steps as f64 * fraction).round() as u64).clamp(1, steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine() -> Schedule {
        Schedule {
            peak: 1e-3,
            floor: 1e-5,
            warmup: 30,
            steps: 1000,
            decay: Decay::Cosine,
        }
    }

    #[test]
    fn warmup_rises_linearly_to_the_peak() {
        let s = cosine();
        assert!((s.lr(0) - 1e-3 / 30.0).abs() < 1e-12);
        assert!((s.lr(14) - 1e-3 * 15.0 / 30.0).abs() < 1e-12);
        assert!((s.lr(29) - 1e-3).abs() < 1e-12, "warmup ends at the peak");
        assert!((s.lr(30) - 1e-3).abs() < 1e-12, "decay starts at the peak");
    }

    #[test]
    fn cosine_is_halfway_mid_decay_and_at_the_floor_last() {
        let s = cosine();
        let mid = 30 + (1000 - 31) / 2;
        let half = 1e-5 + (1e-3 - 1e-5) * 0.5 * (1.0 + (std::f64::consts::PI * 484.0 / 969.0).cos());
        assert!((s.lr(mid) - half).abs() < 1e-12);
        assert!((s.lr(mid) - (1e-3 + 1e-5) / 2.0).abs() < 2e-6);
        assert!((s.lr(999) - 1e-5).abs() < 1e-15, "last step at the floor");
        assert!((s.lr(5000) - 1e-5).abs() < 1e-15);
    }

    #[test]
    fn linear_and_constant_decays() {
        let lin = Schedule {
            decay: Decay::Linear,
            warmup: 0,
            steps: 11,
            peak: 1.0,
            floor: 0.0,
        };
        assert_eq!(lin.lr(0), 1.0);
        assert!((lin.lr(5) - 0.5).abs() < 1e-12);
        assert_eq!(lin.lr(10), 0.0);
        let c = Schedule {
            decay: Decay::Constant,
            ..lin
        };
        assert_eq!(c.lr(10), 1.0);
    }

    #[test]
    fn warmup_steps_round_and_clamp() {
        assert_eq!(warmup_steps(2000, 0.03), 60);
        assert_eq!(warmup_steps(10, 0.01), 1);
        assert_eq!(warmup_steps(10, 0.0), 0);
    }
}
