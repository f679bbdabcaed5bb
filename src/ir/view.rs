//! Views: a run of elements of one allocation on one device, and a semaphore slot on one
//! device.

/// Index of an allocation in [`super::Layout::allocs`].
pub type AllocId = usize;
/// Index of a semaphore slot in [`super::Layout::sems`].
pub type SemId = usize;

/// A contiguous run of elements of one allocation on one device. The fields are 32 bits
/// (a program at large P holds millions of views); the accessors give them as `usize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    device: u32,
    alloc: u32,
    offset: u32,
    len: u32,
}

/// `x` in 32 bits: device counts, allocation ids, semaphore slots and element counts of
/// one allocation all fit (a simulated allocation is far below 2^32 elements).
fn narrow(x: usize, what: &str) -> u32 {
    u32::try_from(x).unwrap_or_else(|_| panic!("{what} {x} does not fit in 32 bits"))
}

impl View {
    /// `len` elements from `offset` of allocation `alloc` on `device`.
    pub fn new(device: usize, alloc: AllocId, offset: usize, len: usize) -> Self {
        View {
            device: narrow(device, "device"),
            alloc: narrow(alloc, "allocation"),
            offset: narrow(offset, "offset"),
            len: narrow(len, "length"),
        }
    }
    /// Device holding the allocation.
    #[inline]
    pub fn device(&self) -> usize {
        self.device as usize
    }
    /// Allocation.
    #[inline]
    pub fn alloc(&self) -> AllocId {
        self.alloc as usize
    }
    /// First element.
    #[inline]
    pub fn offset(&self) -> usize {
        self.offset as usize
    }
    /// Number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// True when the view has no element.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The same view on device `device`.
    pub fn on_device(self, device: usize) -> Self {
        View {
            device: narrow(device, "device"),
            ..self
        }
    }
    /// The same run of elements in allocation `alloc`.
    pub fn in_alloc(self, alloc: AllocId) -> Self {
        View {
            alloc: narrow(alloc, "allocation"),
            ..self
        }
    }
    /// Byte offset in the allocation, whose elements are `elem` bytes wide.
    pub fn byte_offset(&self, elem: usize) -> u64 {
        self.offset as u64 * elem as u64
    }
    /// Size in bytes of `len` elements of `elem` bytes.
    pub fn bytes(&self, elem: usize) -> u64 {
        self.len as u64 * elem as u64
    }
    /// True when the two views share a byte on the same allocation and device.
    pub fn overlaps(&self, other: &View) -> bool {
        self.device == other.device
            && self.alloc == other.alloc
            && self.offset() < other.offset() + other.len()
            && other.offset() < self.offset() + self.len()
    }
}

/// A semaphore slot on a device (32-bit fields, as [`View`]'s).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SemRef {
    device: u32,
    sem: u32,
}

impl SemRef {
    /// Slot `sem` on `device`.
    pub fn new(device: usize, sem: SemId) -> Self {
        SemRef {
            device: narrow(device, "device"),
            sem: narrow(sem, "semaphore slot"),
        }
    }
    /// Device holding it.
    #[inline]
    pub fn device(&self) -> usize {
        self.device as usize
    }
    /// Slot.
    #[inline]
    pub fn sem(&self) -> SemId {
        self.sem as usize
    }
}
