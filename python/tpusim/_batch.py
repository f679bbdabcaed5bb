"""A loop's body recorded once for many iterations (``lax.fori_loop`` / ``lax.scan``).

Per-iteration evaluation (``_jaxpr.Evaluator.p_scan``) runs the body's jaxpr in Python
at every iteration, and that is most of a first call of a kernel with long loops. Here
the iterations after the first two run as one: every scalar that differs between them
(the loop index, a carried counter, a scanned value) is a :class:`Batched`, its value
at each of them; scalar primitives compute on all of them at once (numpy), a ref
indexed by one is a :class:`BView` (its view at each), and a record field that differs
between iterations holds a :class:`PerIter`. The records made (the template) are then
copied once per iteration, their value and DMA ids shifted as the iterations would have
numbered them and their :class:`PerIter` fields replaced by that iteration's value.

Anything the batched form does not express raises :class:`Unbatchable` (control flow
on a value that differs between iterations, a vector carried from one to the next, a
store into SMEM, ...): what the attempt recorded is taken back and the loop goes on
one iteration at a time, so the records are the same either way (the tests compare
them: ``TPUSIM_LOOPS=each`` forces the per-iteration form)."""

import bisect
import os

import numpy as np

from ._views import RefV, Shaped

#: Off with ``TPUSIM_LOOPS=each`` (every iteration evaluated on its own). With
#: ``TPUSIM_LOOPS=check`` every device is recorded both ways and the records compared
#: (``_plan.Plan._device``; the tests' check that batching changes nothing).
ENABLED = os.environ.get("TPUSIM_LOOPS", "") != "each"
CHECK = os.environ.get("TPUSIM_LOOPS", "") == "check"

#: Loops recorded batched, and attempts taken back (per process; the tests read them).
STATS = {"batched": 0, "taken_back": 0}

#: The fewest iterations worth a batched attempt (the first two always run alone);
#: the comparison batches any loop it can, to compare as many as it can.
MIN_ITERATIONS = 3 if CHECK else 6


class Unbatchable(BaseException):
    """What the batched form cannot express: the loop goes on per iteration. A
    BaseException, so that no rule's ``except Exception`` turns it into a kernel error."""


def _refuse(*_, **__):
    raise Unbatchable()


class Batched:
    """A scalar whose value differs between the batched iterations: `vals[j]` at the
    j-th of them. Any use the batched form does not know (numpy, ``int``, arithmetic)
    raises Unbatchable."""

    __slots__ = ("vals",)
    shape = ()

    def __init__(self, vals):
        self.vals = vals

    @property
    def dtype(self):
        return self.vals.dtype

    __array__ = __int__ = __index__ = __bool__ = __float__ = __len__ = __iter__ = _refuse
    __hash__ = None


for _name in (
    "add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod pow rpow neg pos abs invert "
    "and rand or ror xor rxor lshift rlshift rshift rrshift lt le gt ge eq ne getitem format str repr"
).split():
    setattr(Batched, f"__{_name}__", _refuse)


class PerIter:
    """A record field's value at each batched iteration."""

    __slots__ = ("vals",)

    def __init__(self, vals):
        self.vals = vals

    def __repr__(self):  # the budget measures records' text: one iteration's
        return repr(self.vals[0])


class BView(Shaped):
    """A ref indexed by Batched scalars: per dimension of its buffer, as a RefV's
    dims, but a start or index may be an array (its value at each iteration)."""

    __slots__ = ("buf", "dims", "barrier_n", "n", "_views")

    def __init__(self, buf, dims, barrier_n, n):
        self.buf, self.dims, self.barrier_n, self.n = buf, tuple(dims), barrier_n, n
        self._views = None

    @property
    def views(self):
        """The view at each iteration (RefVs)."""
        if self._views is None:
            self._views = [RefV(self.buf, [_dim_at(d, j) for d in self.dims], self.barrier_n) for j in range(self.n)]
        return self._views

    def steps(self):
        """Per iteration, the RefV's ``steps`` (the same rule, on every iteration at
        once), or None where an iteration has none."""
        got = _steps(self.buf, self.dims, self.n)
        if got is None:
            got = [v.steps() for v in self.views]
            if any(g is None for g in got):
                return None
        return got


