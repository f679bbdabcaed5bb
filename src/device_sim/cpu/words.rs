//! The CPU executor's own word buffers. From [`ALIGN_FROM`] bytes a buffer starts on a
//! page, so the same element of two buffers lies at the same place in its page: a copy
//! or sum between them never has its loads wait on stores to an address 4 KiB apart
//! (which buffers at arbitrary offsets do, at a quarter to half of memcpy's speed). From
//! [`LAZY_FROM`] bytes a buffer is fresh pages of the kernel's, zero until first
//! touched: nothing writes zeros the run overwrites before reading.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Buffers of at least this many bytes start on a page.
pub const ALIGN_FROM: usize = 2048;
/// Buffers of at least this many bytes are zeroed by the kernel, page by page, when
/// first touched.
pub const LAZY_FROM: usize = 1 << 20;
/// The alignment of buffers from [`ALIGN_FROM`] bytes.
pub const PAGE: usize = 4096;

/// `len` zeroed 32-bit words.
pub struct Words {
    ptr: NonNull<u32>,
    len: usize,
    from: From,
}

/// Where a buffer's memory came from, to give it back.
#[derive(Clone, Copy)]
enum From {
    /// Nothing (an empty buffer).
    None,
    /// The global allocator, with this layout.
    Heap(std::alloc::Layout),
    /// A private anonymous mapping of this many bytes.
    #[cfg(unix)]
    Map(usize),
}

// SAFETY: `Words` owns its memory alone, as a `Vec<u32>` does.
unsafe impl Send for Words {}
// SAFETY: shared access is reads only (`&[u32]`).
unsafe impl Sync for Words {}

impl Words {
    /// `len` zeroed words, or `None` when the host cannot give them.
    pub fn zeroed(len: usize) -> Option<Words> {
        let bytes = len.checked_mul(4)?;
        if len == 0 {
            return Some(Words {
                ptr: NonNull::dangling(),
                len: 0,
                from: From::None,
            });
        }
        #[cfg(unix)]
        if bytes >= LAZY_FROM {
            return Self::mapped(len, bytes);
        }
        let align = if bytes >= ALIGN_FROM { PAGE } else { 4 };
        let layout = std::alloc::Layout::from_size_align(bytes, align).ok()?;
        // SAFETY: the layout has a non-zero size; null is the allocator's refusal.
        let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut u32;
        Some(Words {
            ptr: NonNull::new(p)?,
            len,
            from: From::Heap(layout),
        })
    }

    /// `len` words (`bytes` bytes) in fresh pages of their own.
    #[cfg(unix)]
    fn mapped(len: usize, bytes: usize) -> Option<Words> {
        // SAFETY: an anonymous private mapping at an address of the kernel's choice
        // touches no existing memory; MAP_FAILED is its refusal.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(Words {
            ptr: NonNull::new(p as *mut u32)?,
            len,
            from: From::Map(bytes),
        })
    }
}

impl Words {
    /// Bytes of the buffer in resident pages: those `mincore` reports of a mapped
    /// buffer (untouched pages are not), all of the others.
    pub fn resident_bytes(&self) -> usize {
        #[cfg(unix)]
        if let From::Map(bytes) = self.from {
            let mut pages = vec![0u8; bytes.div_ceil(PAGE)];
            // SAFETY: our own mapping of `bytes`, and a vector of one byte per page.
            let ok = unsafe { libc::mincore(self.ptr.as_ptr().cast(), bytes, pages.as_mut_ptr()) };
            if ok == 0 {
                return pages.iter().filter(|&&p| p & 1 != 0).count() * PAGE;
            }
        }
        self.len * 4
    }
}

impl Drop for Words {
    fn drop(&mut self) {
        match self.from {
            From::None => {}
            // SAFETY: allocated by the global allocator with this layout.
            From::Heap(layout) => unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), layout) },
            // SAFETY: our own mapping of this length, unmapped once.
            #[cfg(unix)]
            From::Map(bytes) => unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), bytes);
            },
        }
    }
}

impl Default for Words {
    fn default() -> Self {
        Words::zeroed(0).expect("an empty buffer")
    }
}

impl Deref for Words {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        // SAFETY: `len` initialised words (zeroed at allocation) owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for Words {
    fn deref_mut(&mut self) -> &mut [u32] {
        // SAFETY: as in `deref`, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl std::fmt::Debug for Words {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Words({})", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zero_and_page_aligned_from_2_kib() {
        for len in [
            0,
            1,
            7,
            511,
            512,
            1000,
            4096,
            (1 << 18) - 1,
            1 << 18,
            3 << 18,
        ] {
            let w = Words::zeroed(len).unwrap();
            assert_eq!(w.len(), len);
            assert!(w.iter().all(|&x| x == 0), "{len}");
            let at = w.as_ptr() as usize;
            assert_eq!(at % 4, 0);
            if len * 4 >= ALIGN_FROM {
                assert_eq!(at % PAGE, 0, "{len} words at {at:#x}");
            }
        }
    }

    /// A large buffer is fresh pages: none in memory until touched (no zero pass).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_buffer_is_untouched_until_used() {
        let resident = |w: &Words| {
            let bytes = w.len() * 4;
            let mut v = vec![0u8; bytes.div_ceil(PAGE)];
            // SAFETY: the range is our own mapping; `v` has a byte per page.
            let r = unsafe { libc::mincore(w.as_ptr() as *mut _, bytes, v.as_mut_ptr()) };
            assert_eq!(r, 0);
            v.iter().filter(|&&x| x & 1 == 1).count()
        };
        let mut w = Words::zeroed(LAZY_FROM).unwrap();
        assert_eq!(resident(&w), 0);
        w[PAGE / 4 * 3 + 5] = 1;
        assert_eq!(resident(&w), 1);
        assert_eq!(w.iter().map(|&x| x as usize).sum::<usize>(), 1);
    }

    #[test]
    fn a_buffer_too_large_for_the_host_is_refused() {
        assert!(Words::zeroed(usize::MAX / 2).is_none());
        assert!(Words::zeroed(1 << 58).is_none());
    }
}
