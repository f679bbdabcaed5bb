//! Refs (typed views of an allocation) and semaphore handles, as a kernel sees them.

use crate::array::DType;
use crate::ir::{AllocId, MemorySpace, SemId, SemKind};

/// Most dimensions a ref may have.
pub const MAX_RANK: usize = 6;

/// A slice of the leading dimension: `pl.ds(start, size)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ds {
    /// First row.
    pub start: i64,
    /// Number of rows.
    pub size: i64,
}

/// `pl.ds(start, size)`: rows `start .. start + size` of the leading dimension.
pub fn ds(start: i64, size: i64) -> Ds {
    Ds { start, size }
}

impl Ds {
    /// True when the slice lies within a dimension of size `dim`.
    fn fits(&self, dim: usize) -> bool {
        self.start >= 0 && self.size >= 0 && (self.start + self.size) as usize <= dim
    }
}

/// Why an indexing step left the bounds of its ref; reported when the ref is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    At {
        index: i64,
        size: usize,
    },
    Ds {
        start: i64,
        size: i64,
        dim: usize,
    },
    AtScalar,
    /// A column slice that leaves the last dimension.
    Cols {
        start: i64,
        size: i64,
        dim: usize,
    },
    /// A window of rows that overlap each other, or a strided window used where only a
    /// contiguous run can be.
    Rows {
        rows: i64,
        stride: i64,
        len: usize,
    },
    /// A kernel argument that does not exist or has the other kind (already reported
    /// where the kernel asked for it).
    Arg,
}

impl Fault {
    /// `rows` rows of `len` elements, `stride` apart, where they cannot be.
    pub(crate) fn rows(rows: usize, stride: usize, len: usize) -> Fault {
        Fault::Rows {
            rows: rows as i64,
            stride: stride as i64,
            len,
        }
    }

    pub(crate) fn describe(&self, name: &str) -> String {
        match self {
            Fault::At { index, size } => format!(
                "`{name}.at({index})` indexes a leading dimension of size {size} (valid 0..={})",
                *size as i64 - 1
            ),
            Fault::Ds { start, size, dim } => format!(
                "`{name}` slice ds({start}, {size}) leaves a leading dimension of size {dim}"
            ),
            Fault::AtScalar => format!("`{name}.at(..)` on a ref with no dimensions left"),
            Fault::Cols { start, size, dim } => format!(
                "`{name}` column slice ds({start}, {size}) leaves a last dimension of size {dim}"
            ),
            Fault::Rows { rows, stride, len } => format!(
                "`{name}` as {rows} rows of {len} elements {stride} apart: rows must not overlap"
            ),
            Fault::Arg => format!("`{name}` is not a kernel argument"),
        }
    }
}

/// A typed view of one allocation (the same allocation on every device): dtype,
/// shape and element offset. `.at(i)` drops the leading dimension and `.slice(ds(..))`
/// narrows it, which keep a view contiguous; `.cols(ds(..))` narrows the last dimension,
/// which makes it a window of rows (every dimension but the last) a fixed stride apart:
/// what a DMA moves as one (`x_ref.at[pl.ds(..), pl.ds(..)]`); compute and VMEM
/// assignments take contiguous refs only.
#[derive(Clone, Copy, Debug)]
pub struct Ref {
    pub(crate) alloc: AllocId,
    pub(crate) space: MemorySpace,
    pub(crate) dtype: DType,
    rank: u8,
    dims: [usize; MAX_RANK],
    pub(crate) offset: usize,
    /// Elements from one row (every index but the last) to the next; 0: contiguous.
    stride: usize,
    pub(crate) fault: Option<Fault>,
}

impl Ref {
    /// A stand-in for a kernel argument that could not be given; every use is skipped.
    pub(crate) fn poisoned() -> Self {
        let mut r = Ref::whole(0, MemorySpace::Vmem, DType::F32, &[1]);
        r.fault = Some(Fault::Arg);
        r
    }

