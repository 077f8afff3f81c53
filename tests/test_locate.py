"""The event-location rules every solver shares (engine.solve.locate)."""

import jax.numpy as jnp
import numpy as np

from engine.solve.locate import crossed, hermite_root, start_value


def guess(g, dg, span, direction=None):
    return float(hermite_root(jnp.asarray(g(0.0)), jnp.asarray(dg(0.0)), jnp.asarray(g(span)),
                              jnp.asarray(dg(span)), jnp.asarray(span), direction))


def test_hermite_start_is_exact_for_cubics_and_close_for_smooth_conditions():
    """The first guess for a crossing (cubic through both step ends and their
    slopes): exact for a cubic condition, O(span^4) for a smooth one, and in the
    step for a condition that is not monotone over it."""
    root = 0.3
    cubic, dcubic = (lambda t: (t - root) * (1 + t * t)), (lambda t: 1 + 3 * t * t - 2 * root * t)
    assert abs(guess(cubic, dcubic, 1.0) - root) < 1e-12
    # v(t) of a rolling ball with drag, stopping at ln(2) / k: errors shrink as span^4
    k = 0.7
    speed, dspeed = (lambda t: 2 * np.exp(-k * t) - 1), (lambda t: -2 * k * np.exp(-k * t))
    stop = np.log(2) / k
    errors = [abs(guess(speed, dspeed, span) - stop) for span in (2.0, 1.0)]
    assert errors[0] < 0.05 and errors[1] < errors[0] / 16
    # a parabola crossing zero twice: the guess stays inside the step
    assert 0.0 <= guess(lambda t: (t - 0.2) * (0.9 - t), lambda t: 1.1 - 2 * t, 1.0) <= 1.0


def test_hermite_start_finds_the_first_crossing_in_its_direction():
    """A ball reset to the ground going up: its height over a step spanning the
    next flight, h = t (2 - t), has roots at both ends; the landing (a
    downcrossing) is the far one. A cubic crossing up at 0.2, down at 0.5 and up
    at 0.8: the first of each direction."""
    height, dheight = (lambda t: 1e-18 + t * (2 - t)), (lambda t: 2 - 2 * t)
    assert abs(guess(height, dheight, 2.5, direction=False) - 2.0) < 1e-12
    cubic = lambda t: (t - 0.2) * (t - 0.5) * (t - 0.8)  # noqa: E731
    dcubic = lambda t: (t - 0.5) * (t - 0.8) + (t - 0.2) * (t - 0.8) + (t - 0.2) * (t - 0.5)  # noqa: E731
    assert abs(guess(cubic, dcubic, 1.0, direction=True) - 0.2) < 1e-6  # a first guess: re-steps refine it
    assert abs(guess(cubic, dcubic, 1.0, direction=False) - 0.5) < 1e-6


def test_a_root_at_the_start_takes_the_sign_it_moves_to():
    t = jnp.asarray(3.0)
    # exactly zero, and within rounding of zero on either side, moving up: positive
    for value in (0.0, -1e-16, 1e-16):
        assert start_value(jnp.asarray(value), jnp.asarray(2.0), t) > 0
    # moving down: negative, so a downcrossing at the start is not a crossing
    assert start_value(jnp.asarray(0.0), jnp.asarray(-2.0), t) < 0
    assert not crossed(start_value(jnp.asarray(0.0), jnp.asarray(-2.0), t), jnp.asarray(-1.0), False)
    # away from zero the value is kept, and a condition at rest at zero stays zero
    assert start_value(jnp.asarray(-0.5), jnp.asarray(2.0), t) == -0.5
    assert start_value(jnp.asarray(0.0), jnp.asarray(0.0), t) == 0.0
