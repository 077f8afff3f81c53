"""A sensitivity sweep's analysis: SALib's estimators on the cube's outputs,
their indices written into the cube beside the points.

A run calls `analyse` once every shard of a `[sensitivity]` sweep's cube is
done (engine.runner.execute). It reads each analysed output and the points'
status, counts the points that failed (a status other than success, or a
value that is not finite), and either refuses (`failed = "refuse"`: no
indices over a design with holes; the cube's `sensitivity` attribute and the
run say how many failed) or drops each failed point's whole group (`"drop"`:
a base sample's block of D + 2 or 2D + 2 rows for Sobol', a trajectory of
D + 1 for Morris; SALib's estimators need them whole). The indices are
SALib's `analyze` of what is left, with a fixed seed for the bootstrap of
their confidence intervals: a cube's indices are a function of its points'
values alone, bit for bit.

The index arrays (dims `output`, `parameter`; `S2` also `parameter_2`) are
written whole, then recorded in the markers (`_rollsweep/sensitivity.json`:
what they were computed from, and their checksums, which `verify` reads them
back against). A run finding that record for the cube's current shards, and
the arrays as recorded, computes nothing again.
"""

import hashlib
import json
import warnings

import numpy as np

from engine.cube.markers import GRID
from engine.cube.store import Cube
from engine.cube.structure import Variable, add, coordinate_digest
from engine.study.status import Status
from engine.sweep.sensitivity import (
    CONFIDENCE,
    COUNTS,
    DIMS,
    INDICES,
    RESAMPLES,
    SECOND_ORDER,
    Sensitivity,
    unit_problem,
)

# The cube's attributes an analysis writes all start so (those of an earlier
# analysis are removed with its arrays).
ATTRIBUTE = "sensitivity"
# Every array an analysis may write: removed before another is written.
WRITTEN = DIMS + INDICES["sobol"] + SECOND_ORDER + INDICES["morris"] + COUNTS

# What each index variable says (its `long_name` and `description` attributes).
DESCRIBED = {
    "S1": ("first-order Sobol' index", "share of the output's variance due to the parameter alone"),
    "ST": ("total Sobol' index", "share of the output's variance due to the parameter and its interactions"),
    "S2": ("second-order Sobol' index", "share of the output's variance due to the two parameters' interaction"),
    "mu": ("Morris mu", "mean elementary effect, per unit of the parameter's quantile (the unit hypercube)"),
    "mu_star": ("Morris mu*", "mean absolute elementary effect, per unit of the parameter's quantile"),
    "sigma": ("Morris sigma", "standard deviation of the elementary effects (interactions, non-linearity)"),
    "failed_points": ("failed points", "points whose status is not success or whose value is not finite"),
    "points_dropped": ("points dropped", "points left out of the analysis: the groups holding a failed point"),
}


