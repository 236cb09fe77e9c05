//! Denormals flushed on the calling thread and every pool thread (its own test binary: flushing
//! changes rayon's global pool for the whole process).
#![cfg(target_arch = "x86_64")]

use contrai_kernels::denormals::{flush, flush_this_thread, flushed_here, keep_this_thread, take_flags};
use rayon::prelude::*;

/// The smallest normal f32 times 0.3: a subnormal, rounded (an exact one raises no underflow).
fn tiny() -> f32 {
    std::hint::black_box(f32::MIN_POSITIVE) * 0.3
}

#[test]
fn every_pool_thread_flushes_after_flush() {
    flush();
    assert!(flushed_here());
    let threads = rayon::current_num_threads();
    let flushed: Vec<bool> = (0..threads * 64)
        .into_par_iter()
        .map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            flushed_here()
        })
        .collect();
    assert!(
        flushed.iter().all(|&f| f),
        "a pool thread computes with denormals"
    );
    // A flushed thread turns a subnormal result into zero and reads a subnormal operand as zero.
    assert_eq!(tiny(), 0.0);
    assert_eq!(std::hint::black_box(f32::from_bits(1)) * 2.0, 0.0);
}

#[test]
fn a_thread_that_keeps_denormals_computes_them_and_raises_the_flags() {
    std::thread::spawn(|| {
        keep_this_thread();
        assert!(!flushed_here());
        let _ = take_flags();
        let t = tiny();
        assert!(t > 0.0 && !t.is_normal());
        assert!(take_flags().1, "an underflowing result");
        std::hint::black_box(std::hint::black_box(t) * 3.0);
        assert!(take_flags().0, "a denormal operand");
        flush_this_thread();
        assert_eq!(tiny(), 0.0);
    })
    .join()
    .unwrap();
}
