//! Host-side copies between the devices' mapped or staging memory and the caller's `Vec`s, for
//! both GPU backends: typed copies split over threads when large ([`pod_vec`], [`pod_append`]),
//! and a readback destination whose pages are faulted in (huge pages when large) while the
//! device works ([`touched_vec`]). Moved here from `wgpu/context.rs` when the HIP backend began
//! to use them (docs/h200-2026-12-01s8-io).

/// Copies of at least this many bytes are split over threads (wgpu's upload and readback, the
/// typed copies here); below, one thread copies.
pub const WRITE_PAR_MIN: usize = 4 << 20;

/// A typed copy of `bytes` (length a multiple of the element size; a trailing partial element
/// is dropped): [`pod_into`] a new `Vec`.
pub fn pod_vec<T: bytemuck::Pod + Send>(bytes: &[u8]) -> Vec<T> {
    let mut out = Vec::new();
    pod_into(&mut out, bytes);
    out
}

/// An empty `Vec` with room for `n` elements whose pages are already faulted in when it is
/// large (one store per 4 KiB page, split over rayon's threads from [`WRITE_PAR_MIN`] bytes):
/// the readback's destination, made while the device works (wgpu's `Context::submit_readback`'s
/// `pre`). A fresh allocation of tens of MB (glibc mmaps blocks over 32 MiB, e.g. DeepSeek-R1's
/// 58.7 MB output at 2048 tokens) otherwise takes one page fault per 4 KiB during the copy-out;
/// large ones also ask for huge pages ([`advise_huge_pages`]), which makes the faults and the
/// caller's eventual `free` cheaper.
pub fn touched_vec<T: bytemuck::Pod + Send>(n: usize) -> Vec<T> {
    use rayon::prelude::*;
    let mut v: Vec<T> = Vec::with_capacity(n);
    let sz = std::mem::size_of::<T>().max(1);
    if n * sz >= WRITE_PAR_MIN {
        advise_huge_pages(v.as_mut_ptr().cast(), n * sz);
        // Every 4 KiB page the buffer spans holds one of these elements (stride 4096 bytes
        // from the first), and the last element covers the last page.
        let stride = (4096 / sz).max(1);
        let spare = &mut v.spare_capacity_mut()[..n];
        spare.par_chunks_mut(stride * 64).for_each(|c| {
            for i in (0..c.len()).step_by(stride) {
                c[i] = std::mem::MaybeUninit::new(T::zeroed());
            }
        });
        spare[n - 1] = std::mem::MaybeUninit::new(T::zeroed());
    }
    v
}

/// Append a typed copy of `bytes` (length a multiple of the element size; a trailing partial
/// element is dropped) to `out`: the readback's pieces (wgpu's `Context::submit_and_map`'s
/// `stream`), in order.
pub fn pod_append<T: bytemuck::Pod + Send>(out: &mut Vec<T>, bytes: &[u8]) {
    let len = out.len();
    out.reserve(bytes.len() / std::mem::size_of::<T>());
    let n = pod_copy(out.spare_capacity_mut(), bytes);
    // SAFETY: pod_copy wrote the first n elements after `len`.
    unsafe { out.set_len(len + n) };
}

