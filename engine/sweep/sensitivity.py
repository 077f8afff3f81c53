"""A sweep's `[sensitivity]`: global sensitivity indices of scalar outputs.

The design is the method's, drawn by SALib's own sampler in the unit
hypercube (Saltelli's on a scrambled Sobol' sequence for Sobol' indices,
trajectories for Morris'), then mapped through each `[samples.parameters]`
distribution's inverse CDF (engine.sweep.samples). The cube's `sample`
dimension holds the design's rows in SALib's order, so SALib's `analyze`
on the cube's outputs gives the cube's indices (engine.cube.sensitivity
calls it once every shard is done). Nothing here estimates an index.
"""

import dataclasses

import numpy as np

from engine.errors import ConfigError

METHODS = ("sobol", "morris")
FAILED = ("refuse", "drop")
KEYS = {"method", "outputs", "second_order", "levels", "failed"}
# Morris' grid levels when the sweep gives none: SALib's default.
LEVELS = 4
# The index arrays' dimensions (engine.cube.sensitivity): a study naming one
# of its parameters, outputs or outputs' dimensions so would mix the two.
DIMS = ("output", "parameter", "parameter_2")
# The variables an analysis writes, by method, besides the per-output counts.
INDICES = {"sobol": ("S1", "S1_conf", "ST", "ST_conf"), "morris": ("mu", "mu_star", "sigma", "mu_star_conf")}
SECOND_ORDER = ("S2", "S2_conf")
COUNTS = ("failed_points", "points_dropped")
# The bootstrap of the confidence intervals: SALib's defaults, written down
# because the cube's attributes say them.
RESAMPLES = 100
CONFIDENCE = 0.95


@dataclasses.dataclass(frozen=True)
class Sensitivity:
    method: str  # "sobol" or "morris"
    outputs: tuple[str, ...]  # scalar outputs of the study, in the table's order
    second_order: bool = False  # sobol: also S2 (a design of N (2D + 2) points instead of N (D + 2))
    levels: int = LEVELS  # morris: the grid's levels (SALib's num_levels)
    failed: str = "refuse"  # "refuse": no indices over a design with failed points; "drop": their groups left out

    def group_size(self, d: int) -> int:
        """Rows of the design SALib's estimator reads together, and so drops
        together: a base sample's block (sobol: D + 2, or 2D + 2 with second
        order), a trajectory (morris: D + 1)."""
        if self.method == "morris":
            return d + 1
        return 2 * d + 2 if self.second_order else d + 2

    @property
    def bases(self) -> str:
        """What a sweep's `[samples] n` counts for this method."""
        return "base samples" if self.method == "sobol" else "trajectories"

    def points(self, n: int, d: int) -> int:
        """The design's rows: n base samples (sobol) or trajectories (morris) of d parameters."""
        return n * self.group_size(d)

    def index_names(self) -> tuple[str, ...]:
        return INDICES[self.method] + (SECOND_ORDER if self.method == "sobol" and self.second_order else ())

    def unit_design(self, names, n: int, seed: int) -> np.ndarray:
        """SALib's design in the unit hypercube [0, 1]^d, its rows in SALib's order."""
        problem = unit_problem(names)
        if self.method == "sobol":
            return saltelli_design(len(problem["names"]), n, self.second_order, seed)
        from SALib.sample import morris

        return morris.sample(problem, n, num_levels=self.levels, seed=seed)

    def canonical(self) -> dict:
        return {"method": self.method, "outputs": list(self.outputs), "second_order": self.second_order,
                "levels": self.levels, "failed": self.failed}


def saltelli_design(d: int, n: int, second_order: bool, seed: int) -> np.ndarray:
    """SALib's `sobol.sample` of the unit hypercube [0, 1]^d (scrambled, seeded,
    no groups, no skipped values), bit for bit, built with numpy's whole-array
    operations instead of SALib's loop over the base samples (3.4 s for the
    bicycle's 2^15 x 27 rows of 25 parameters; this, 0.2 s).

    SALib draws n points of a scrambled Sobol' sequence in 2d dimensions, A
    its first d columns and B its last d, and writes for each base sample i
    the block A_i, AB_i^1 .. AB_i^d (A_i with column j from B_i), with second
    order BA_i^1 .. BA_i^d (B_i with column j from A_i), then B_i; then scales
    the unit design to the problem's bounds, [0, 1] here (x * 1 + 0: the same
    bits). tests/test_sensitivity.py checks the equality with SALib's own for
    several d, n, seeds, with and without second order."""
    from scipy.stats import qmc

    # As SALib calls it (SALib.sample.sobol.sample): the same base draws.
    base = qmc.Sobol(d=2 * d, scramble=True, seed=seed).random(n)
    a, b = base[:, :d], base[:, d:]
    size = 2 * d + 2 if second_order else d + 2
    design = np.empty((n, size, d))
    design[:, 0] = a
    design[:, 1:d + 1] = a[:, None, :]
    columns = np.arange(d)
    design[:, 1 + columns, columns] = b
    if second_order:
        design[:, d + 1:2 * d + 1] = b[:, None, :]
        design[:, d + 1 + columns, columns] = a
    design[:, -1] = b
    return design.reshape(n * size, d)