    pub(crate) fn whole(alloc: AllocId, space: MemorySpace, dtype: DType, shape: &[usize]) -> Self {
        assert!(shape.len() <= MAX_RANK, "rank above {MAX_RANK}");
        let mut dims = [0; MAX_RANK];
        dims[..shape.len()].copy_from_slice(shape);
        Ref {
            alloc,
            space,
            dtype,
            rank: shape.len() as u8,
            dims,
            offset: 0,
            stride: 0,
            fault: None,
        }
    }

    /// Shape of the view.
    pub fn shape(&self) -> &[usize] {
        &self.dims[..self.rank as usize]
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Memory space of the underlying allocation.
    pub fn space(&self) -> MemorySpace {
        self.space
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape().iter().product()
    }

    /// Size in bytes (what a DMA of this view adds to its semaphores).
    pub fn bytes(&self) -> u64 {
        (self.numel() * self.dtype.size()) as u64
    }

    /// Elements from one index of the leading dimension to the next.
    fn row_len(&self) -> usize {
        let dims = self.shape();
        match (self.stride, dims.len()) {
            (0, _) | (_, 0..=1) => dims[1..].iter().product(),
            (s, n) => dims[1..n - 1].iter().product::<usize>() * s,
        }
    }

    /// Rows (every index but the last), elements per row and the stride between rows
    /// when this ref is a strided window; `None` when it is contiguous.
    pub fn rows(&self) -> Option<(usize, usize, usize)> {
        let dims = self.shape();
        let n = dims.len();
        let (rows, len) = (dims[..n.saturating_sub(1)].iter().product(), *dims.last()?);
        (self.stride != 0 && rows > 1 && self.stride != len).then_some((rows, len, self.stride))
    }

    /// A copy of this ref to index on its leading dimension, or `None` when it is faulty
    /// already or has no dimension (see [`Ref::faulted`]).
    fn indexable(&self) -> Option<Ref> {
        (self.fault.is_none() && self.rank > 0).then_some(*self)
    }

    /// This ref, faulty: as it is when it is faulty already, else indexed as a scalar.
    fn faulted(&self) -> Ref {
        let mut r = *self;
        if r.fault.is_none() {
            r.fault = Some(Fault::AtScalar);
        }
        r
    }

    /// `ref.at[i]`: element `i` of the leading dimension, as a ref of one rank less.
    pub fn at(&self, i: i64) -> Ref {
        let Some(mut r) = self.indexable() else {
            return self.faulted();
        };
        let size = r.dims[0];
        if i < 0 || i as usize >= size {
            r.fault = Some(Fault::At { index: i, size });
            return r;
        }
        r.offset += i as usize * self.row_len();
        r.dims.copy_within(1..MAX_RANK, 0);
        r.dims[MAX_RANK - 1] = 0;
        r.rank -= 1;
        if r.rank <= 1 {
            r.stride = 0;
        }
        r
    }

    /// The same elements as a one-dimensional ref (a front end addresses any contiguous
    /// run of an allocation as `r.flat().slice(ds(offset, len))`).
    pub fn flat(&self) -> Ref {
        if self.fault.is_some() {
            return *self;
        }
        let mut r = *self;
        if let Some((rows, len, stride)) = self.rows() {
            r.fault = Some(Fault::rows(rows, stride, len));
            return r;
        }
        r.stride = 0;
        let n = self.numel();
        r.dims = [0; MAX_RANK];
        r.dims[0] = n;
        r.rank = 1;
        r
    }

    /// `ref.at[pl.ds(start, size)]`: rows `start .. start + size` of the leading dimension.
    pub fn slice(&self, d: Ds) -> Ref {
        let Some(mut r) = self.indexable() else {
            return self.faulted();
        };
        let dim = r.dims[0];
        if !d.fits(dim) {
            r.fault = Some(Fault::Ds {
                start: d.start,
                size: d.size,
                dim,
            });
            return r;
        }
        r.offset += d.start as usize * self.row_len();
        r.dims[0] = d.size as usize;
        r
    }

    /// `ref.at[..., pl.ds(start, size)]`: columns `start .. start + size` of the last
    /// dimension, every row (every index but the last) kept: a strided window of the
    /// rows, unless it takes whole rows.
    pub fn cols(&self, d: Ds) -> Ref {
        let Some(mut r) = self.indexable() else {
            return self.faulted();
        };
        let n = r.rank as usize;
        let dim = r.dims[n - 1];
        if !d.fits(dim) {
            r.fault = Some(Fault::Cols {
                start: d.start,
                size: d.size,
                dim,
            });
            return r;
        }
        if r.stride == 0 && n > 1 {
            r.stride = dim;
        }
        r.offset += d.start as usize;
        r.dims[n - 1] = d.size as usize;
        r
    }

    /// This one-dimensional ref as the first of `rows` rows, each `stride` elements after
    /// the one before: a window of a wider array, as a front end that resolved its
    /// indices to element offsets names it (`x.flat().slice(ds(offset, len)).rows(..)`).
    pub fn rows_of(&self, rows: usize, stride: usize) -> Ref {
        let Some(mut r) = self.indexable() else {
            return self.faulted();
        };
        let len = r.dims[0];
        if r.rank != 1 || (rows > 1 && stride < len) {
            r.fault = Some(Fault::rows(rows, stride, len));
            return r;
        }
        r.rank = 2;
        r.dims[0] = rows;
        r.dims[1] = len;
        r.stride = stride;
        r
    }
}

/// A semaphore, or an array of them (index it with [`Sem::at`]).
#[derive(Clone, Copy, Debug)]
pub struct Sem {
    pub(crate) base: SemId,
    pub(crate) count: usize,
    /// Columns of a seed-003 signal matrix (0 otherwise).
    pub(crate) cols: usize,
    pub(crate) is_array: bool,
    pub(crate) kind: SemKind,
    pub(crate) fault: Option<Fault>,
}

impl Sem {
    /// A stand-in for a kernel argument that could not be given; every use is skipped.
    pub(crate) fn poisoned() -> Self {
        Sem {
            base: 0,
            count: 1,
            cols: 0,
            is_array: false,
            kind: SemKind::Regular,
            fault: Some(Fault::Arg),
        }
    }