/// Ask Linux for transparent huge pages on the whole 2 MiB pages inside `[ptr, ptr + len)`
/// (`madvise(MADV_HUGEPAGE)`; where THP is "madvise", the default of many distributions, large
/// allocations otherwise get 4 KiB pages). A 58.7 MB readback destination then takes ~30 page
/// faults instead of ~14,000, and its `free` unmaps 2 MiB pages: on the 2-core build machine
/// (a VM, THP "madvise") faulting 58.7 MB took 30-55 ms in 4 KiB pages and 6-8 ms with the
/// advice, and the `free` 6-8 ms against 0.3-0.4 ms (a C loop of malloc, one store per 4 KiB,
/// free; 2026-12-01). Advisory only: the contents and the allocation are unchanged, and an
/// error (no THP, an old kernel) changes nothing.
fn advise_huge_pages(ptr: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        extern "C" {
            fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
        }
        // include/uapi/asm-generic/mman-common.h (every Linux architecture).
        const MADV_HUGEPAGE: i32 = 14;
        const HUGE: usize = 2 << 20;
        let (a, e) = (
            (ptr as usize).next_multiple_of(HUGE),
            (ptr as usize + len) & !(HUGE - 1),
        );
        if e > a {
            // SAFETY: [a, e) lies inside the caller's allocation (page-aligned, as madvise
            // wants); MADV_HUGEPAGE changes no contents and no mapping the program can see.
            unsafe { madvise(a as *mut std::ffi::c_void, e - a, MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, len);
}

/// Replace the contents of `out` by a typed copy of `bytes` (length a multiple of the element
/// size; a trailing partial element is dropped).
pub fn pod_into<T: bytemuck::Pod + Send>(out: &mut Vec<T>, bytes: &[u8]) {
    out.clear();
    pod_append(out, bytes);
}

/// Copy the whole elements of `bytes` into the start of `dst` (which must hold them) and return
/// how many: one copy, split over rayon's threads when large (a 2048-token readback is tens of
/// MB).
fn pod_copy<T: bytemuck::Pod + Send>(dst: &mut [std::mem::MaybeUninit<T>], bytes: &[u8]) -> usize {
    use rayon::prelude::*;
    let sz = std::mem::size_of::<T>();
    let n = bytes.len() / sz;
    let src = &bytes[..n * sz];
    // Into uninitialized room, not a zero-filled Vec: a `vec![zeroed; n]` of a size the
    // allocator reuses (glibc keeps freed blocks up to 32 MiB in its heap) is a
    // single-threaded memset of the whole output before the copy (23.6 MB at 2048 gpt-oss
    // tokens).
    let dst = &mut dst[..n];
    // Elements per task: small enough that a 2048-token output (23.6 MB for gpt-oss) is spread
    // over every core (the copy out of the mapped buffer also takes the fresh Vec's page
    // faults unless `touched_vec` made it; with 4 MiB tasks it ran at ~6.5 GB/s on the H200's
    // host, docs/h200-2026-12-01s5-wgpu5). Below WRITE_PAR_MIN bytes one thread copies: waking
    // rayon's threads cost more than it saved (gpt-oss 64 tokens, 737 KB: 70 us in one copy,
    // 200 us in 3 tasks on the H200's host, docs/h200-2026-12-01s6-wgpu).
    const CHUNK: usize = 1 << 16;
    // SAFETY (both copies): `d` has room for `s.len()` bytes (CHUNK elements of T against
    // CHUNK * sz bytes; the last pieces are as short as each other), source and destination
    // do not overlap (`dst` is spare room of our own Vec), and T is Pod, so any bytes are a
    // valid T.
    let copy = |d: &mut [std::mem::MaybeUninit<T>], s: &[u8]| unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), d.as_mut_ptr().cast::<u8>(), s.len())
    };
    if n * sz < WRITE_PAR_MIN {
        copy(dst, src);
    } else {
        dst.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK * sz))
            .for_each(|(d, s)| copy(d, s));
    }
    n
}

#[cfg(test)]
mod tests {
    use super::{pod_append, pod_vec, touched_vec, WRITE_PAR_MIN};

    /// `pod_vec` against a byte-by-byte decode, below and above the size where it splits the
    /// copy over threads, with a short last piece and a trailing partial element (dropped).
    #[test]
    fn pod_vec_copies_every_element() {
        for len in [
            0usize,
            3,
            4,
            4096 + 2,
            WRITE_PAR_MIN - 4,
            WRITE_PAR_MIN,
            WRITE_PAR_MIN + (1 << 18) + 12,
        ] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            let want: Vec<u32> = bytes
                .chunks_exact(4)
                .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            assert_eq!(pod_vec::<u32>(&bytes), want, "{len} bytes as u32");
            let want16: Vec<u16> = bytes
                .chunks_exact(2)
                .map(|c| u16::from_ne_bytes([c[0], c[1]]))
                .collect();
            assert_eq!(pod_vec::<u16>(&bytes), want16, "{len} bytes as u16");
        }
    }

    /// `touched_vec` gives an empty Vec with room for n elements (small and large: the large
    /// one takes the page-touching path); `pod_append` of the bytes in uneven pieces, some above
    /// the parallel-copy size, gives the byte-by-byte decode of the whole.
    #[test]
    fn touched_vec_and_pod_append_in_pieces() {
        let n = (WRITE_PAR_MIN * 3) / 4 + 1234;
        let bytes: Vec<u8> = (0..n * 4).map(|i| (i * 13 + i / 509) as u8).collect();
        let want: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        for (cap, cuts) in [
            (n, vec![0, 4 << 20, 4 * n]),
            (n, vec![0, 4, 4096, WRITE_PAR_MIN + 8, 4 * n]),
            (3, vec![0, 4 * n]),
        ] {
            let mut v = touched_vec::<u32>(cap);
            assert!(v.is_empty() && v.capacity() >= cap);
            for w in cuts.windows(2) {
                pod_append(&mut v, &bytes[w[0]..w[1]]);
            }
            assert_eq!(v, want, "capacity {cap}, cuts {cuts:?}");
        }
    }
}
