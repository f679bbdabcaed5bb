"""Run while tracing: a kernel whose control flow, indices, sizes or device ids depend
on values it computes itself (an SMEM element a DMA or a vector store wrote, a reduced
vector, a semaphore's value) is traced device by device until it needs such a value.
What is recorded so far is scheduled and run by the Rust side (``tpusim::run::steer``),
the value is read back where the read stands in that schedule, and tracing goes on.

A question is a ``read`` record (the Rust ``OpKind::Read``: an access the verifier
sees) followed by a pause: each device is traced on a thread of its own, which waits
there for the answer (one device runs at a time). Nothing recorded before a question is
taken back afterwards (a question freezes the records before it): the Rust side has
scheduled them.

SMEM in such a kernel is memory of the simulated devices (its scratch is a Rust
allocation too): scalar stores are recorded as fills, and what tracing knows of an
element is the value this device last stored there; a wait of the device, a DMA it
starts into the buffer or a vector it stores there makes the buffer unknown, and the
next read asks for the whole buffer (one pause), recording an access of the elements it
reads only.
"""

import queue
import threading

import numpy as np


class NeedsSteering(Exception):
    """Raised while a plan is made ahead of the run: the kernel needs a value it
    computes itself (`why`), so it is planned again to be traced while it runs."""


def from_words(words, dtype, shape):
    """Elements in the executors' word form (one 32-bit word each, ``DType::bits_of``)
    as a numpy array of `dtype` and `shape`."""
    w = np.asarray(words, dtype=np.uint32).reshape(-1)
    dt = np.dtype(dtype)
    if dt.itemsize == 4:
        a = w.view(dt)
    elif dt.itemsize == 2:
        a = w.astype(np.uint16).view(dt)
    elif dt == np.bool_:
        a = w != 0
    else:  # 1-byte integers: the low byte, with its sign for int8
        a = w.astype(np.uint8).view(dt)
    return a.reshape(shape)


class Stop(BaseException):
    """Raised in a device's trace that is no longer wanted (its run ended elsewhere)."""


class DeviceTrace:
    """One device's trace while the program runs: its grid points evaluated in order on
    a thread of its own, which stops at each question until it is answered (one device
    runs at a time: the caller waits while it does)."""

    def __init__(self, plan, device, points):
        self.plan, self.device, self.points = plan, device, points
        self.g = 0
        self.ops = [[] for _ in points]
        self.done = not points
        self._answer = queue.SimpleQueue()
        self._event = queue.SimpleQueue()
        self._thread = None

    # -- the caller's side

    def start(self, changed):
        """Traces until the first question or the end."""
        if self.done:
            return
        self._thread = threading.Thread(target=self._trace, name=f"tpusim trace {self.device}", daemon=True)
        self._thread.start()
        self._wait(changed)

    def answer(self, words, changed):
        """The last question's answer: traces on until the next or the end."""
        self._answer.put(words)
        self._wait(changed)

    def stop(self):
        """Ends a trace that waits for an answer no one will give."""
        if self._thread is not None and self._thread.is_alive():
            self._answer.put(None)
            self._thread.join()

    def _wait(self, changed):
        first = self.g
        kind, err = self._event.get()
        changed.extend((self.device, g) for g in range(first, min(self.g, len(self.points) - 1) + 1))
        if kind == "error":
            self.done = True
            raise err
        if kind == "done":
            self.done = True

    # -- the trace's own thread

    def _trace(self):
        try:
            for g in range(len(self.points)):
                self.g = g
                self.ops[g] = self.plan.point(self.device, g, self.points, self)
                self.plan.budget.called(self.ops[g])
            self.g = len(self.points) - 1
            self._event.put(("done", None))
        except Stop:
            pass
        except BaseException as e:  # raised where the caller waits
            self._event.put(("error", e))

    def _ask(self, p, where, **read):
        """Records the read, hands over the records so far and waits for the answer's words."""
        p.record("read", where.site, **read)
        p.frozen = len(p.ops)  # nothing recorded before it is taken back now
        self.ops[self.g] = [r for r in p.ops if not r.get("dead")]
        self._event.put(("pause", None))
        words = self._answer.get()
        if words is None:
            raise Stop()
        return words

    def value(self, v, where):
        """The value of `v` (a Sym) as this device computes it."""
        if v.value is None:
            if v.id is None:  # a poisoned value (its mistake is recorded): no data
                return np.zeros(v.shape, v.dtype)
            v.uses += 1
            words = self._ask(where.point, where, value=v.id)
            v.value = from_words(words, v.dtype, v.shape)
        return v.value

    def fetch(self, p, where, src, fetch, buf):
        """The whole of SMEM buffer `buf` of this device, as it is where the read of
        `src` stands; `fetch` is the buffer's path."""
        words = self._ask(p, where, src=src, fetch=fetch)
        root = buf.root
        root.smem[p.device][...] = from_words(words, root.dtype, root.shape)
        root.known[p.device][...] = True


class Tracer:
    """A call's trace while it runs, for ``tpusim::run::steer`` (through the native
    ``PyTracer``): ``update`` hands over what changed, ``answer`` what a read found,
    ``close`` ends the devices' traces still waiting."""

    def __init__(self, plan):
        self.plan = plan
        points = plan.grid_points()
        self.devices = [DeviceTrace(plan, d, points) for d in range(plan.P)]
        self.changed = []
        self.constants_sent = 0
        try:
            for t in self.devices:
                t.start(self.changed)
        except BaseException:
            self.close()
            raise

    def update(self):
        """(the scratch list, the grid points whose records changed as
        ``(device, g, ops)``, the constants made since the last update, whether each
        device's trace goes on)."""
        changed = sorted(set(self.changed))
        self.changed = []
        points = [(d, g, self.devices[d].ops[g]) for d, g in changed]
        constants = self.plan.constants[self.constants_sent :]
        self.constants_sent = len(self.plan.constants)
        return (list(self.plan.scratch), points, list(constants), [not t.done for t in self.devices])

    def answer(self, device, words):
        """Device `device`'s last read found `words`: trace on."""
        try:
            self.devices[device].answer(np.asarray(words, dtype=np.uint32), self.changed)
        except BaseException:
            self.close()
            raise

    def close(self):
        for t in self.devices:
            t.stop()


def used_inputs(jaxpr):
    """The positions of the inputs `jaxpr`'s outputs depend on (a loop's condition asks
    only for the values it reads)."""
    jx = getattr(jaxpr, "jaxpr", jaxpr)
    need = {v for v in jx.outvars if not hasattr(v, "val")}
    for eqn in reversed(jx.eqns):
        if any(o in need for o in eqn.outvars):
            need.update(v for v in eqn.invars if not hasattr(v, "val"))
    return [i for i, v in enumerate(jx.invars) if v in need]