    /// Kind of semaphore.
    pub fn kind(&self) -> SemKind {
        self.kind
    }

    /// `sems.at[i]`: one semaphore of an array.
    pub fn at(&self, i: i64) -> Sem {
        let mut s = *self;
        if s.fault.is_some() {
            return s;
        }
        if !s.is_array {
            s.fault = Some(Fault::AtScalar);
        } else if i < 0 || i as usize >= s.count {
            s.fault = Some(Fault::At {
                index: i,
                size: s.count,
            });
        } else {
            s.base += i as usize;
            s.count = 1;
            s.is_array = false;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_and_slice_compute_contiguous_views() {
        let r = Ref::whole(0, MemorySpace::Any, DType::F32, &[4, 16, 8]);
        let v = r.at(2).slice(ds(8, 8));
        assert_eq!(v.shape(), &[8, 8]);
        assert_eq!(v.offset, 2 * 128 + 64);
        assert_eq!(v.bytes(), 256);
        assert!(r.at(4).fault.is_some());
        assert!(r.at(-1).fault.is_some());
        assert!(r.at(0).slice(ds(10, 7)).fault.is_some());
        assert!(r.at(0).at(0).at(0).at(0).fault.is_some());
        let f = r.at(1).flat().slice(ds(5, 3));
        assert_eq!((f.shape(), f.offset), (&[3][..], 128 + 5));
        assert!(r.flat().slice(ds(500, 20)).fault.is_some());
    }
}
