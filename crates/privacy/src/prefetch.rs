//! The crate's one `unsafe` spot: a cache prefetch hint.
//!
//! Why: on traces with many addresses the IPv4 address map (a few MiB)
//! misses the CPU caches on almost every lookup, and those misses were most
//! of the rewrite's time (issue 30). Told of a packet a few packets ahead
//! ([`crate::PrivacyTransform::prepare_ethernet`]), the rewrite starts loading its
//! map buckets early, so the misses overlap the work on the packets in
//! between instead of stalling it. A plain load would not do: it holds the
//! core's retirement until it completes.

#![allow(unsafe_code)]

/// Asks the CPU to bring the cache line holding `r` into its caches. A hint
/// only: no effect on what the program computes.
#[inline(always)]
pub(crate) fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 reads no memory the program observes, cannot fault
    // (not even on a bad address), and `r` is a live reference anyway. SSE
    // is part of the x86_64 baseline.
    unsafe {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((r as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}