def _dim_at(d, j):
    if type(d) is tuple:
        return tuple(int(x[j]) if type(x) is np.ndarray else x for x in d)
    return int(d[j]) if type(d) is np.ndarray else d


def _steps(buf, dims, n):
    """``RefV.steps`` of every iteration, where they all take the same branches."""
    if buf.aliased():
        return None
    shape = buf.shape
    lead = []
    i = 0
    while i < len(dims) and type(dims[i]) is not tuple:
        lead.append(dims[i])
        i += 1
    run = None
    if i < len(dims):
        s, m, st = dims[i]
        full = (s == 0) & (m == shape[i]) & (st == 1)
        if type(full) is np.ndarray:
            if full.all():
                full = True
            elif full.any():
                return None
            else:
                full = False
        if not full:
            if st != 1:
                return None
            run = (s, m)
        i += 1
    for j in range(i, len(dims)):
        d = dims[j]
        if not (type(d) is tuple and np.all(d[0] == 0) and d[1] == shape[j] and d[2] == 1):
            return None
    cols = [x.tolist() if type(x) is np.ndarray else [int(x)] * n for x in lead]
    if run is not None:
        cols.append(run[0].tolist() if type(run[0]) is np.ndarray else [int(run[0])] * n)
        m = int(run[1])
    out = []
    for vals in zip(*cols) if cols else [()] * n:
        row = [[0, v, 0] for v in (vals[:-1] if run is not None else vals)]
        if run is not None:
            row.append([1, vals[-1], m])
        out.append(row)
    return out


def _ints(x, n):
    """An index as an int, or an int64 array of its value at each iteration."""
    if type(x) is Batched:
        v = x.vals.astype(np.int64)
        return int(v[0]) if (v == v[0]).all() else v
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)
    a = np.asarray(x)
    if a.shape != () or a.dtype.kind not in "iu":
        raise Unbatchable()
    return int(a)


def index(buf, dims, idx, n):
    """``_jaxpr.apply_indexer`` (with its bounds check) on every iteration at once:
    the new dims (an index out of bounds anywhere: Unbatchable, so that the
    per-iteration form records it)."""
    from jax._src.state import indexing

    if not isinstance(idx, indexing.NDIndexer) or idx.int_indexer_shape not in ((), None):
        raise Unbatchable()
    dims = list(dims)
    vis = [i for i, d in enumerate(dims) if type(d) is tuple]
    if len(idx.indices) != len(vis):
        raise Unbatchable()
    for j, ix in zip(vis, idx.indices):
        start, size, stride = dims[j]
        if isinstance(ix, indexing.Slice):
            s = _ints(ix.start, n)
            m = _ints(ix.size, n)
            st = int(ix.stride)
            if type(m) is not int or np.any(s < 0) or m < 0 or (m > 0 and np.any(s + (m - 1) * st >= size)):
                raise Unbatchable()
            dims[j] = (start + s * stride, m, stride * st)
        else:
            i = _ints(ix, n)
            if np.any(i < 0) or np.any(i >= size):
                raise Unbatchable()
            dims[j] = start + i * stride
    return dims


def has_batched(xs):
    for x in xs:
        if type(x) is Batched:
            return True
    return False


def collapse(vals):
    """`vals` as a Batched, or its one value when every iteration has the same."""
    if vals.shape and (vals == vals[0]).all() and (vals.dtype.kind != "f" or not np.isnan(vals).any()):
        return np.asarray(vals[0])
    return Batched(vals)


def concrete(v):
    """A Batched scalar's one value when it is the same at every iteration, else
    Unbatchable (control flow, a size, a device: what decides a record's shape)."""
    if type(v) is not Batched:
        return v
    got = collapse(v.vals)
    if type(got) is Batched:
        raise Unbatchable()
    return got


