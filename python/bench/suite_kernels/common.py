"""What the suite's kernels share: the case description, the mesh axis, barriers and
the ring's neighbours."""

import dataclasses
import math
from typing import Callable

import jax
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

AXIS = "x"
P = jax.sharding.PartitionSpec


@dataclasses.dataclass
class Case:
    """One kernel at one device count and size.

    `kernel` and `reference` are per-device functions for the same `shard_map`
    (`in_specs`, `out_specs` over the 1-D mesh axis `AXIS`); `inputs(rng)` makes the
    global numpy inputs; `in_shapes`/`out_shapes` are the global (shape, dtype)s, known
    without making the data, the main operand (whose bytes per device the size names,
    and the memcpy roof copies) last among the data-movement kernels' inputs; `moved` the bytes one call's DMAs move, all devices
    together (data-movement kernels), else None; `rtol` the largest error allowed,
    relative to the reference's largest magnitude; `blocks` the BlockSpec of every
    input, then of the output, as the pallas_call declares them (scalar-prefetch
    operands as SMEM ones), and `scratch` its scratch_shapes: what a TPU allocates
    for the kernel beyond JAX's arrays (`kernel_bytes`)."""

    kernel: Callable
    reference: Callable
    in_specs: tuple
    out_specs: object
    in_shapes: list
    out_shapes: list
    inputs: Callable
    rtol: float = 0.0
    moved: int | None = None
    blocks: tuple = ()
    scratch: tuple = ()

    def buffer_bytes(self):
        """Inputs and outputs of every device: the global arrays' bytes."""
        return sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d in self.in_shapes + self.out_shapes)

    def jax_bytes(self, p):
        """JAX's arrays of a call on p devices: every device's shard of each input and
        of the output (a replicated input is held once per device)."""
        specs = list(self.in_specs) + [self.out_specs]
        return sum(p * local_bytes(s, d, spec, p) for (s, d), spec in zip(self.in_shapes + self.out_shapes, specs))

    def kernel_bytes(self, p):
        """The kernel's own buffers on p devices, as it declares them: the VMEM (or
        SMEM) copy of every operand whose BlockSpec puts it there whole (one device's
        shard), and its VMEM and SMEM scratch (semaphores hold no data). HBM (`pl.ANY`)
        operands are JAX's arrays, read and written in place."""
        if len(self.blocks) != len(self.in_shapes) + len(self.out_shapes):
            raise ValueError(f"{len(self.blocks)} BlockSpecs for {len(self.in_shapes) + len(self.out_shapes)} operands")
        specs = list(self.in_specs) + [self.out_specs]
        per_device = 0
        for (shape, dtype), spec, block in zip(self.in_shapes + self.out_shapes, specs, self.blocks):
            if block.block_shape is not None:
                raise ValueError("only whole-operand blocks are counted")
            if str(block.memory_space) in ON_CHIP:
                per_device += local_bytes(shape, dtype, spec, p)
        for ref in self.scratch:
            if str(getattr(ref, "memory_space", None)) in ON_CHIP:
                per_device += math.prod(ref.shape) * np.dtype(ref.dtype).itemsize
        return p * per_device


ON_CHIP = ("vmem", "smem")


def local_bytes(shape, dtype, spec, p):
    """Bytes of one device's shard of a global (shape, dtype) under PartitionSpec `spec`
    over the mesh axis `AXIS` of p devices."""
    dims = [n // p if i < len(spec) and spec[i] == AXIS else n for i, n in enumerate(shape)]
    return math.prod(dims) * np.dtype(dtype).itemsize


def neighbours():
    """This device, its left and its right neighbour on the ring."""
    me = lax.axis_index(AXIS)
    n = lax.axis_size(AXIS)
    return me, lax.rem(me + n - 1, n), lax.rem(me + 1, n)


def signal(sem, device):
    pl.semaphore_signal(sem, 1, device_id=(device,), device_id_type=pl.DeviceIdType.MESH)


def neighbour_barrier(left, right):
    """Both neighbours are in this kernel (so writing into their scratch is safe) once
    it returns; needs the call's `collective_id`."""
    barrier = pltpu.get_barrier_semaphore()
    signal(barrier, left)
    signal(barrier, right)
    pl.semaphore_wait(barrier, 2)


def all_barrier(p):
    """Every device is in this kernel once it returns."""
    barrier = pltpu.get_barrier_semaphore()
    me = lax.axis_index(AXIS)
    for d in range(p):

        @pl.when(me != d)
        def _():
            signal(barrier, d)

    pl.semaphore_wait(barrier, p - 1)


COLLECTIVE = pltpu.CompilerParams(collective_id=0)


def rows_for(size_bytes, row_bytes, multiple=8):
    """Rows of `row_bytes` making about `size_bytes`, a multiple of `multiple`, at least one multiple."""
    return max(multiple, size_bytes // row_bytes // multiple * multiple)
