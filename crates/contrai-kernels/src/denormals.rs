//! Denormal floats flushed to zero on every thread that computes, as PyTorch's CPU kernels do.
//!
//! A subnormal operand or result costs an Intel core a microcode assist of about a hundred
//! cycles; the default run's real batches make them (BENCHMARKS.md, "Denormals") and ran 3.4×
//! slower for it on the Intel kind. Flush-to-zero (results) and denormals-are-zero (operands) are
//! per-thread bits of the x86 MXCSR register (FZ of aarch64's FPCR), so [`flush`] sets them on the
//! calling thread and on every thread of rayon's global pool, the only pool Burn's flex backend,
//! gemm and these kernels compute on — set where the pool's threads start when it does not exist
//! yet, broadcast to them when it does. No other thread computes tensors.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

/// Flush-to-zero (bit 15) and denormals-are-zero (bit 6) of MXCSR.
#[cfg(target_arch = "x86_64")]
const FTZ_DAZ: u32 = (1 << 15) | (1 << 6);
/// The sticky "denormal operand" (bit 1) and "underflow" (bit 4) flags of MXCSR.
#[cfg(target_arch = "x86_64")]
const DENORMAL_FLAGS: u32 = (1 << 1) | (1 << 4);

/// Whether [`keep`] asked for denormals in this process.
static KEPT: AtomicBool = AtomicBool::new(false);

/// Flushes denormals on the calling thread and on every thread of rayon's global pool (the pool
/// once a process; later calls set only the calling thread, which may be new) — or keeps them
/// there, after [`keep`].
pub fn flush() {
    static POOL: Once = Once::new();
    set_this_thread();
    POOL.call_once(|| {
        let built = rayon::ThreadPoolBuilder::new()
            .start_handler(|_| set_this_thread())
            .build_global();
        if built.is_err() {
            // The pool already runs: set the bits on each of its threads, which it never replaces.
            rayon::broadcast(|_| set_this_thread());
        }
    });
}

/// Keeps denormals for the rest of the process instead, on the calling thread, every pool thread
/// and every thread [`flush`] later sets (for measuring what they cost and where they arise;
/// nothing in Contrai trains this way).
pub fn keep() {
    KEPT.store(true, Ordering::Relaxed);
    flush();
    rayon::broadcast(|_| set_this_thread());
}

/// The process's choice ([`flush`] or [`keep`]) on the calling thread.
fn set_this_thread() {
    if KEPT.load(Ordering::Relaxed) {
        keep_this_thread();
    } else {
        flush_this_thread();
    }
}

/// Whether denormals are flushed on the calling thread.
pub fn flushed_here() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        mxcsr() & FTZ_DAZ == FTZ_DAZ
    }
    #[cfg(target_arch = "aarch64")]
    {
        fpcr() & FZ == FZ
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// Sets flush-to-zero and denormals-are-zero on the calling thread.
pub fn flush_this_thread() {
    #[cfg(target_arch = "x86_64")]
    set_mxcsr(mxcsr() | FTZ_DAZ);
    #[cfg(target_arch = "aarch64")]
    set_fpcr(fpcr() | FZ);
}

/// Clears flush-to-zero and denormals-are-zero on the calling thread.
pub fn keep_this_thread() {
    #[cfg(target_arch = "x86_64")]
    set_mxcsr(mxcsr() & !FTZ_DAZ);
    #[cfg(target_arch = "aarch64")]
    set_fpcr(fpcr() & !FZ);
}

/// Takes the calling thread's sticky x86 flags "a denormal was an operand" and "a result
/// underflowed" since the last call, clearing them (`(false, false)` on other CPUs): on a thread
/// that keeps denormals ([`keep_this_thread`]) they tell which computation made or read one.
pub fn take_flags() -> (bool, bool) {
    #[cfg(target_arch = "x86_64")]
    {
        let v = mxcsr();
        set_mxcsr(v & !DENORMAL_FLAGS);
        (v & (1 << 1) != 0, v & (1 << 4) != 0)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        (false, false)
    }
}

/// Whether the kernels count the subnormal values they read and write ([`probe`]).
static PROBING: AtomicBool = AtomicBool::new(false);
/// What the kernels counted, by site.
static TALLIES: Mutex<BTreeMap<&'static str, Tally>> = Mutex::new(BTreeMap::new());

/// The subnormal values one kernel site read and wrote while probing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Calls counted.
    pub calls: u64,
    /// Input values read, and how many of them were subnormal.
    pub inputs: (u64, u64),
    /// Output values written, and how many of them were subnormal.
    pub outputs: (u64, u64),
}

/// Starts counting subnormal values at every kernel site, with denormals kept ([`keep`]) so
/// that they exist to be counted; [`probed`] reads the counts.
pub fn probe() {
    keep();
    PROBING.store(true, Ordering::Relaxed);
}

/// Whether [`probe`] was called.
pub fn probing() -> bool {
    PROBING.load(Ordering::Relaxed)
}

/// The counts since [`probe`] by kernel site (`"linear.backward"`, …), clearing them.
pub fn probed() -> Vec<(&'static str, Tally)> {
    let mut t = TALLIES.lock().unwrap_or_else(|p| p.into_inner());
    std::mem::take(&mut *t).into_iter().collect()
}

/// Counts the subnormal values among a kernel's inputs and its outputs under `site`, when
/// probing (one relaxed load otherwise).
pub fn tally(site: &'static str, inputs: &[&[f32]], outputs: &[&[f32]]) {
    if !probing() {
        return;
    }
    let count = |xs: &[&[f32]]| {
        xs.iter().fold((0, 0), |(n, d), x| {
            (
                n + x.len() as u64,
                d + x.iter().filter(|v| v.is_subnormal()).count() as u64,
            )
        })
    };
    let (i, o) = (count(inputs), count(outputs));
    let mut t = TALLIES.lock().unwrap_or_else(|p| p.into_inner());
    let e = t.entry(site).or_default();
    e.calls += 1;
    e.inputs = (e.inputs.0 + i.0, e.inputs.1 + i.1);
    e.outputs = (e.outputs.0 + o.0, e.outputs.1 + o.1);
}

#[cfg(target_arch = "x86_64")]
fn mxcsr() -> u32 {
    let mut v: u32 = 0;
    // SAFETY: stmxcsr stores the 32-bit control/status register into the local it points to.
    unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut v, options(nostack, preserves_flags)) };
    v
}

#[cfg(target_arch = "x86_64")]
fn set_mxcsr(v: u32) {
    // SAFETY: ldmxcsr loads a value read from the register with only the rounding-independent
    // FTZ/DAZ bits and sticky flags changed; no exception mask is unmasked, so it cannot fault.
    unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &v, options(nostack, preserves_flags)) };
}

/// Flush-to-zero of aarch64's FPCR (inputs and outputs alike).
#[cfg(target_arch = "aarch64")]
const FZ: u64 = 1 << 24;

#[cfg(target_arch = "aarch64")]
fn fpcr() -> u64 {
    let v: u64;
    // SAFETY: reading FPCR has no side effect.
    unsafe { std::arch::asm!("mrs {}, fpcr", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

#[cfg(target_arch = "aarch64")]
fn set_fpcr(v: u64) {
    // SAFETY: only the FZ bit differs from the value read; no trap is enabled.
    unsafe { std::arch::asm!("msr fpcr, {}", in(reg) v, options(nomem, nostack, preserves_flags)) };
}
