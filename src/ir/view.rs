//! Views: a run of elements of one allocation on one device; blocks, rows of such runs
//! at a fixed stride (what a DMA of a window of a wider array moves); and a semaphore
//! slot on one device.

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

/// Rows of elements of one allocation on one device: `rows` runs of the first row's
/// length, the first at its offset and each `stride` elements after the one before
/// (a 2-D window of a wider array, as a DMA of `x_ref.at[pl.ds(..), pl.ds(..)]` moves).
/// One row, or rows that follow each other, is a contiguous [`View`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    first: View,
    rows: u32,
    stride: u32,
}

impl From<View> for Block {
    fn from(v: View) -> Self {
        Block {
            first: v,
            rows: 1,
            stride: narrow(v.len(), "stride"),
        }
    }
}

impl Block {
    /// `rows` runs like `first`, each `stride` elements after the one before; `None`
    /// when the rows would overlap (`stride < first.len()` with more than one row).
    /// Rows that follow each other make one contiguous row.
    pub fn new(first: View, rows: usize, stride: usize) -> Option<Self> {
        if rows > 1 && stride < first.len() {
            return None;
        }
        if rows <= 1 || stride == first.len() {
            let len = first.len() * rows;
            return Some(Block::from(View::new(
                first.device(),
                first.alloc(),
                first.offset(),
                len,
            )));
        }
        Some(Block {
            first,
            rows: narrow(rows, "rows"),
            stride: narrow(stride, "stride"),
        })
    }
    /// Device holding the allocation.
    #[inline]
    pub fn device(&self) -> usize {
        self.first.device()
    }
    /// Allocation.
    #[inline]
    pub fn alloc(&self) -> AllocId {
        self.first.alloc()
    }
    /// Number of rows (1 for a contiguous block).
    #[inline]
    pub fn rows(&self) -> usize {
        self.rows as usize
    }
    /// Elements from one row's start to the next's.
    #[inline]
    pub fn stride(&self) -> usize {
        self.stride as usize
    }
    /// Elements in one row.
    #[inline]
    pub fn row_len(&self) -> usize {
        self.first.len()
    }
    /// Elements in all rows.
    #[inline]
    pub fn numel(&self) -> usize {
        self.rows() * self.row_len()
    }
    /// Size in bytes of its elements of `elem` bytes.
    pub fn bytes(&self, elem: usize) -> u64 {
        self.numel() as u64 * elem as u64
    }
    /// The whole block as one view, when its rows follow each other.
    pub fn contiguous(&self) -> Option<View> {
        (self.rows == 1).then_some(self.first)
    }
    /// Row `i`.
    #[inline]
    pub fn row(&self, i: usize) -> View {
        View::new(
            self.device(),
            self.alloc(),
            self.first.offset() + i * self.stride(),
            self.row_len(),
        )
    }
    /// Run `i` of `len` elements, in order: row `i` of a strided block (`len` is its row
    /// length), the `i`-th piece of `len` elements of a contiguous one.
    pub fn run(&self, i: usize, len: usize) -> View {
        match self.rows {
            1 => View::new(
                self.device(),
                self.alloc(),
                self.first.offset() + i * len,
                len,
            ),
            _ => {
                debug_assert_eq!(len, self.row_len(), "a strided block's runs are its rows");
                self.row(i)
            }
        }
    }
    /// Every row, in order.
    pub fn row_views(&self) -> impl Iterator<Item = View> + '_ {
        (0..self.rows()).map(|i| self.row(i))
    }
    /// The first element and one past the last.
    pub fn bounds(&self) -> (usize, usize) {
        let lo = self.first.offset();
        (lo, lo + (self.rows() - 1) * self.stride() + self.row_len())
    }
    /// The same block on device `device`.
    pub fn on_device(self, device: usize) -> Self {
        Block {
            first: self.first.on_device(device),
            ..self
        }
    }
    /// The block with its first row moved by `f` (its rows keep their length and stride).
    pub fn map_first(self, f: impl Fn(View) -> View) -> Self {
        Block {
            first: f(self.first),
            ..self
        }
    }
    /// The first run `[lo, hi)` of elements this block shares with the elements
    /// `[lo, hi)` of the same allocation, if any.
    pub fn first_overlap(&self, lo: usize, hi: usize) -> Option<(usize, usize)> {
        let (a, b) = self.bounds();
        if a >= hi || lo >= b {
            return None;
        }
        // Rows k with start < hi and start + len > lo, from the first such.
        let (len, stride) = (self.row_len(), self.stride());
        let k = (lo + 1).saturating_sub(a + len).div_ceil(stride.max(1));
        let start = a + k * stride;
        (k < self.rows() && start < hi).then(|| (start.max(lo), (start + len).min(hi)))
    }
    /// The first run of elements this block shares with `other` (same device and
    /// allocation), if any.
    pub fn overlap(&self, other: &Block) -> Option<(usize, usize)> {
        if self.device() != other.device() || self.alloc() != other.alloc() {
            return None;
        }
        let ((a, b), (c, d)) = (self.bounds(), other.bounds());
        if a >= d || c >= b {
            return None;
        }
        // Rows a common stride apart that stay within one stride: columns meet or not.
        let s = self.stride();
        let fits = |x: &Block| x.first.offset() % s + x.row_len() <= s;
        if self.rows > 1 && other.rows > 1 && other.stride() == s && fits(self) && fits(other) {
            let (ca, cb) = (a % s, c % s);
            let (lo, hi) = (ca.max(cb), (ca + self.row_len()).min(cb + other.row_len()));
            let row = (a / s).max(c / s);
            return (lo < hi).then(|| (row * s + lo, row * s + hi));
        }
        let (few, many) = if self.rows() <= other.rows() {
            (self, other)
        } else {
            (other, self)
        };
        let (start, len, stride) = (few.first.offset(), few.row_len(), few.stride());
        let (lo, hi) = many.bounds();
        // Only the rows of `few` within `many`'s bounds can meet it.
        let first = (lo + 1).saturating_sub(start + len).div_ceil(stride.max(1));
        (first..few.rows())
            .map(|i| start + i * stride)
            .take_while(|&r| r < hi)
            .find_map(|r| many.first_overlap(r, r + len))
    }
    /// True when every element of `self` is an element of `other` (same device and
    /// allocation): `other` contiguous around it, or the same rows.
    pub fn within(&self, other: &Block) -> bool {
        if self.device() != other.device() || self.alloc() != other.alloc() {
            return false;
        }
        let ((a, b), (c, d)) = (self.bounds(), other.bounds());
        match other.contiguous() {
            Some(_) => c <= a && b <= d,
            None => self == other,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(offset: usize, len: usize, n: usize, stride: usize) -> Block {
        Block::new(View::new(0, 0, offset, len), n, stride).unwrap()
    }

    #[test]
    fn rows_that_follow_each_other_are_one_view() {
        let b = rows(8, 4, 3, 4);
        assert_eq!(b.contiguous(), Some(View::new(0, 0, 8, 12)));
        assert_eq!((b.rows(), b.numel()), (1, 12));
        assert!(
            Block::new(View::new(0, 0, 0, 4), 2, 3).is_none(),
            "overlapping rows"
        );
    }

    #[test]
    fn rows_are_found_by_their_stride() {
        let b = rows(10, 4, 3, 100); // [10,14) [110,114) [210,214)
        assert_eq!(b.bounds(), (10, 214));
        assert_eq!(b.row(2), View::new(0, 0, 210, 4));
        assert_eq!(b.first_overlap(0, 10), None);
        assert_eq!(b.first_overlap(12, 200), Some((12, 14)));
        assert_eq!(b.first_overlap(14, 110), None, "between rows");
        assert_eq!(b.first_overlap(50, 112), Some((110, 112)));
        assert_eq!(b.first_overlap(213, 400), Some((213, 214)));
        assert_eq!(b.first_overlap(214, 400), None);
    }

    proptest::proptest! {
        /// `overlap` is the first element both blocks hold, and `within` their inclusion,
        /// as the elements themselves say.
        #[test]
        fn overlap_and_within_agree_with_the_elements(
            a in (0usize..40, 1usize..9, 1usize..6, 0usize..12),
            b in (0usize..40, 1usize..9, 1usize..6, 0usize..12),
        ) {
            let block = |(off, len, n, extra): (usize, usize, usize, usize)| {
                Block::new(View::new(0, 0, off, len), n, len + extra).unwrap()
            };
            let (x, y) = (block(a), block(b));
            let elems = |b: &Block| -> std::collections::BTreeSet<usize> {
                b.row_views().flat_map(|r| r.offset()..r.offset() + r.len()).collect()
            };
            let (ex, ey) = (elems(&x), elems(&y));
            let common: Vec<usize> = ex.intersection(&ey).copied().collect();
            match x.overlap(&y) {
                None => proptest::prop_assert!(common.is_empty()),
                Some((lo, hi)) => {
                    proptest::prop_assert_eq!(Some(&lo), common.first());
                    proptest::prop_assert!(lo < hi && (lo..hi).all(|e| common.contains(&e)));
                }
            }
            proptest::prop_assert_eq!(x.overlap(&y), y.overlap(&x));
            if x.within(&y) {
                proptest::prop_assert!(ex.is_subset(&ey));
            }
        }
    }

    #[test]
    fn blocks_overlap_only_where_rows_meet() {
        let a = rows(0, 4, 8, 16); // columns 0..4 of 8 rows of 16
        let b = rows(4, 4, 8, 16); // columns 4..8
        assert_eq!(a.overlap(&b), None);
        let c = rows(18, 4, 2, 16); // columns 2..6 of rows 1 and 2
        assert_eq!(a.overlap(&c), Some((18, 20)));
        assert_eq!(b.overlap(&c), Some((20, 22)));
        let whole = Block::from(View::new(0, 0, 0, 128));
        assert_eq!(whole.overlap(&a), Some((0, 4)));
        assert!(a.within(&whole) && !whole.within(&a) && a.within(&a) && !a.within(&b));
        assert_eq!(a.overlap(&a.on_device(1)), None, "another device's");
    }
}
