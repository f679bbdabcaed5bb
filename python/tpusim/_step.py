"""``tpusim.trace_step(label)``: a step mark in a Pallas kernel body, the Python
analogue of the Rust kernels' ``pl.trace_step``: the step table gets a row labelled
`label` once every device that reaches the mark passed it. It is a JAX primitive with
no operands or results and an effect of its own (so that no pass removes it); tpusim's
evaluator turns it into a mark, and everywhere else (JAX's interpret modes, jit,
lowering to a real TPU) it does nothing."""

from jax._src import core as jax_core
from jax._src import effects
from jax.interpreters import mlir


class StepMark(effects.Effect):
    """The effect of a step mark: it only marks, so it is allowed everywhere."""

    def __str__(self):
        return "tpusim.trace_step"


_EFFECT = StepMark()
for _allowed in (
    effects.lowerable_effects,
    effects.control_flow_allowed_effects,
    effects.custom_derivatives_allowed_effects,
    effects.remat_allowed_effects,
):
    _allowed.add_type(StepMark)

trace_step_p = jax_core.Primitive("tpusim_trace_step")
trace_step_p.multiple_results = True
trace_step_p.def_impl(lambda *, label: [])
trace_step_p.def_effectful_abstract_eval(lambda *, label: ([], {_EFFECT}))
mlir.register_lowering(trace_step_p, lambda ctx, *, label: [])

try:  # A real TPU: Mosaic lowers each primitive by a rule; a mark lowers to nothing.
    from jax._src.pallas.mosaic import lowering as _mosaic

    for _table in _mosaic.lowering_rules.values():
        _table[trace_step_p] = lambda ctx, *, label: []
except (ImportError, AttributeError):  # pragma: no cover - a JAX without it
    pass


def trace_step(label):
    """Marks the end of a step of the kernel for the step table (`tpusim.trace`,
    ``python -m tpusim trace``): a row labelled `label` once every device that
    reaches this mark passed it. Call it in a kernel body; nothing happens outside
    tpusim. A loop iteration that communicates gets a mark of its own without it."""
    trace_step_p.bind(label=str(label))