def at(v, j):
    """Value `v` (Batched or not) at batched iteration `j`."""
    return v.vals[j] if type(v) is Batched else v


def per_iter(vals):
    """A field's values at each iteration: one value when they are all equal."""
    first = vals[0]
    for v in vals:
        if v != first:
            return PerIter(vals)
    return first


def subst(x, j):
    """`x` with each PerIter in it replaced by its value at iteration `j`."""
    return _at_iteration(x)(j)


def varies(x):
    """Whether `x` holds a PerIter."""
    t = type(x)
    if t is PerIter:
        return True
    if t is list or t is tuple:
        return any(varies(e) for e in x)
    if t is dict:
        return any(varies(e) for e in x.values())
    return False


# Scalar primitives that act elementwise: on a Batched scalar, on every iteration's value.
ELEMENTWISE = frozenset(
    "add sub mul div rem neg max min abs sign eq ne lt le gt ge and or xor not shift_left "
    "shift_right_arithmetic shift_right_logical select_n convert_element_type clamp integer_pow "
    "square floor ceil round sqrt exp log pow tanh logistic".split()
)

# Scalar primitives that give their one operand back (on a scalar).
PASS = frozenset(
    "copy copy_p optimization_barrier multiple_of pvary reduce_precision reshard stop_gradient "
    "reshape squeeze expand_dims broadcast_in_dim".split()
)


def scalar(eqn, ins, rule):
    """A scalar primitive on Batched operands (`rule`: its numpy rule)."""
    name = eqn.primitive.name
    if eqn.primitive.multiple_results or len(eqn.outvars) != 1 or eqn.outvars[0].aval.shape != ():
        raise Unbatchable()
    if name in PASS and len(ins) == 1:
        return ins[0]
    if name not in ELEMENTWISE or rule is None:
        raise Unbatchable()
    args = []
    n = None
    for x in ins:
        if type(x) is Batched:
            args.append(x.vals)
            n = len(x.vals)
        else:
            a = np.asarray(x)
            if a.shape != ():
                raise Unbatchable()
            args.append(a)
    try:
        out = np.asarray(rule(*args, **eqn.params))
    except Exception:  # the per-iteration form says what is wrong
        raise Unbatchable() from None
    if out.shape != (n,):
        raise Unbatchable()
    dt = eqn.outvars[0].aval.dtype
    if out.dtype != dt:
        out = out.astype(dt)
    return collapse(out)


class Batch:
    """A batched body being recorded on a point: where its values and DMA ids start,
    how many iterations it stands for, and the values from before it that it used
    (their uses count once per iteration)."""

    def __init__(self, p, n):
        self.n = n
        self.start = len(p.ops)
        self.nv0 = p.nvalues
        self.nd0 = getattr(p, "ndesc", 0)
        self.syms0 = len(p.syms)
        self.used = []  # Syms from before the body, once per use

    def outer(self, v):
        """Whether Sym `v` was made before the body."""
        return v.id is None or v.id < self.nv0

    def use(self, v):
        v.uses += 1
        if self.outer(v):
            self.used.append(v)


# Record ops whose fields name values (shifted per iteration) or DMA descriptors.
_VALUE_FIELDS = {"compute": ("id", "args"), "load": ("id",), "const": ("id",), "full": ("id",), "store": ("src",)}
_DESC_OPS = frozenset(("remote_copy", "local_copy", "start", "wait", "wait_send", "wait_recv"))
_PLAIN_OPS = frozenset(
    ("iter", "mark", "fill", "copy", "accumulate", "error", "dma_wait", "signal", "sem_wait", "sem_read")
)


