"""Heavy hoop rolling on z = p(x): the constraint-stabilised equations.

Matrosov, Morozov, Pesterev, "Numerical integration of rolling equations using
control-theory approaches", J. Comput. Syst. Sci. Int. 2021, section 3, as
restated in the project's specification (with the sign convention the seed's
derivation needs: h = p(x) - z, grad h pointing from the centre to the contact).

State X = (x, z, theta, x', z', theta', alpha); the contact force (Rx, Rz),
its moment Q and alpha' = U are the "controls" N chosen each step so that the
constraint residuals obey f1'' + 2 lam f1' + lam^2 f1 = 0 and fi' + lam fi = 0.

Two terms of the restated A(X) are taken exactly rather than on the constraint
manifold, where they agree: row 3 gets the coefficient -M (v, mu) of U (the
restatement has 0; (v, mu) = 0 on the manifold), and row 4 uses (grad h, mu)
where the restatement has |grad h| (equal when alpha is the contact angle).
With them, f2, f3 and f4 obey f' = -lam f exactly also off the manifold, so an
initial error decays like exp(-lam t), as the method intends; the seed's claims
about steady residuals are unaffected (the terms vanish there).

The algebra is written out on scalars: the state is a tuple of seven numbers,
and the small vectors and matrices of the method (v = (x', z'), mu = (cos alpha,
sin alpha), chi = (-sin alpha, cos alpha), grad h = (p'(xa), -1), the Hessian
H = diag(p''(xa), 0)) appear through their products alone. Under `jax.vmap`
every operation is then one elementwise operation over the batch's points,
which XLA fuses and vectorises; stacked 2- and 3-vectors made dozens of tiny
kernels per step.
"""

from typing import NamedTuple

import jax.numpy as jnp

from ._profile import d2p, dp, p

# Below this |theta'| (1/s) the energy row is blended into its turning-point limit.
TURNING_RATE = 1e-3


class Contact(NamedTuple):
    """What the vector field and the outputs both need at a state: sin and cos
    of alpha, p' and p'' at the contact point, and the residuals f1..f4. A Heun
    step computes it once per state (the end of one step is the start of the next)."""

    sin: object
    cos: object
    slope: object  # p'(xa) = h_x
    bend: object  # p''(xa) = h_xx
    f: tuple  # (f1, f2, f3, f4)


def contact(X, q, energy0, sin_cos=None) -> Contact:
    """f1..f4: contact, energy, no slip, alpha is the contact angle.
    sin_cos: sin and cos of alpha when the caller has them (default: computed)."""
    x, z, _, xd, zd, thd, alpha = X
    M, r, g = q["mass"], q["radius"], q["gravity"]
    s, c = (jnp.sin(alpha), jnp.cos(alpha)) if sin_cos is None else sin_cos
    xa = x + r * c  # the contact point
    slope, bend = dp(xa, q["a"], q["b"]), d2p(xa, q["a"], q["b"])
    f1 = p(xa, q["a"], q["b"]) - (z + r * s)
    f2 = M * (xd**2 + zd**2) / 2 + M * r**2 * thd**2 / 2 + M * g * z - energy0
    f3 = -xd * s + zd * c + r * thd
    f4 = slope * s + c  # (grad h, chi) with h_z = -1
    return Contact(s, c, slope, bend, (f1, f2, f3, f4))


def with_reciprocals(q):
    """q with 1/M, 1/r and 1/(M r^2), which the vector field multiplies by:
    computed once per point, not in every stage of every step."""
    M, r = q["mass"], q["radius"]
    return q | {"inv_mass": 1 / M, "inv_radius": 1 / r, "inv_inertia": 1 / (M * r**2)}


def residuals(X, q, energy0):
    """f1..f4 of a state given as an array of seven (or a tuple of seven numbers)."""
    return jnp.stack(contact(tuple(X), q, energy0).f)


