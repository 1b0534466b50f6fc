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
