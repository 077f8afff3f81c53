"""What a traced program's results depend on: its jaxpr read backwards from
its outputs. The engine asks it of a study's functions (which event log
arrays and sample components a finish reads, which inputs a kernel needs)
without running them."""


def live_part(jaxpr) -> tuple[list, set]:
    """The equations of `jaxpr` its outputs depend on (or that have effects:
    they count as reading all their inputs), in order, and the variables
    (not literals) they and the outputs read."""
    variables = {v for v in jaxpr.outvars if not _literal(v)}
    kept = []
    for eqn in reversed(jaxpr.eqns):
        if eqn.effects or any(v in variables for v in eqn.outvars):
            kept.append(eqn)
            variables.update(v for v in eqn.invars if not _literal(v))
    return kept[::-1], variables


def _literal(v) -> bool:
    # A literal holds its value (`val`); not isinstance(v, jax.extend.core.Literal):
    # importing jax.extend imports Pallas (0.3 s), which a run of the lanes never needs.
    return hasattr(v, "val")
