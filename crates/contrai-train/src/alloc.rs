//! Allocator settings for the training loop.
//!
//! glibc hands every buffer above its mmap threshold back to the kernel when freed, so each step
//! page-faults its activations in again (`../shared/DESIGN.md` §5, item 5: 295 → 259 ms a step).
//! These are the settings of `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:
//! glibc.malloc.trim_threshold=…:glibc.malloc.top_pad=268435456`, applied from inside the process.

use std::sync::Once;

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
