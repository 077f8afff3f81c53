"""One explicit Runge-Kutta step of a diffrax solver's Butcher tableau, unrolled.

diffrax's `solver.step` runs the stages in a loop (`eqxi.while_loop`): under
`jax.vmap` every stage is then a lockstep loop iteration, and its generic stage
loop indexes a stored array of stages. Here the stages are unrolled, with the
tableau's coefficients as constants: the same step, to rounding, in straight-line
code (no loop to wait on).
"""


def explicit_step(tableau, field, t0, t1, y0, f0):
    """One step of `tableau` (a diffrax ButcherTableau) from (t0, y0) to t1.

    `field(t, y)` is the vector field and f0 its value at (t0, y0) (the first
    stage). Returns the new state, the embedded error estimate, and the vector
    field at the new state (the last stage, for first-same-as-last tableaus).
    Any layout of states that broadcasts with the times works: a vector per
    point, or components by lanes.
    """
    h = t1 - t0

    def combine(weights, ks):
        return sum(float(w) * k for w, k in zip(weights, ks, strict=True) if w != 0)

    ks = [f0]
    for c, a in zip(tableau.c, tableau.a_lower, strict=True):
        ks.append(field(t0 + float(c) * h, y0 + h * combine(a, ks)))
    y1 = y0 + h * combine(tableau.b_sol, ks)
    error = h * combine(tableau.b_error, ks)
    f1 = ks[-1] if tableau.fsal else field(t1, y1)
    return y1, error, f1
