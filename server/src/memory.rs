//! How the process gets memory back from the allocator once a burst is over.
//!
//! glibc's malloc raises its mmap threshold each time a large block is freed, so after the
//! first 8 MiB file later ones come from the heap, and a heap that held a burst of frames
//! keeps its pages long after they were freed (measured: 177 MiB resident 30 s after the
//! abuse run, 2.7 MiB before it). Fixing the threshold at 128 KiB keeps every large buffer
//! (a file, a chunk, a big frame) in its own mapping, handed back to the kernel on free.
//!
//! The many small blocks of a burst (frames, connection buffers, device records) still
//! leave free pages scattered through the heap that malloc keeps resident. `trim` hands
//! them back; the server calls it a few seconds after connections end or the core expires
//! something, never while idle (measured after the abuse run: 9.1 MiB -> 6.8 MiB).

/// Large allocations in their own mappings, for good (glibc only; elsewhere a no-op).
pub fn return_large_blocks_promptly() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            // glibc's `int mallopt(int param, int value)`.
            fn mallopt(param: i32, value: i32) -> i32;
        }
        const M_MMAP_THRESHOLD: i32 = -3;
        // SAFETY: called once at start-up, before any other thread exists; mallopt only
        // changes the allocator's tunables.
        let ok = unsafe { mallopt(M_MMAP_THRESHOLD, 128 * 1024) };
        if ok == 0 {
            log::debug!("mallopt(M_MMAP_THRESHOLD) was refused; large blocks may linger");
        }
    }
}

/// Returns the heap's free pages to the kernel (glibc's `malloc_trim(0)`; elsewhere a no-op).
/// It walks the free lists, so it costs about the size of the heap: call it after a burst,
/// not per event.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            // glibc's `int malloc_trim(size_t pad)`.
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim only releases pages malloc holds free; the loop thread is the
        // only one that allocates here, and glibc locks its arenas anyway.
        unsafe { malloc_trim(0) };
    }
}

/// Makes the process non-dumpable (Linux `prctl(PR_SET_DUMPABLE, 0)`): other processes of
/// the same user, an agent child included, can no longer read its memory or
/// `/proc/<pid>/environ`, where `MOBILE_TOKEN` may be (L39). No core dumps either. Elsewhere
/// a no-op.
pub fn forbid_inspection() {
    #[cfg(target_os = "linux")]
    {
        extern "C" {
            // Linux `int prctl(int option, unsigned long arg2, ...)`.
            fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
        }
        const PR_SET_DUMPABLE: i32 = 4;
        // SAFETY: PR_SET_DUMPABLE takes one integer and changes only this process's flag.
        if unsafe { prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            log::debug!("prctl(PR_SET_DUMPABLE) was refused");
        }
    }
}
