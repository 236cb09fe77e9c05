//! Process settings every computing entry point applies (training, calibration, evaluation,
//! predict, compress): freed memory kept for reuse, denormals flushed on every computing thread.
//!
//! glibc hands every buffer above its mmap threshold back to the kernel when freed, so each step
//! page-faults its activations in again (`../shared/DESIGN.md` §5, item 5: 295 → 259 ms a step).
//! These are the settings of `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:
//! glibc.malloc.trim_threshold=…:glibc.malloc.top_pad=268435456`, applied from inside the process.

use std::sync::Once;

/// Applies both settings (once a process; denormals flushed on the calling thread each time).
/// `CONTRAI_DENORMALS=keep` computes with denormals instead, to measure what flushing saves
/// (BENCHMARKS.md, "Denormals"); results then differ from a normal run's in the last bits.
pub fn setup() {
    keep_freed_memory();
    if std::env::var_os("CONTRAI_DENORMALS").is_some_and(|v| v == "keep") {
        contrai_kernels::denormals::keep();
    } else {
        contrai_kernels::denormals::flush();
    }
}

/// Keeps freed large buffers in the heap for reuse (glibc only; a no-op elsewhere).
pub fn keep_freed_memory() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: mallopt only changes allocator tuning parameters; it is called once, before
        // the training loop allocates, and glibc serialises it against other allocations.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
            libc::mallopt(libc::M_TOP_PAD, 256 << 20);
        }
    });
}