class Template:
    """The records of a batched body, and how to make each iteration's copy.

    What changes between iterations is worked out once per record here, not at every
    copy: which of its value ids are the body's own (shifted by a multiple of the
    body's count), and, for a field holding a PerIter, a function of the iteration
    that builds only the parts that hold one (a long loop's copies are most of a
    first call's recording)."""

    def __init__(self, batch, p, ops):
        self.batch = batch
        self.nvb = p.nvalues - batch.nv0
        self.ndb = getattr(p, "ndesc", 0) - batch.nd0
        base, dbase = batch.nv0, batch.nd0
        self.makers = []
        for r in ops:
            if r.get("dead"):
                continue
            op = r["op"]
            ids = _VALUE_FIELDS.get(op, ())
            if op == "store" and type(r.get("src")) is not int:
                ids = ()
            desc = op in _DESC_OPS
            if not ids and not desc and op not in _PLAIN_OPS:
                raise Unbatchable()
            # A record naming no value nor DMA and holding no PerIter is the same at every
            # iteration (one object for all: nothing marks such a record dead).
            same = not ids and not desc and not any(varies(v) for v in r.values())
            # The body's own value ids: the fields that are one (shifted), and the lists
            # that hold one (their items from `base` on shifted).
            shifted = tuple(k for k in ids if type(r[k]) is not list and r[k] >= base)
            lists = tuple(k for k in ids if type(r[k]) is list and any(a >= base for a in r[k]))
            desc = desc and r["id"] >= dbase
            var = tuple((k, _at_iteration(v)) for k, v in r.items() if varies(v))
            self.makers.append((r, same, shifted, lists, desc, var))
        self.records = [m[0] for m in self.makers]
        self.native = all(_native_copies(r) for r in self.records)

    def instance(self, j):
        """The records of batched iteration `j`."""
        return [self.record(k, j) for k in range(len(self.makers))]

    def record(self, k, j):
        """The `k`-th record of batched iteration `j`."""
        r, same, shifted, lists, desc, var = self.makers[k]
        if same:
            return r  # nothing in it changes: the one record serves every iteration
        base, by = self.batch.nv0, j * self.nvb
        d = r.copy()
        for k in shifted:
            d[k] = r[k] + by
        for k in lists:
            d[k] = [a + by if a >= base else a for a in r[k]]
        if desc:
            d["id"] += j * self.ndb
        for k, f in var:
            d[k] = f(j)
        return d


def _native_copies(r):
    """Whether the native reader makes record `r`'s copies (``src/records.rs``,
    ``Copies``): every field that differs between iterations is a PerIter as a whole,
    or an ``iter`` record's iteration counts are."""
    for k, v in r.items():
        if type(v) is PerIter or not varies(v):
            continue
        if k != "loops" or r["op"] != "iter":
            return False
        if any(varies(site) for site, _ in v):
            return False
    return True


class Copies:
    """A batched body's records standing, in a point's records, for their copies at its
    first `n` iterations: the native reader makes the copies (``src/records.rs``), as
    ``Template.instance`` would (a long loop's copies were most of a first call's
    recording). Python reads them through :func:`flat` and :func:`expand`.

    The copy at iteration `j` has each value id from `base` on shifted by `j * by`,
    each DMA descriptor id from `dbase` on by `j * dby`, and each PerIter replaced by
    its value at `j`."""

    __slots__ = ("template", "n", "records", "base", "by", "dbase", "dby")

    def __init__(self, template):
        self.template = template
        self.n = 0
        self.records = template.records
        self.base, self.by = template.batch.nv0, template.nvb
        self.dbase, self.dby = template.batch.nd0, template.ndb

    def __repr__(self):
        return f"Copies(n={self.n}, records={len(self.records)})"


def expand(ops):
    """A point's records with each :class:`Copies` replaced by its copies."""
    if not any(type(r) is Copies for r in ops):
        return ops
    out = []
    for r in ops:
        if type(r) is Copies:
            for j in range(r.n):
                out.extend(r.template.instance(j))
        else:
            out.append(r)
    return out


class _Flat:
    """A point's records as one sequence, :class:`Copies` counted as their copies (a
    copy made only when its item is asked for)."""

    def __init__(self, ops):
        self.ops = ops
        self.ends = []
        end = 0
        for r in ops:
            end += r.n * len(r.records) if type(r) is Copies else 1
            self.ends.append(end)

    def __len__(self):
        return self.ends[-1] if self.ends else 0

    def __getitem__(self, i):
        at = bisect.bisect_right(self.ends, i)
        r = self.ops[at]
        if type(r) is not Copies:
            return r
        j, k = divmod(i - (self.ends[at - 1] if at else 0), len(r.records))
        return r.template.record(k, j)