def unit_problem(names) -> dict:
    """SALib's problem of the unit hypercube: the design is drawn there and the
    distributions map it (SALib's bounds would only scale it again)."""
    names = list(names)
    return {"num_vars": len(names), "names": names, "bounds": [[0.0, 1.0]] * len(names)}


def parse_sensitivity(table: dict, study, file) -> Sensitivity | None:
    """The `[sensitivity]` table checked against the study: its keys, the
    method, each output a scalar output of the study, the method's own keys.
    (`[samples]`, which it needs, is checked with it in engine.sweep.samples.)"""
    if not table:
        return None

    def fail(key, reason):
        raise ConfigError(file, key, reason)

    for key in table:
        if key not in KEYS:
            fail(f"sensitivity.{key}", f"unknown key (expected one of {sorted(KEYS)})")
    method = table.get("method")
    if method is None:
        fail("sensitivity.method", f"is required: one of {', '.join(METHODS)}")
    if method not in METHODS:
        fail("sensitivity.method", f"{method!r} is not one of {', '.join(METHODS)}")
    outputs = _outputs(table.get("outputs"), study, fail)
    if "second_order" in table and method != "sobol":
        fail("sensitivity.second_order", f"means nothing to {method}: second-order indices are Sobol's")
    second_order = table.get("second_order", False)
    if not isinstance(second_order, bool):
        fail("sensitivity.second_order", f"must be true or false, got {second_order!r}")
    if "levels" in table and method != "morris":
        fail("sensitivity.levels", f"means nothing to {method}: the levels are those of Morris' grid")
    levels = table.get("levels", LEVELS)
    if isinstance(levels, bool) or not isinstance(levels, int) or levels < 2 or levels % 2:
        # SALib warns that an odd number biases the sample: refused, not warned.
        fail("sensitivity.levels", f"must be an even integer of at least 2 (Morris' grid levels), got {levels!r}")
    failed = table.get("failed", "refuse")
    if failed not in FAILED:
        fail("sensitivity.failed", f"{failed!r} is not one of {', '.join(FAILED)}")
    _check_names(study, method, second_order, fail)
    return Sensitivity(method, outputs, second_order, levels, failed)


def _outputs(chosen, study, fail) -> tuple[str, ...]:
    if chosen is None:
        fail("sensitivity.outputs", "is required: the names of the scalar outputs to analyse")
    if not isinstance(chosen, list) or not chosen:
        fail("sensitivity.outputs", "must be a non-empty list of output names")
    known = study.outputs_by_name
    for i, name in enumerate(chosen):
        key = f"sensitivity.outputs[{i}]"
        if not isinstance(name, str):
            fail(key, f"must be an output's name, got {name!r}")
        if name not in known:
            fail(key, f"{name!r} is not an output of {study.name!r} ({', '.join(known)})")
        if known[name].dims:
            scalar = [o.name for o in study.outputs if not o.dims]
            fail(key, f"{name!r} is not a scalar output (its dims: {', '.join(d for d, _ in known[name].dims)}); "
                 f"indices are of scalar outputs ({', '.join(scalar) or 'none'})")
        if name in chosen[:i]:
            fail(key, f"{name!r} is listed twice")
    return tuple(chosen)


def _check_names(study, method: str, second_order: bool, fail) -> None:
    """The indices' dimensions and variables beside the study's own names in
    one cube: a study that already uses one of them cannot have them."""
    taken = {p.name: "a parameter" for p in study.parameters} | {o.name: "an output" for o in study.outputs}
    taken |= {dim: f"a dimension of output {o.name!r}" for o in study.outputs for dim, _ in o.dims}
    ours = DIMS + INDICES[method] + (SECOND_ORDER if second_order else ()) + COUNTS
    for name in ours:
        if name in taken:
            fail("sensitivity", f"study {study.name!r} has {taken[name]} named {name!r}, a name the indices take "
                 "in the cube")
