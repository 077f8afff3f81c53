"""Whipple bicycle study against Meijaard et al. 2007 (section 6a, Table 2)."""

import itertools

import bicycle_reference as ref
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from engine import SolverSettings, Status
from engine.solve import evaluate
from studies.bicycle import BENCHMARK, STUDY
from studies.bicycle._canonical import canonical_matrices, characteristic_coefficients, state_matrix
from studies.bicycle._parameters import CONSTRAINTS, DESIGN_NAMES
from studies.bicycle._polynomials import speed_polynomials
from studies.bicycle._quartic import quartic_roots
from studies.bicycle._roots import EVENT_GRID, MODES, _sign_changes, tracked_eigenvalues
from studies.bicycle._speeds import double_root_speed, weave_speed
from studies.bicycle._study import lapack_eigenvalues

SETTINGS = SolverSettings()
PERMUTATIONS = np.array(list(itertools.permutations(range(4))))
# Every evaluate of the study here: all its outputs, batches of 16 (table2_speeds'):
# one compiled program for the file.
BATCH = 16

# The study's functions checked one design at a time, each compiled once (as the
# study runs them, in a compiled program) rather than dispatched op by op.
_state_matrix = jax.jit(state_matrix)
_coefficients = jax.jit(characteristic_coefficients)
_quartic_roots = jax.jit(quartic_roots)
_weave_speed = jax.jit(lambda p, top: weave_speed(canonical_matrices(p), BENCHMARK["g"], top))
_double_root_speed = jax.jit(lambda p, top: double_root_speed(canonical_matrices(p), BENCHMARK["g"], top))
_discriminant = jax.jit(lambda p: speed_polynomials(canonical_matrices(p), BENCHMARK["g"]).discriminant_coefficients())
_sign_changes_at = jax.jit(jax.vmap(_sign_changes, in_axes=(None, 0)))


def jnp_params(p):
    return {k: jnp.asarray(v) for k, v in p.items()}


def random_designs(n, seed=0, spread=0.25):
    """Benchmark perturbed by up to +-25% per parameter, inertias kept physical.

    The benchmark's wheels and fork sit close to the triangle inequality, so the
    perturbed polar / yy inertias are pulled back inside it, then every design is
    checked against the study's own constraints.
    """
    rng = np.random.default_rng(seed)
    d = {k: BENCHMARK[k] * rng.uniform(1 - spread, 1 + spread, n) for k in DESIGN_NAMES}
    d["g"] = np.full(n, BENCHMARK["g"])
    for wheel in "RF":
        d[f"I{wheel}yy"] = np.minimum(d[f"I{wheel}yy"], 1.98 * d[f"I{wheel}xx"])
    for body in "BH":
        # Principal moments in the xz plane, I1 >= I3; triangle: I1 - I3 <= Iyy <= I1 + I3.
        xx, zz, xz = d[f"I{body}xx"], d[f"I{body}zz"], d[f"I{body}xz"]
        half = np.hypot((xx - zz) / 2, xz)
        d[f"I{body}yy"] = np.clip(d[f"I{body}yy"], 1.01 * 2 * half, 0.99 * (xx + zz))
    assert all(np.all(c.holds(d)) for c in CONSTRAINTS)
    return d


def test_canonical_matrices_match_the_benchmark():
    M, C1, K0, K2 = canonical_matrices(jnp_params(BENCHMARK))
    for got, want in ((M, ref.M), (C1, ref.C1), (K0, ref.K0), (K2, ref.K2)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=1e-12)


def test_inputs_are_not_mutated():
    p = dict(BENCHMARK)
    canonical_matrices(p)
    assert p == BENCHMARK and "IRzz" not in p


@pytest.fixture(scope="module")
def table2_speeds():
    v = np.concatenate([[0.0], ref.TABLE2[:, 0]])
    columns = {k: np.full(v.size, x) for k, x in STUDY.defaults.items()} | {"v": v}
    result = evaluate(STUDY, SETTINGS, columns, batch_size=BATCH)
    assert np.all(result.status == Status.SUCCESS)
    return result


