"""The characteristic quartic's coefficients as polynomials in speed.

det(M s^2 + v C1 s + g K0 + v^2 K2) = a4 s^4 + a3 s^3 + a2 s^2 + a1 s + a0 with

    a4 = k40,  a3 = v k31,  a2 = k20 + k22 u,  a1 = v (k11 + k13 u),  a0 = k00 + k02 u,   u = v^2

(a0 has no u^2 term because K2's first column is zero). The nine k's depend on
the design alone, so everything that is a function of speed (the coefficients,
the discriminant, the Routh-Hurwitz determinant) becomes a polynomial whose
coefficients are computed once per point and then cost a few flops per speed.
"""

from typing import NamedTuple

import jax.numpy as jnp

from engine.once import computed_once

from ._quartic import discriminant


def _det(x):
    return x[0][0] * x[1][1] - x[0][1] * x[1][0]


def _cross(x, y):
    """det(x + y) - det(x) - det(y) for 2x2 x, y: the bilinear part."""
    return x[0][0] * y[1][1] + y[0][0] * x[1][1] - x[0][1] * y[1][0] - y[0][1] * x[1][0]


class SpeedPolynomials(NamedTuple):
    k00: object
    k02: object
    k11: object
    k13: object
    k20: object
    k22: object
    k31: object
    k40: object

    def coefficients(self, v):
        """(a0, a1, a2, a3, a4) at speed v, stacked."""
        return jnp.stack(self.coefficients_at(v))

    def coefficients_at(self, v):
        """(a0, a1, a2, a3, a4) at speed v, a tuple of scalars."""
        u = v * v
        return (self.k00 + self.k02 * u, v * (self.k11 + self.k13 * u), self.k20 + self.k22 * u, v * self.k31,
                self.k40 + 0 * v)

    def speed_derivatives(self, v):
        """d(a0, ..., a4)/dv at speed v."""
        return jnp.stack([2 * self.k02 * v, self.k11 + 3 * self.k13 * v * v, 2 * self.k22 * v, self.k31 + 0 * v,
                          0 * v])

    def discriminant(self):
        """27 times the quartic's discriminant as ascending coefficients of a
        polynomial in u = v^2 (degree 6), stacked."""
        return jnp.stack(self.discriminant_coefficients())

    def discriminant_coefficients(self):
        """The same as a tuple of seven scalars."""
        a = (_U((self.k00, self.k02)), _U((self.k11, self.k13), odd=True), _U((self.k20, self.k22)),
             _U((self.k31,), odd=True), _U((self.k40,)))
        value = discriminant(a)
        assert not value.odd  # the quartic's symmetry (v, s) -> (-v, -s): even in v
        return computed_once(value.dense(7))

    def hurwitz(self):
        """(A, B, C): the Routh-Hurwitz determinant a3 a2 a1 - a3^2 a0 - a4 a1^2 is
        u (A u^2 + B u + C)."""
        al, be, ga, de, ep, ze, et, ka = (self.k31, self.k11, self.k13, self.k20, self.k22, self.k00, self.k02,
                                          self.k40)
        return (al * ep * ga - ka * ga * ga,
                al * (de * ga + ep * be) - al * al * et - 2 * ka * be * ga,
                al * de * be - al * al * ze - ka * be * be)


def speed_polynomials(matrices, g):
    M, C1, K0, K2 = matrices
    gK0 = tuple(tuple(g * x for x in row) for row in K0)  # stacked matrices or nested tuples of entries
    return SpeedPolynomials(*computed_once((
        _det(gK0), _cross(gK0, K2),  # k00, k02
        _cross(gK0, C1), _cross(K2, C1),  # k11, k13
        _cross(gK0, M), _cross(K2, M) + _det(C1),  # k20, k22
        _cross(C1, M), _det(M),  # k31, k40
    )))


def polyval(coeffs, x):
    """Ascending coefficients at x (Horner)."""
    value = coeffs[-1] + 0 * x
    for c in coeffs[-2::-1]:
        value = value * x + c
    return value


class _U:
    """A polynomial in u = v^2, times v when `odd` (a1 and a3 are odd in v): just
    enough arithmetic to expand the discriminant formula. Coefficients are
    ascending from u^low; no zero coefficients are stored or multiplied."""

    def __init__(self, coeffs, odd=False, low=0):
        self.coeffs, self.odd, self.low = tuple(coeffs), odd, low

    def __mul__(self, other):
        if not isinstance(other, _U):
            return _U([other * c for c in self.coeffs], self.odd, self.low)
        out = [None] * (len(self.coeffs) + len(other.coeffs) - 1)
        for i, x in enumerate(self.coeffs):
            for j, y in enumerate(other.coeffs):
                out[i + j] = x * y if out[i + j] is None else out[i + j] + x * y
        both_odd = self.odd and other.odd  # v * v = u
        return _U(out, self.odd != other.odd, self.low + other.low + both_odd)

    __rmul__ = __mul__

    def __pow__(self, n):
        result = self
        for _ in range(n - 1):
            result = result * self
        return result

    def __add__(self, other):
        assert self.odd == other.odd
        low = min(self.low, other.low)
        out = {}
        for poly in (self, other):
            for i, c in enumerate(poly.coeffs):
                k = poly.low + i - low
                out[k] = c if k not in out else out[k] + c
        return _U([out.get(k, 0.0) for k in range(max(out) + 1)], self.odd, low)

    def __neg__(self):
        return _U([-c for c in self.coeffs], self.odd, self.low)

    def __sub__(self, other):
        return self + (-other)

    def dense(self, n):
        """Ascending coefficients u^0 .. u^(n-1)."""
        full = [0.0] * self.low + list(self.coeffs)
        assert len(full) <= n
        return [jnp.asarray(c) for c in full] + [jnp.zeros_like(jnp.asarray(self.coeffs[0]))] * (n - len(full))
