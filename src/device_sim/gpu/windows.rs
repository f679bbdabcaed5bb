//! Splitting an element range into storage-binding windows.
//!
//! A storage binding is at most `max_storage_buffer_binding_size` bytes and must start
//! at a multiple of `min_storage_buffer_offset_alignment`; a compute op over a larger
//! or unaligned region runs as several windows, each bound at an aligned offset with
//! the remaining misalignment passed to the shader as an element offset.

/// One binding of one window: the byte range bound and the element offset inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// Bound byte offset (aligned).
    pub offset: u64,
    /// Bound byte size.
    pub size: u64,
    /// Element offset of the window's first element inside the binding.
    pub elem_off: u32,
}

/// One dispatch worth of an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Destination binding.
    pub dst: Binding,
    /// Source binding, for ops with a source.
    pub src: Option<Binding>,
    /// Elements in this window.
    pub n: u32,
}

fn bind(byte_off: u64, n: u64, align: u64, unit: u64) -> Binding {
    let offset = byte_off / align * align;
    let lead = byte_off - offset;
    Binding {
        offset,
        // Whole words: 16-bit elements end mid-word (buffers are sized in words).
        size: (lead + n * unit).next_multiple_of(4),
        elem_off: (lead / unit) as u32,
    }
}

/// Windows covering `n` elements of `unit` bytes (2, 4, or 16 for vec4 words) at byte
/// offsets `dst` (and `src`, both multiples of `unit`), with every binding at most
/// `max_binding` bytes and aligned to `align` (raised to `unit` if smaller).
pub fn windows(
    n: u64,
    dst: u64,
    src: Option<u64>,
    max_binding: u64,
    align: u64,
    unit: u64,
) -> Vec<Window> {
    let align = align.max(unit);
    // Leave room for the worst-case misalignment lead of a window.
    let per = ((max_binding.saturating_sub(align)) / unit).clamp(1, u32::MAX as u64);
    let mut out = Vec::new();
    let mut done = 0;
    while done < n {
        let k = per.min(n - done);
        out.push(Window {
            dst: bind(dst + done * unit, k, align, unit),
            src: src.map(|s| bind(s + done * unit, k, align, unit)),
            n: k as u32,
        });
        done += k;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_the_range_within_fake_limits() {
        // A tiny fake limit: 1 KiB bindings, 256-byte alignment, unaligned offsets.
        let (max, align) = (1024u64, 256u64);
        let n = 1000u64;
        let ws = windows(n, 4 * 37, Some(4 * 5), max, align, 4);
        assert_eq!(ws.iter().map(|w| w.n as u64).sum::<u64>(), n);
        let mut next_dst = 4 * 37;
        for w in &ws {
            for b in [w.dst, w.src.unwrap()] {
                assert_eq!(b.offset % align, 0);
                assert!(b.size <= max, "{b:?}");
                assert_eq!(b.size, b.elem_off as u64 * 4 + w.n as u64 * 4);
            }
            assert_eq!(w.dst.offset + w.dst.elem_off as u64 * 4, next_dst);
            next_dst += w.n as u64 * 4;
        }
        assert!(ws.len() >= 4);
    }

    #[test]
    fn one_window_when_it_fits() {
        let ws = windows(32, 0, None, 1 << 27, 256, 4);
        assert_eq!(ws.len(), 1);
        assert_eq!(
            ws[0].dst,
            Binding {
                offset: 0,
                size: 128,
                elem_off: 0
            }
        );
    }
}
