"""A cube's sensitivity indices read back: what it holds (`state`, which
`status`, `plot` and `rollsweep sensitivity` say) and the ranking `rollsweep
sensitivity` prints. (Their bar chart: engine.cube.sensitivity_figure.)"""

import dataclasses

import numpy as np

from engine.cube.markers import GRID
from engine.cube.sensitivity import index_problems
from engine.cube.store import Cube


@dataclasses.dataclass(frozen=True)
class State:
    """Whether a cube holds sensitivity indices, and one line saying what it
    holds or why it holds none."""

    computed: bool
    line: str
    # True where a run of its sweep would compute them (the cube complete, or
    # the indices damaged); False where they wait for shards, or were refused.
    run_computes: bool = False


class NoIndices(LookupError):
    """A cube without sensitivity indices: one line saying why."""


def state(cube: Cube) -> State:
    """The indices of `cube` (a sensitivity sweep's, or not) as its markers say."""
    sweep = cube.sweep
    if sweep.sensitivity is None:
        return State(False, "not a sensitivity sweep (its sweep file has no [sensitivity] table)")
    total = cube.layout(GRID).n_shards
    done = len(cube.markers.done(GRID))
    if done < total:
        return State(False, f"not computed: the cube is not complete ({done:,} / {total:,} shards done); they are "
                     "computed once every shard is: run its sweep to finish it")
    recorded = cube.markers.sensitivity()
    if recorded is None:
        return State(False, "not computed yet: every shard is done, but no run has analysed them since (SLURM "
                     "array jobs solved it, or a run stopped): a run of its sweep computes them, solving nothing "
                     "again", run_computes=True)
    problems = index_problems(cube, recorded)
    if problems:
        return State(False, f"damaged: {problems[0]}; a run of its sweep computes them again", run_computes=True)
    return State(bool(recorded.get("computed")), str(recorded.get("line", "")))


def ranking(path) -> str:
    """`rollsweep sensitivity PATH`: each output's parameters ranked (Sobol':
    by ST, with S1 and both intervals; Morris: by mu*), or NoIndices naming
    why the cube holds none."""
    cube = Cube(path)
    found = state(cube)
    if not found.computed:
        raise NoIndices(f"{path}: no sensitivity indices: {found.line}")
    group = cube.group()
    outputs = [str(v) for v in group["output"][...]]
    parameters = [str(v) for v in group["parameter"][...]]
    s = cube.sweep.sensitivity
    read = {name: np.asarray(group[name][...]) for name in s.index_names() + ("points_dropped",)}
    axes = cube.sweep.axes[1:]
    lines = [f"{path}: {found.line}"]
    if axes:  # indices at each grid point: ranked by their mean over the grid
        lines.append(f"(indices at each point of {' x '.join(f'{a.name}[{len(a.values)}]' for a in axes)}: "
                     "their means over the grid, and the points dropped in all)")
        keep = {"S2": 3, "S2_conf": 3}
        read = {name: (values.sum(axis=tuple(range(1, values.ndim))) if name == "points_dropped" else
                       values.mean(axis=tuple(range(keep.get(name, 2), values.ndim))))
                for name, values in read.items()}
    conf = f"±{int(round(100 * float(cube.attrs.get('sensitivity_confidence', 0.95))))}%"
    for i, output in enumerate(outputs):
        dropped = int(read["points_dropped"][i])
        lines.append(f"{output}" + (f" ({dropped:,} points dropped)" if dropped else ""))
        if s.method == "sobol":
            key, columns = "ST", (("ST", "ST_conf"), ("S1", "S1_conf"))
        else:
            key, columns = "mu_star", (("mu_star", "mu_star_conf"), ("mu", None), ("sigma", None))
        order = np.argsort(-read[key][i], kind="stable")
        header = "".join(f"{name:>11}" + (f"{conf:>9}" if c else "") for name, c in columns)
        lines.append(f"  {'rank':>4}  {'parameter':<20}{header}")
        for rank, j in enumerate(order, 1):
            cells = "".join(f"{read[name][i, j]:11.4f}" + (f"{read[c][i, j]:9.4f}" if c else "")
                            for name, c in columns)
            lines.append(f"  {rank:>4}  {parameters[j]:<20}{cells}")
        if "S2" in read:
            pairs = sorted(((read["S2"][i, j, k], j, k) for j in range(len(parameters))
                            for k in range(j + 1, len(parameters))), key=lambda t: -t[0])
            lines += [f"  S2 {parameters[j]} x {parameters[k]}: {value:.4f} {conf} {read['S2_conf'][i, j, k]:.4f}"
                      for value, j, k in pairs]
    return "\n".join(lines)
