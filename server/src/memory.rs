//! How the process hands memory back to the system. A request may hold
//! tens of megabytes for a moment (a long text's tokens and pieces, an
//! answer's log probabilities); glibc's allocator would keep what such a
//! request freed, raising its threshold for giving large blocks their own
//! mapping to the largest it has seen. The threshold is fixed instead, so
//! that a large block is always mapped on its own and unmapped when freed,
//! and free memory at the top of the heap beyond a megabyte is trimmed.
//!
//! The one place of the crate besides the runtime's bindings with
//! `unsafe`: two calls into the C library, with integer arguments.

/// Sets the allocator's thresholds (glibc; elsewhere nothing to set).
pub fn settle() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    glibc::settle();
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod glibc {
    use std::ffi::c_int;

    /// Blocks from this size up get a mapping of their own.
    const MMAP_THRESHOLD: c_int = 256 << 10;

    /// Free memory at the top of the heap beyond this is given back.
    const TRIM_THRESHOLD: c_int = 1 << 20;

    /// `M_TRIM_THRESHOLD` and `M_MMAP_THRESHOLD` in glibc's `malloc.h`.
    const M_TRIM_THRESHOLD: c_int = -1;
    const M_MMAP_THRESHOLD: c_int = -3;

    unsafe extern "C" {
        fn mallopt(param: c_int, value: c_int) -> c_int;
    }

    pub fn settle() {
        // SAFETY: mallopt takes two integers and only changes the
        // allocator's parameters; it is called before any other thread
        // exists.
        unsafe {
            mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD);
        }
    }
}
