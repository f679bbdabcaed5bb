"""A view of a kernel buffer, as the jaxpr evaluator (``_jaxpr``) and the batched loop
recording (``_batch``) both make them: its own module, so that neither imports the other's."""

import itertools
import math


class Shaped:
    """What a view's ``dims`` (per dimension of its buffer ``buf``: an int, dropped, or a
    slice whose size is the second item) say of its shape."""

    __slots__ = ()

    @property
    def shape(self):
        return tuple(d[1] for d in self.dims if isinstance(d, tuple))

    @property
    def dtype(self):
        return self.buf.dtype

    def numel(self):
        return math.prod(self.shape)


class RefV(Shaped):
    """A view of a buffer: per dimension of the buffer an int (dropped) or a
    (start, size, stride) slice; the view's shape is the slices' sizes."""

    __slots__ = ("buf", "dims", "barrier_n")

    def __init__(self, buf, dims=None, barrier_n=None):
        self.buf = buf
        self.dims = tuple(dims) if dims is not None else tuple((0, s, 1) for s in buf.shape)
        self.barrier_n = barrier_n

    def key(self):
        return (id(self.buf.root), self.buf.base, self.buf.shape, self.dims)

    def runs(self):
        """The view's elements as contiguous runs [(offset, len)] of the buffer, in
        row-major order."""
        shape = self.buf.shape
        dims = list(self.dims)
        strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
        # The contiguous tail: full dims, then one stride-1 slice.
        k = len(dims)
        block = 1
        while k > 0:
            d = dims[k - 1]
            if isinstance(d, tuple) and d[0] == 0 and d[1] == shape[k - 1] and d[2] == 1:
                block *= shape[k - 1]
                k -= 1
                continue
            break
        base = 0
        if k > 0:
            d = dims[k - 1]
            if isinstance(d, tuple) and d[2] == 1:
                block *= d[1]
                base = d[0] * strides[k - 1]
                k -= 1
        if block == 0:
            return []
        base += self.buf.base
        outer = []
        for i in range(k):
            d = dims[i]
            if isinstance(d, tuple):
                outer.append([(d[0] + j * d[2]) * strides[i] for j in range(d[1])])
            else:
                outer.append([d * strides[i]])
        runs = []
        if not outer:
            return [(base, block)]
        for combo in itertools.product(*outer):
            runs.append((base + sum(combo), block))
        return runs

    def window(self):
        """(start, shape, strides, kept) per dimension of the buffer: the view as a
        strided window (an integer index is a window of one)."""
        start, shape, strides, kept = [], [], [], []
        for d in self.dims:
            if isinstance(d, tuple):
                start.append(int(d[0]))
                shape.append(int(d[1]))
                strides.append(int(d[2]))
                kept.append(True)
            else:
                start.append(int(d))
                shape.append(1)
                strides.append(1)
                kept.append(False)
        return start, shape, strides, kept

    def steps(self):
        """Leading-dimension steps for the Rust ref (`[[0, i, 0] | [1, start, size]]`)
        when the view is a run that they express, else None."""
        if self.buf.aliased():
            return None
        out = []
        shape = self.buf.shape
        i = 0
        while i < len(self.dims) and not isinstance(self.dims[i], tuple):
            out.append([0, int(self.dims[i]), 0])
            i += 1
        if i < len(self.dims):
            s, n, st = self.dims[i]
            if not (s == 0 and n == shape[i] and st == 1):
                if st != 1:
                    return None
                out.append([1, int(s), int(n)])
            i += 1
        for j in range(i, len(self.dims)):
            d = self.dims[j]
            if not (isinstance(d, tuple) and d[0] == 0 and d[1] == shape[j] and d[2] == 1):
                return None
        return out

    def __repr__(self):
        return f"RefV({self.buf.name}{list(self.dims)})"
