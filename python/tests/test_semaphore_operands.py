"""Semaphore-typed operands and outputs (``memory_space=pltpu.SEMAPHORE``): a kernel hands
its semaphores on as outputs, with their counts at exit; a later kernel takes them as
operands and starts at those counts. JAX's interpret mode has no semaphore outputs, so the
references here are exact counts the kernels themselves read (``pl.semaphore_read``)."""

import jax
import numpy as np
import pytest
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import tpusim

P = jax.sharding.PartitionSpec
REGULAR = pltpu.SemaphoreType.REGULAR
SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)
VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)
N = 4


def mesh():
    return jax.make_mesh((N,), ("x",))


def make(shape=()):
    """A kernel that hands on semaphores of `shape`, element i signalled (device + 1) * (i + 1) times."""

    def kernel(sem_ref):
        d = lax.axis_index("x")
        if not shape:
            pl.semaphore_signal(sem_ref, d + 1)
        for i in range(int(np.prod(shape)) if shape else 0):
            pl.semaphore_signal(sem_ref.at[i], (d + 1) * (i + 1))

    return pl.pallas_call(kernel, in_specs=[], out_specs=SEM, out_shape=REGULAR(shape))


def take(shape=(), consume=True, plus=0):
    """A kernel that reads the counts of the semaphores it is given into its output (and,
    with `consume`, waits them down to zero: `plus` more than `make` signalled)."""
    n = int(np.prod(shape)) if shape else 1

    def kernel(sem_ref, out_ref):
        d = lax.axis_index("x")
        for i in range(n):
            s = sem_ref if not shape else sem_ref.at[i]
            out_ref[i] = jnp.broadcast_to(pl.semaphore_read(s), (8, 128))
            if consume:
                pl.semaphore_wait(s, (d + 1) * (i + 1) + plus)

    return pl.pallas_call(
        kernel, in_specs=[SEM], out_specs=VMEM, out_shape=jax.ShapeDtypeStruct((n, 8, 128), jnp.int32)
    )


def counts(got):
    """Per device, the counts the reading kernel wrote (each broadcast over a tile)."""
    tiles = got.reshape(N, -1, 8, 128)
    assert (tiles == tiles[:, :, :1, :1]).all()
    return tiles[:, :, 0, 0]


def expected(shape=()):
    n = int(np.prod(shape)) if shape else 1
    return np.array([[(d + 1) * (i + 1) for i in range(n)] for d in range(N)], np.int32)


def program(shape=(), consume=True):
    def body(x):
        return take(shape, consume)(make(shape)()) + x[:1, :1, :1] * 0

    return jax.jit(jax.shard_map(body, mesh=mesh(), in_specs=P("x"), out_specs=P("x"), check_vma=False))


def xs():
    return jax.device_put(jnp.zeros((N, 8, 128), jnp.int32), jax.NamedSharding(mesh(), P("x")))


@pytest.mark.parametrize("shape", [(), (3,)])
def test_a_semaphore_output_carries_its_count_to_the_next_kernel(shape):
    with tpusim.simulate(backend="cpu"):
        got = np.asarray(program(shape)(xs()))
    np.testing.assert_array_equal(counts(got), expected(shape))
    reports = tpusim.check(program(shape), xs(), schedules=30)
    assert len(reports) == 2 and reports.clean, str(reports)


def test_a_count_left_on_a_semaphore_operand_is_not_zero_at_exit():
    # The handing-on kernel's count is its output (clean); the kernel that is given it
    # and leaves it is not.
    made, taken = tpusim.check(program((), consume=False), xs(), schedules=10)
    assert made.clean, str(made)
    assert taken.kinds() == ["semaphore not zero at exit"], str(taken)
    assert "sem_ref" in str(taken)


def test_a_semaphore_passed_through_with_input_output_aliases_keeps_counting():
    def add_one(sem_ref, out_ref):
        pl.semaphore_signal(out_ref, 1)

    bump = pl.pallas_call(add_one, in_specs=[SEM], out_specs=SEM, out_shape=REGULAR(()), input_output_aliases={0: 0})

    def body(x):
        return take((), plus=2)(bump(bump(make(())()))) + x[:1, :1, :1] * 0

    f = jax.jit(jax.shard_map(body, mesh=mesh(), in_specs=P("x"), out_specs=P("x"), check_vma=False))
    with tpusim.simulate(backend="cpu"):
        got = np.asarray(f(xs()))
    np.testing.assert_array_equal(counts(got), expected(()) + 2)
    reports = tpusim.check(f, xs(), schedules=10)
    assert len(reports) == 4 and reports.clean, str(reports)