def test_eigenvalues_at_zero_speed(table2_speeds):
    re, im = table2_speeds.outputs["eigenvalue_real"][0], table2_speeds.outputs["eigenvalue_imag"][0]
    small, large = ref.V0_ROOTS
    np.testing.assert_allclose(re, [large, small, -small, -large], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(im, 0.0)


def test_eigenvalues_match_table2_with_modes_labelled(table2_speeds):
    """Meijaard et al. 2007, Table 2(b), (c), v = 1..10 m/s (v = 2 row corrected)."""
    re = table2_speeds.outputs["eigenvalue_real"][1:]
    im = table2_speeds.outputs["eigenvalue_imag"][1:]
    weave, conj, capsize, caster = (MODES.index(m) for m in MODES)
    np.testing.assert_allclose(re[:, weave], ref.TABLE2[:, 1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(im[:, weave], ref.TABLE2[:, 2], rtol=0, atol=1e-12)
    np.testing.assert_allclose(re[:, conj], ref.TABLE2[:, 1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(im[:, conj], -ref.TABLE2[:, 2], rtol=0, atol=1e-12)
    np.testing.assert_allclose(re[:, capsize], ref.TABLE2[:, 3], rtol=0, atol=1e-12)
    np.testing.assert_allclose(re[:, caster], ref.TABLE2[:, 4], rtol=0, atol=1e-12)


def test_characteristic_speeds_match_table2(table2_speeds):
    """Meijaard et al. 2007, Table 2(a): vd, vw, vc to 1e-10."""
    out = table2_speeds.outputs
    np.testing.assert_allclose(out["double_root_speed"], ref.DOUBLE_ROOT_SPEED, rtol=0, atol=1e-10)
    np.testing.assert_allclose(out["weave_speed"], ref.WEAVE_SPEED, rtol=0, atol=1e-10)
    np.testing.assert_allclose(out["capsize_speed"], ref.CAPSIZE_SPEED, rtol=0, atol=1e-10)
    np.testing.assert_allclose(out["stable_speed_width"], ref.CAPSIZE_SPEED - ref.WEAVE_SPEED, atol=1e-10)
    _, frequency = _weave_speed(jnp_params(BENCHMARK), 10.0)
    _, root = _double_root_speed(jnp_params(BENCHMARK), 10.0)
    assert abs(float(frequency) - ref.WEAVE_FREQUENCY) < 1e-10
    assert abs(float(root) - ref.DOUBLE_ROOT) < 1e-10


def test_speeds_absent_from_the_searched_range_are_nan_not_failures():
    columns = {k: np.array([x]) for k, x in STUDY.defaults.items()} | {"max_speed": np.array([3.0])}
    result = evaluate(STUDY, SETTINGS, columns, batch_size=BATCH)
    assert result.status[0] == Status.SUCCESS
    assert np.isnan(result.outputs["weave_speed"][0]) and np.isnan(result.outputs["capsize_speed"][0])
    assert abs(result.outputs["double_root_speed"][0] - ref.DOUBLE_ROOT_SPEED) < 1e-10


def test_characteristic_equation_symmetry_v_lambda_to_minus():
    """If (v, lambda) solves det(...) = 0, so does (-v, -lambda): random designs."""
    designs = random_designs(20, seed=1)
    for i in range(20):
        p = jnp_params({k: v[i] for k, v in designs.items()})
        for v in (0.7, 3.0, 8.0):
            plus, _ = _quartic_roots(_coefficients(p, v))
            minus = -_quartic_roots(_coefficients(p, -v))[0]
            assert_same_roots(plus, minus, atol=1e-11 * (1 + float(jnp.abs(plus).max())))


def assert_same_roots(a, b, atol):
    """Equal as multisets: each root of `a` has its own root of `b` within atol."""
    b = list(np.asarray(b))
    for root in np.asarray(a):
        j = int(np.argmin([abs(root - x) for x in b]))
        assert abs(root - b[j]) <= atol, (a, b)
        b.pop(j)


def test_quartic_path_matches_numpy_eigvals_on_random_designs():
    """Every labelled eigenvalue is a root, also in designs (wide spread) whose
    v = 0 weave branches do not merge with each other but with capsize."""
    n = 400
    designs = random_designs(n, seed=2, spread=0.4)
    speeds = np.linspace(0.0, 12.0, n)
    columns = {k: designs[k] for k in DESIGN_NAMES} | {"v": speeds, "max_speed": np.full(n, 10.0)}
    result = evaluate(STUDY, SETTINGS, columns, batch_size=BATCH)
    for i in range(n):
        p = {k: designs[k][i] for k in DESIGN_NAMES}
        quartic = result.outputs["eigenvalue_real"][i] + 1j * result.outputs["eigenvalue_imag"][i]
        numpy_eig = np.linalg.eigvals(np.asarray(_state_matrix(jnp_params(p), speeds[i])))
        assert_same_roots(quartic, numpy_eig, atol=1e-10 * (1 + np.abs(numpy_eig).max()))


def test_device_independent_path_matches_lapack_path():
    """The quartic path (runs on any device) against JAX's LAPACK eig (CPU)."""
    designs = random_designs(16, seed=3)
    p = jnp_params({k: designs[k] for k in DESIGN_NAMES})
    speeds = jnp.linspace(0.5, 9.5, 16)
    lapack = np.asarray(jax.vmap(lapack_eigenvalues)(p, speeds))
    columns = {k: designs[k] for k in DESIGN_NAMES} | {"v": np.asarray(speeds), "max_speed": np.full(16, 10.0)}
    result = evaluate(STUDY, SETTINGS, columns, batch_size=BATCH)
    quartic = result.outputs["eigenvalue_real"] + 1j * result.outputs["eigenvalue_imag"]
    for i in range(16):
        assert_same_roots(quartic[i], lapack[i], atol=1e-10 * (1 + np.abs(lapack[i]).max()))


def test_labelled_branches_are_continuous_in_speed():
    """On a fine speed grid every labelled eigenvalue moves as little as the roots
    themselves do (within a small factor, for collisions, where two roots move
    fast): no label jumps to another branch, on random designs, up to three
    collisions in -20..20 m/s. This is what tracking means; it also catches the
    failure of continuation in steps, whose matching swaps labels where a pair
    passes close by a real root (design 311 here, even in 2,048 steps)."""
    designs = random_designs(400, seed=2, spread=0.4)
    speeds = jnp.linspace(-20.0, 20.0, 8001)
    g = BENCHMARK["g"]
    at_speeds = jax.jit(jax.vmap(lambda d, v: tracked_eigenvalues(canonical_matrices(d), g, v), in_axes=(None, 0)))
    for i in list(range(40)) + [98, 311]:
        z = np.asarray(at_speeds(jnp_params({k: designs[k][i] for k in DESIGN_NAMES}), speeds))
        step = np.max(np.abs(np.diff(z, axis=0)), axis=1)
        # the smallest step that matches the roots as sets
        d = np.abs(z[1:, None, :] - z[:-1][:, PERMUTATIONS])
        matched = np.min(np.max(d, axis=2), axis=1)
        assert np.all(step <= 3 * matched + 1e-9), (i, np.max(step / (matched + 1e-12)))


def test_characteristic_speeds_are_where_their_roots_are_on_random_designs():
    """At vw the quartic has the roots +-i w; at vd a double real root s (each
    found without the eigenvalue solver: closed form and a discriminant search)."""
    n = 60
    designs = random_designs(400, seed=2, spread=0.4)
    found = {"weave": 0, "double": 0}
    for i in range(n):
        p = jnp_params({k: designs[k][i] for k in DESIGN_NAMES})
        vw, w = (float(x) for x in _weave_speed(p, 20.0))
        vd, s = (float(x) for x in _double_root_speed(p, 20.0))
        if np.isfinite(vw):
            found["weave"] += 1
            roots = np.roots(np.asarray(_coefficients(p, vw))[::-1])
            assert np.min(np.abs(roots - 1j * w)) < 1e-7 * (1 + w), (i, vw, roots)
        if np.isfinite(vd):
            found["double"] += 1
            roots = np.roots(np.asarray(_coefficients(p, vd))[::-1])
            assert np.sort(np.abs(roots - s))[1] < 1e-6 * (1 + abs(s)), (i, vd, roots)
    assert found["weave"] > n // 2 and found["double"] > n // 2


def test_sign_change_bits_are_the_cells_where_the_discriminant_changes_sign():
    """The two 32-bit words of `_sign_changes` against the discriminant's signs at
    the grid's nodes evaluated in numpy, on random designs and speeds (cells whose
    ends lie within rounding of a root skipped)."""
    designs = random_designs(50, seed=4, spread=0.4)
    speeds = np.linspace(0.5, 20.0, 40)
    checked = 0
    for i in range(50):
        p = jnp_params({k: designs[k][i] for k in DESIGN_NAMES})
        disc = _discriminant(p)
        low, high, _ = _sign_changes_at(disc, jnp.asarray(speeds))
        bits = (np.asarray(high, np.uint64) << 32) | np.asarray(low, np.uint64)
        coefficients = np.array([float(c) for c in disc])
        for speed, word in zip(speeds, bits, strict=True):
            u = (speed * np.arange(EVENT_GRID + 1) / EVENT_GRID) ** 2
            values = np.polynomial.polynomial.polyval(u, coefficients)
            scale = np.polynomial.polynomial.polyval(u, np.abs(coefficients))
            if np.any(np.abs(values) <= 1e-9 * scale):
                continue
            changes = (values[:-1] > 0) != (values[1:] > 0)
            assert int(word) == sum(1 << int(k) for k in np.flatnonzero(changes)), (i, speed)
            checked += 1
    assert checked > 1500


def test_polished_roots_beside_a_double_root_are_as_accurate_as_their_conditioning():
    """One Newton step per root, kept only where it lowers the residual: beside
    the double-root speed vd (two real roots merging, at 1e-9 .. 1e-5 of vd) the
    roots stay within 1e-9 of numpy's, on random designs."""
    designs = random_designs(400, seed=2, spread=0.4)
    found = 0
    for i in range(40):
        p = jnp_params({k: designs[k][i] for k in DESIGN_NAMES})
        vd, _ = _double_root_speed(p, 20.0)
        if not np.isfinite(float(vd)):
            continue
        found += 1
        for relative in (-1e-5, -1e-7, -1e-9, 1e-9, 1e-7, 1e-5):
            a = _coefficients(p, float(vd) * (1 + relative))
            roots, _ = _quartic_roots(a)
            expected = np.roots(np.asarray(a)[::-1])
            assert_same_roots(roots, expected, atol=1e-9 * (1 + np.abs(expected).max()))
    assert found > 20
