"""Canonical matrices of the linearised Whipple bicycle, as pure functions.

Meijaard, Papadopoulos, Ruina, Schwab (2007), Appendix A, restated in the
project's specification (the seed translation lost minus signs):

    M q'' + v C1 q' + (g K0 + v^2 K2) q = 0,   q = (phi, delta)  (lean, steer)

Every function takes a mapping of parameter names to scalars (JAX or numpy),
never mutates it, and is vmappable over every parameter.
"""

import jax.numpy as jnp

from engine.once import computed_once


def canonical_matrices(p):
    """M, C1, K0, K2 (each 2x2) from the 25 design parameters."""
    return tuple(jnp.stack([jnp.stack(row) for row in matrix]) for matrix in canonical_entries(p))


def canonical_entries(p):
    """M, C1, K0, K2 as nested tuples of scalars ((m00, m01), (m10, m11)): the
    per-point path reads entries, and a stacked 2x2 per point costs XLA a
    concatenation and a transpose a matrix."""
    w, c, lam = p["w"], p["c"], p["lam"]
    rR, mR, IRxx, IRyy = p["rR"], p["mR"], p["IRxx"], p["IRyy"]
    xB, zB, mB = p["xB"], p["zB"], p["mB"]
    IBxx, IBzz, IBxz = p["IBxx"], p["IBzz"], p["IBxz"]
    xH, zH, mH = p["xH"], p["zH"], p["mH"]
    IHxx, IHzz, IHxz = p["IHxx"], p["IHzz"], p["IHxz"]
    rF, mF, IFxx, IFyy = p["rF"], p["mF"], p["IFxx"], p["IFyy"]
    sin, cos = jnp.sin(lam), jnp.cos(lam)

    # Whole bicycle (T) about the rear contact point.
    mT = mR + mB + mH + mF
    xT = (xB * mB + xH * mH + w * mF) / mT
    zT = (-rR * mR + zB * mB + zH * mH - rF * mF) / mT
    ITxx = IRxx + IBxx + IHxx + IFxx + mR * rR**2 + mB * zB**2 + mH * zH**2 + mF * rF**2
    ITxz = IBxz + IHxz - mB * xB * zB - mH * xH * zH + mF * w * rF
    IRzz, IFzz = IRxx, IFxx  # wheels are axisymmetric
    ITzz = IRzz + IBzz + IHzz + IFzz + mB * xB**2 + mH * xH**2 + mF * w**2

    # Front assembly (A = H + F) about its own centre of mass.
    mA = mH + mF
    xA = (xH * mH + w * mF) / mA
    zA = (zH * mH - rF * mF) / mA
    IAxx = IHxx + IFxx + mH * (zH - zA) ** 2 + mF * (rF + zA) ** 2
    IAxz = IHxz - mH * (xH - xA) * (zH - zA) + mF * (w - xA) * (rF + zA)
    IAzz = IHzz + IFzz + mH * (xH - xA) ** 2 + mF * (w - xA) ** 2
    # Used in many entries below: the trigonometry and divisions once (see engine.once).
    sin, cos, xT, zT, xA, zA, ITxx, ITxz, ITzz, IAxx, IAxz, IAzz = computed_once(
        (sin, cos, xT, zT, xA, zA, ITxx, ITxz, ITzz, IAxx, IAxz, IAzz))

    # Steer axis: offset of A's centre ahead of it, inertias about / across it.
    uA = (xA - w - c) * cos - zA * sin
    IAll = mA * uA**2 + IAxx * sin**2 + 2 * IAxz * sin * cos + IAzz * cos**2
    IAlx = -mA * uA * zA + IAxx * sin + IAxz * cos
    IAlz = mA * uA * xA + IAxz * sin + IAzz * cos
    mu = c / w * cos
    SR, SF = IRyy / rR, IFyy / rF
    ST = SR + SF
    SA = mA * uA + mu * mT * xT

    # The eleven distinct non-zero entries, computed once (see engine.once).
    m00, m01, m11, k0_00, k0_01, k0_11, k2_01, k2_11, c1_01, c1_10, c1_11 = computed_once((
        ITxx, IAlx + mu * ITxz, IAll + 2 * mu * IAlz + mu**2 * ITzz,
        mT * zT, -SA, -SA * sin,
        (ST - mT * zT) * cos / w, (SA + SF * sin) * cos / w,
        mu * ST + SF * cos + ITxz * cos / w - mu * mT * zT, -(mu * ST + SF * cos),
        IAlz * cos / w + mu * (SA + ITzz * cos / w),
    ))
    zero = jnp.zeros_like(m00)
    M = (m00, m01), (m01, m11)
    K0 = (k0_00, k0_01), (k0_01, k0_11)
    K2 = (zero, k2_01), (zero, k2_11)
    C1 = (zero, c1_01), (c1_10, c1_11)
    return M, C1, K0, K2


def state_matrix(p, v):
    """A(v) of the first-order form, state (phi, delta, phi', delta')."""
    M, C1, K0, K2 = canonical_matrices(p)
    stiffness = p["g"] * K0 + v**2 * K2
    Minv = jnp.linalg.inv(M)
    top = jnp.concatenate([jnp.zeros((2, 2), M.dtype), jnp.eye(2, dtype=M.dtype)], axis=1)
    bottom = jnp.concatenate([-Minv @ stiffness, -v * Minv @ C1], axis=1)
    return jnp.concatenate([top, bottom], axis=0)


def characteristic_coefficients(p, v):
    """Coefficients (a0, a1, a2, a3, a4) of det(M s^2 + v C1 s + g K0 + v^2 K2)."""
    return coefficients_from(canonical_matrices(p), p["g"], v)


def coefficients_from(matrices, g, v):
    """The same from precomputed matrices (vmappable over v).

    Entries of the 2x2 matrix are quadratics in s; the determinant is their
    polynomial product, so every coefficient is a polynomial in v.
    """
    M, C1, K0, K2 = matrices
    K = g * K0 + v**2 * K2
    entry = [[(K[i, j], v * C1[i, j], M[i, j]) for j in range(2)] for i in range(2)]

    def product(a, b):  # two quadratics, ascending powers
        return [a[0] * b[0], a[0] * b[1] + a[1] * b[0], a[0] * b[2] + a[1] * b[1] + a[2] * b[0],
                a[1] * b[2] + a[2] * b[1], a[2] * b[2]]

    diag, off = product(entry[0][0], entry[1][1]), product(entry[0][1], entry[1][0])
    return jnp.stack([d - o for d, o in zip(diag, off, strict=True)])