def flat(ops):
    """`ops` as a sequence of records (itself when it holds no :class:`Copies`)."""
    if not any(type(r) is Copies for r in ops):
        return ops
    return _Flat(ops)


def records_of(ops):
    """Each record of `ops` for a question every iteration's copy answers alike (a
    :class:`Copies`' body records once, its PerIter fields unresolved)."""
    for r in ops:
        if type(r) is Copies:
            yield from r.records
        else:
            yield r


def _at_iteration(x):
    """A function of the iteration `j` giving `x` with each PerIter in it replaced by its
    value at `j` (``subst``, made once for many iterations); the parts that hold none
    are `x`'s own, shared."""
    t = type(x)
    if t is PerIter:
        return x.vals.__getitem__
    if t is dict:
        parts = [(k, _at_iteration(e) if varies(e) else None, e) for k, e in x.items()]
        return lambda j: {k: e if f is None else f(j) for k, f, e in parts}
    if t is list or t is tuple:
        parts = [(_at_iteration(e) if varies(e) else None, e) for e in x]
        if t is list:
            return lambda j: [e if f is None else f(j) for f, e in parts]
        return lambda j: tuple(e if f is None else f(j) for f, e in parts)
    return lambda j: x


def drop_unused(batch, p):
    """What ``Point.drop_unused`` will do to the body's values, done to the template:
    a body value nothing used is used by nothing after the body either. One that would
    take back a use of a value from before the body is not batched (that use must count
    until the call ends)."""
    body = p.syms[batch.syms0 :]
    work = [v for v in body if v.uses == 0]
    while work:
        v = work.pop()
        if v.rec is None or v.rec.get("dead"):
            continue
        v.rec["dead"] = True
        for a in v.args:
            if hasattr(a, "uses") and hasattr(a, "rec"):
                if batch.outer(a):
                    raise Unbatchable()
                a.uses -= 1
                if a.uses == 0:
                    work.append(a)


def _carry_in(c1, c2, n):
    """The carried value at each of `n` iterations after two whose inputs were `c1`,
    `c2`: the same object (a value, a ref), or a scalar assumed to step by `c2 - c1`
    (checked against what the body carries out)."""
    if c1 is c2:
        return c2
    a1, a2 = np.asarray(c1), np.asarray(c2)
    if isinstance(c1, (int, bool)) and a1.shape == a2.shape == () and a1 == a1.astype(a2.dtype):
        a1 = a1.astype(a2.dtype)  # a literal (JAX's typed int) carried into the first
    if a1.shape != () or a2.shape != () or a1.dtype != a2.dtype or a2.dtype.kind not in "iub":
        raise Unbatchable()
    if a1 == a2:
        return c2
    if a2.dtype.kind == "b":
        raise Unbatchable()
    step = a2 - a1
    return Batched((a2 + np.arange(n, dtype=a2.dtype) * step).astype(a2.dtype))