def analyse(cube: Cube) -> str:
    """The indices of a complete sensitivity cube, computed and written, or
    found written already for its shards as they are: one line saying which,
    or why they are not computed (failed points)."""
    sweep = cube.sweep
    s = sweep.sensitivity
    source = _source(cube, s)
    recorded = cube.markers.sensitivity()
    if recorded is not None and recorded.get("source") == source and not index_problems(cube, recorded):
        return recorded["line"]
    cube.markers.forget_sensitivity()  # from here until the record is written, the arrays are not the record's
    group = cube.group()
    axes = sweep.axes[1:]  # besides the design's `sample`: the design solved again at each grid point
    grid = tuple(len(a.values) for a in axes)
    status = np.asarray(group["status"][...])
    points = status.shape[0]
    values = {name: np.asarray(group[name][...], dtype="float64").reshape(points, -1) for name in s.outputs}
    status = status.reshape(points, -1)
    failed = {name: (status != Status.SUCCESS) | ~np.isfinite(y) for name, y in values.items()}
    counts = {name: bad.sum(axis=0).reshape(grid) for name, bad in failed.items()}
    total = {name: int(c.sum()) for name, c in counts.items()}
    d = len(sweep.samples.parameters)
    size = s.group_size(d)
    design_points = points * int(np.prod(grid))
    if any(total.values()) and s.failed == "refuse":
        line = (f"not computed: {_failed_words(failed, design_points)}; failed = \"drop\" in [sensitivity] leaves "
                f"out each failed point's {_group_words(s)[0]} ({size} points)")
        return _record(cube, source, line, {}, {"sensitivity": line, "sensitivity_failed_points": total})
    # kept[name]: (groups, grid points), whether each group of the design is whole at each grid point
    kept = {name: ~bad.reshape(points // size, size, -1).any(axis=1) for name, bad in failed.items()}
    short = [name for name, keep in kept.items() if (keep.sum(axis=0) < 2).any()]
    if short:
        line = (f"not computed: {_failed_words(failed, design_points)}, which leaves {short[0]} fewer than two "
                f"{_group_words(s)[1]} without one" + (" at a grid point" if axes else ""))
        return _record(cube, source, line, {}, {"sensitivity": line, "sensitivity_failed_points": total})
    unit = sweep.samples.unit
    indices, notes = {}, []
    for name in s.outputs:
        at = []
        for k in range(values[name].shape[1]):
            keep = np.repeat(kept[name][:, k], size)
            found, said = _salib(s, sweep.samples.parameters, unit[keep], values[name][keep, k], sweep.samples.seed)
            at.append(found)
            notes += [f"{name}: {w}" for w in said]
        # each index with the grid's dimensions last: (parameter[, parameter_2], *grid)
        indices[name] = {i: np.moveaxis(np.stack([f[i] for f in at]), 0, -1).reshape(at[0][i].shape + grid)
                         for i in s.index_names()}
    notes = list(dict.fromkeys(notes))
    dropped = {name: (size * (~keep).sum(axis=0)).reshape(grid) for name, keep in kept.items()}
    arrays = _arrays(s, list(sweep.samples.parameters), indices, counts, dropped, tuple(a.name for a in axes))
    all_dropped = sum(int(v.sum()) for v in dropped.values())
    line = _computed_words(s, sweep.samples, points, all_dropped, grid)
    attrs = {"sensitivity": line, "sensitivity_method": s.method, "sensitivity_N": sweep.samples.n,
             "sensitivity_seed": sweep.samples.seed, "sensitivity_failed": s.failed,
             "sensitivity_points_dropped": all_dropped, "sensitivity_confidence": CONFIDENCE,
             "sensitivity_resamples": RESAMPLES, "sensitivity_salib": _salib_version(),
             **({"sensitivity_second_order": s.second_order} if s.method == "sobol" else
                {"sensitivity_levels": s.levels}),
             **({"sensitivity_notes": notes} if notes else {})}
    return _record(cube, source, line, arrays, attrs)


def _salib(s: Sensitivity, parameters, unit: np.ndarray, y: np.ndarray, seed: int) -> tuple[dict, list[str]]:
    """SALib's indices of one output (`y`, the design's rows kept), and what
    SALib warned of (a constant output, say), one line each."""
    problem = unit_problem(parameters)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        if s.method == "sobol":
            from SALib.analyze import sobol

            # A Generator, not the seed: SALib takes a seed of 0 for none (`if seed:`)
            # and would draw the bootstrap from numpy's global state. The same
            # stream as default_rng(seed) for any other seed.
            found = sobol.analyze(problem, y, calc_second_order=s.second_order, num_resamples=RESAMPLES,
                                  conf_level=CONFIDENCE, seed=np.random.default_rng(seed))
        else:
            from SALib.analyze import morris

            found = morris.analyze(problem, unit, y, num_resamples=RESAMPLES, conf_level=CONFIDENCE,
                                   num_levels=s.levels, seed=seed)
    names = s.index_names()
    lines = sorted({" ".join(str(w.message).split()) for w in said})
    return {name: np.asarray(found[name], dtype="float64") for name in names}, lines


def _arrays(s: Sensitivity, parameters: list, indices: dict, counts: dict, dropped: dict,
            axes: tuple[str, ...] = ()) -> dict[str, Variable]:
    outputs = list(s.outputs)
    arrays = {"output": _labels("output", outputs), "parameter": _labels("parameter", parameters)}
    if s.method == "sobol" and s.second_order:
        arrays["parameter_2"] = _labels("parameter_2", parameters)
    for name in s.index_names():
        stacked = np.stack([indices[o][name] for o in outputs])
        dims = ("output", "parameter", "parameter_2") if name in SECOND_ORDER else ("output", "parameter")
        arrays[name] = Variable(dims + axes, stacked.shape, "float64", _attrs(name, s), values=stacked)
    for name, by_output in zip(COUNTS, (counts, dropped), strict=True):
        values = np.stack([np.asarray(by_output[o], dtype="int64") for o in outputs])
        long_name, description = DESCRIBED[name]
        arrays[name] = Variable(("output",) + axes, values.shape, "int64",
                                {"long_name": long_name, "description": description}, values=values)
    return arrays


def _labels(dim: str, names: list) -> Variable:
    values = np.array(names, dtype=object)  # zarr v3 "string" dtype, as an output's labelled dimension
    return Variable((dim,), values.shape, "str", {}, values=values)


def _attrs(name: str, s: Sensitivity) -> dict:
    base = name.removesuffix("_conf")
    long_name, description = DESCRIBED[base]
    if name.endswith("_conf"):
        return {"long_name": f"{long_name}, {CONFIDENCE:.0%} interval",
                "description": f"half-width of the {CONFIDENCE:.0%} confidence interval of {base} "
                               f"({RESAMPLES} bootstrap resamples)"}
    return {"long_name": long_name, "description": description}


def _record(cube: Cube, source: str, line: str, arrays: dict, attrs: dict) -> str:
    """The arrays and attributes written, then the record of them: until it is
    written, a reader (verify, the next run) finds none."""
    digests = add(cube.path, arrays, attrs, remove=WRITTEN, prefix=ATTRIBUTE)
    cube.markers.record_sensitivity({"source": source, "line": line, "computed": bool(arrays),
                                     "digests": digests})
    return line


def _source(cube: Cube, s: Sensitivity) -> str:
    """What the indices are computed from: the checksums of each done grid
    shard's status and analysed outputs (a shard solved again, by a changed
    study, changes it)."""
    names = ("status", *s.outputs)
    markers = cube.markers.read(GRID)
    shards = [[shard, {n: ((m or {}).get("digests") or {}).get(n) for n in names}] for shard, m in
              sorted(markers.items())]
    return hashlib.sha256(json.dumps(shards, sort_keys=True).encode()).hexdigest()


def index_problems(cube: Cube, recorded: dict | None = None, group=None) -> list[str]:
    """The recorded index arrays that are missing or do not read back as
    written, one line each; arrays an analysis left without its record (a run
    stopped while writing them)."""
    recorded = cube.markers.sensitivity() if recorded is None else recorded
    group = cube.group() if group is None else group
    if recorded is None:
        names = cube.sweep.sensitivity.index_names()
        left = [name for name in names if name in group]
        return [f"sensitivity indices ({', '.join(left)}) without their record: an analysis stopped while "
                "writing them"] if left else []
    problems = []
    for name, expected in (recorded.get("digests") or {}).items():
        if name not in group:
            problems.append(f"sensitivity variable {name} is missing")
            continue
        try:
            found = coordinate_digest(group[name][...])
        except Exception:  # noqa: BLE001 - any decoding error: damaged
            found = None
        if found != expected:
            problems.append(f"sensitivity variable {name} differs from what the analysis wrote")
    return problems


def _failed_words(failed: dict, points: int) -> str:
    """e.g. "12 of 81,920 points failed (y: 12, gappy: 40)" (points: the design's at every grid point)."""
    anywhere = int(np.logical_or.reduce(list(failed.values())).sum())
    each = ", ".join(f"{name}: {int(bad.sum()):,}" for name, bad in failed.items())
    return f"{anywhere:,} of {points:,} points failed or are not finite ({each})"


def _group_words(s: Sensitivity) -> tuple[str, str]:
    """What SALib reads together, in the singular and the plural."""
    return ("trajectory", "trajectories") if s.method == "morris" else ("base sample's block", "blocks")


def _computed_words(s: Sensitivity, samples, points: int, dropped: int, grid: tuple = ()) -> str:
    dropped_words = f"{dropped:,} points dropped" if dropped else "no point dropped"
    at = f" at each of {int(np.prod(grid)):,} grid points ({' x '.join(map(str, grid))})" if grid else ""
    return (f"{s.method} indices of {len(s.outputs)} output{'s' * (len(s.outputs) != 1)} over "
            f"{len(samples.parameters)} parameters{at}: N = {samples.n:,} {s.bases} ({points:,} points), seed "
            f"{samples.seed}, {dropped_words}")


def _salib_version() -> str:
    from importlib.metadata import version

    return version("SALib")