def controls(X, q, at: Contact):
    """N = (Rx, Rz, Q, U) from A(X) N = -phi, solved in closed form.

    U comes first from the last row (d U = -phi4; d = |grad h|(1 - r/rho) > 0 on
    an admissible track). The remaining 3x3 system is singular where theta' = 0
    (the hoop stops at a turning point): its energy row (x', z', theta') N =
    -lam f2 equals, on the constraint manifold, theta' times the torque relation
    w . N = 0 with w = (r sin alpha, -r cos alpha, 1) (Q is the moment of the
    contact force), and N is continuous through the turning point. So the row
    is divided by theta' smoothly, theta'/(theta'^2 + eps^2), and blended into
    w as theta' -> 0: away from turning points (|theta'| >> eps) this is the
    seed's equation scaled; at them, its continuous limit. Nothing divides by 0.
    """
    _, _, _, xd, zd, thd, _ = X
    M, r, g, lam = q["mass"], q["radius"], q["gravity"], q["stabilization"]
    s, c, h_x, h_xx = at.sin, at.cos, at.slope, at.bend
    f1, f2, f3, f4 = at.f
    v_h_chi = -xd * h_xx * s  # (v, H chi)
    # Exact derivatives of f3 and f4 (see module docstring): (grad h, mu) where the
    # restatement has |grad h|, and the U term of row 3; equal on the manifold.
    d = h_x * c - s - h_xx * s * s * r  # (grad h, mu) - (chi, H chi) r
    row3_u = -M * (xd * c + zd * s)  # -M (v, mu)
    f1_dot = xd * h_x - zd  # (v, grad h)
    phi1 = M * g + M * h_xx * xd * xd + lam**2 * M * f1 + 2 * lam * M * f1_dot
    phi3 = -M * g * c + lam * M * f3
    U = (v_h_chi - lam * f4) / d

    eps2 = TURNING_RATE**2
    # One division each for the blend, the Cramer determinant and U: XLA:CPU
    # gives every division with several users a kernel of its own.
    blend_norm = 1 / (thd**2 + eps2)
    scale = thd * blend_norm
    blend = eps2 * blend_norm
    # Rows (a1, -1, 0), (b1, b2, b3), (c1, c2, c3) of the 3x3 system for (Rx, Rz, Q):
    # the contact row, the energy row blended into w, the no-slip row.
    a1 = h_x
    b1, b2, b3 = xd * scale + r * s * blend, zd * scale - r * c * blend, thd * scale + blend
    c1, c2, c3 = -s, c, q["inv_radius"]
    rhs1 = -phi1 - v_h_chi * M * r * U
    rhs2 = -lam * f2 * scale
    rhs3 = -phi3 - row3_u * U
    # Cramer's rule, branch-free: the cofactors of the first row, then the rest.
    u1, u2, u3 = b2 * c3 - b3 * c2, b3 * c1 - b1 * c3, b1 * c2 - b2 * c1
    inv_det = 1 / (a1 * u1 - u2)
    Rx = (rhs1 * u1 + rhs2 * c3 - rhs3 * b3) * inv_det
    Rz = (rhs1 * u2 + rhs2 * a1 * c3 - rhs3 * a1 * b3) * inv_det
    Q = (rhs1 * u3 - rhs2 * (c1 + a1 * c2) + rhs3 * (a1 * b2 + b1)) * inv_det
    return Rx, Rz, Q, U


def field(X, q, at: Contact):
    """X' as a tuple of seven, given the state's Contact; q `with_reciprocals`."""
    Rx, Rz, Q, U = controls(X, q, at)
    return X[3], X[4], X[5], Rx * q["inv_mass"], -q["gravity"] + Rz * q["inv_mass"], Q * q["inv_inertia"], U


def vector_field(X, q, energy0):
    """X' of a state given as an array of seven."""
    X = tuple(X)
    return jnp.stack(field(X, with_reciprocals(q), contact(X, q, energy0)))


def initial_state(q):
    """Contact at start_contact_x, on top of the track, rolling forward along the
    tangent at start_speed with theta' = -v/r: every constraint holds exactly."""
    xi, r, speed = q["start_contact_x"], q["radius"], q["start_speed"]
    slope = dp(xi, q["a"], q["b"])
    norm = jnp.sqrt(1 + slope**2)
    tangent = jnp.stack([1 / norm, slope / norm])
    alpha = jnp.arctan2(-1 / norm, slope / norm)  # direction centre -> contact = -normal
    x, z = xi - r * slope / norm, p(xi, q["a"], q["b"]) + r / norm
    X = jnp.stack([x, z, jnp.zeros_like(x), speed * tangent[0], speed * tangent[1], -speed / r, alpha])
    # A perturbation of size initial_error in every constraint (height, speed, spin, alpha).
    e = q["initial_error"]
    return X + e * jnp.array([0.0, 1.0, 0.0, 1.0, 0.0, 1.0 / r, 1.0])


def energy_of(X, q):
    M, r, g = q["mass"], q["radius"], q["gravity"]
    return M * (X[3] ** 2 + X[4] ** 2) / 2 + M * r**2 * X[5] ** 2 / 2 + M * g * X[1]


def reference_energy(q):
    """E0: the energy of the exact (unperturbed) initial state, so that an
    initial error shows up in f2 like in the other residuals."""
    return energy_of(initial_state(q | {"initial_error": jnp.zeros_like(q["initial_error"])}), q)