def _same_scalar(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape == () and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _check_carry(cin, cout):
    """The value carried out of the last iteration, when what each iteration carries
    out is what the next was assumed to get, else Unbatchable."""
    if type(cin) is Batched:
        if type(cout) is not Batched or cout.vals.dtype != cin.vals.dtype:
            raise Unbatchable()
        if not np.array_equal(cout.vals[:-1], cin.vals[1:]):
            raise Unbatchable()
        return np.asarray(cout.vals[-1])
    if cout is cin:
        return cout
    if type(cout) is Batched or not hasattr(cin, "dtype") or not _same_scalar(cin, cout):
        raise Unbatchable()
    return cout


def run_scan(ev, jaxpr, where, consts, seen, xs, order, split, budget):
    """The iterations of a scan after the first two, whose carried inputs were
    `seen` (the second's and the third's), recorded as one (`order`: the index of each in `xs`; `split`: an
    iteration's outputs as carry and per-iteration outputs): the carry out of the last
    and each one's outputs, or None (nothing recorded) when the body is not batchable."""
    p = ev.p
    n = len(order)
    c1, c2 = seen
    first = 2
    try:
        carry = [_carry_in(a, b, n) for a, b in zip(c1, c2)]
        x_b = []
        for x in xs:
            a = np.asarray(x)
            if a.ndim != 1:
                raise Unbatchable()
            x_b.append(collapse(a[np.asarray(order)]))
    except Unbatchable as e:
        _debug(e)
        STATS["taken_back"] += 1
        return None
    saved = (len(p.ops), p.nvalues, getattr(p, "ndesc", None), len(p.syms), p._recorded_in, p._communicated)
    saved += (p._marks, p.loops, p.nbarrier, len(p.prints), ev.plan.budget.eqns, ev.plan.budget.iterations)
    batch = p.batch = Batch(p, n)
    try:
        with p.iteration(where.site, PerIter(list(range(first, first + n)))):
            out = ev.run_closed(jaxpr, [*consts, *carry, *x_b])
        cout, yout = split(out)
        final = [_check_carry(a, b) for a, b in zip(carry, cout)]
        ys = []
        for y in yout:
            if type(y) is Batched:
                ys.append([np.asarray(v) for v in y.vals])
            elif isinstance(y, (np.ndarray, np.generic)):
                ys.append([y] * n)
            else:
                raise Unbatchable()
        if p.nbarrier != saved[8] or len(p.prints) != saved[9]:
            raise Unbatchable()
        drop_unused(batch, p)
        template = Template(batch, p, p.ops[batch.start :])
    except (Exception, Unbatchable) as e:
        _debug(e)
        # Taken back: the loop goes on per iteration, and says what is wrong if anything is.
        del p.ops[saved[0] :]
        p.nvalues = saved[1]
        if saved[2] is None:
            if hasattr(p, "ndesc"):
                del p.ndesc
        else:
            p.ndesc = saved[2]
        del p.syms[saved[3] :]
        p._recorded_in, p._communicated, p._marks, p.loops = saved[4], saved[5], saved[6], saved[7]
        ev.plan.budget.eqns, ev.plan.budget.iterations = saved[10], saved[11]
        del p.prints[saved[9] :]
        p.nbarrier = saved[8]
        for v in batch.used:
            v.uses -= 1
        STATS["taken_back"] += 1
        return None
    finally:
        p.batch = None
    # The template's records, once per iteration, counted as per-iteration evaluation counts them.
    eqns = ev.plan.budget.eqns - saved[10]
    del p.ops[batch.start :]
    del p.syms[batch.syms0 :]
    copies = Copies(template) if template.native else None
    if copies is not None:
        p.ops.append(copies)
    for j in range(n):
        if copies is None:
            p.ops.extend(template.instance(j))
        else:
            copies.n = j + 1  # what the budget measures so far
        if j:
            ev.plan.budget.eqns += eqns
        budget.iterated()
    p.nvalues = batch.nv0 + n * template.nvb
    if template.ndb:
        p.ndesc = batch.nd0 + n * template.ndb
    p._marks = saved[6] + n * (p._marks - saved[6])
    p._recorded_in = subst(p._recorded_in, n - 1)
    for v in batch.used:
        v.uses += n - 1
    STATS["batched"] += 1
    return final, [list(col) for col in zip(*ys)] if ys else [[] for _ in range(n)]


def first_difference(want, got):
    """Where two devices' recordings (lists of grid points' records) first differ."""
    for g, (a, b) in enumerate(zip(want, got)):
        for k, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return f"grid point {g}, record {k}: {x} per iteration, {y} batched"
        if len(a) != len(b):
            return f"grid point {g}: {len(a)} records per iteration, {len(b)} batched"
    return f"{len(want)} grid points per iteration, {len(got)} batched"


def _debug(e):
    if os.environ.get("TPUSIM_LOOPS_DEBUG"):
        import traceback

        traceback.print_exception(e)
