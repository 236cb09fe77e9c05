//! Test support shared by Contrai's crates.
//!
//! Some tests read the project's shared material beside the repository (`../shared/data`,
//! `../shared/eval`). On a developer's machine without it they skip, saying so; in CI, which
//! sets `CONTRAI_REQUIRE_SHARED=1`, a missing file fails the test instead.

#![warn(missing_docs)]

use std::path::PathBuf;

pub mod browser;
#[cfg(feature = "conductor")]
pub mod engine;
mod proto;
pub mod tfevents;
pub mod wandb;

/// Inputs each fuzzing property tries: `CONTRAI_FUZZ_CASES`, else 64 (what CI runs; a long run
/// by hand sets more).
pub fn fuzz_cases() -> u32 {
    std::env::var("CONTRAI_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// The environment variable that turns a missing shared file into a failure.
pub const REQUIRE_SHARED: &str = "CONTRAI_REQUIRE_SHARED";

/// `../shared/<rel>` beside the repository when it exists. When it does not: `None` after saying
/// the test is skipped, or — with `CONTRAI_REQUIRE_SHARED` set — a panic naming the path.
pub fn shared(rel: &str) -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared")
        .join(rel);
    if path.exists() {
        return Some(path);
    }
    if required() {
        panic!(
            "../shared/{rel} is missing ({} does not exist) and {REQUIRE_SHARED} is set",
            path.display()
        );
    }
    eprintln!("skipped: ../shared/{rel} is absent");
    None
}

/// Whether `CONTRAI_REQUIRE_SHARED` is set (non-empty, not `0`): missing material fails, not skips.
fn required() -> bool {
    std::env::var_os(REQUIRE_SHARED).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Deterministic noise in [-1, 1] (xorshift), for synthetic training curves: the same seed, the
/// same curve on every machine.
pub struct Noise(pub u64);

impl Noise {
    /// The next value in [-1, 1].
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % 2_000_001) as f64 / 1_000_000.0 - 1.0
    }
}
