"""Standard figures of the pingpong study, drawn from a cube."""

# matplotlib is imported where a figure is drawn: every run imports this module
# (its study names its figures) but never draws, and importing matplotlib costs
# ~0.4 s of a run's start-up.

import numpy as np

from engine.cube.plot import axis_label, label_of, scale_axes

# A sampled design's dimension (engine.sweep.samples.SAMPLE; not imported: figures import little).
SAMPLE = "sample"


def _declared():
    from ._study import OUTPUTS, PARAMETERS  # here: _study imports this module
    return PARAMETERS + OUTPUTS


_CRITICAL = r"critical spin ratio $q_c$"


def _final_vs_spin(ds):
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
    x = ds["final_displacement"].squeeze()
    q = ds["spin_ratio"].values
    ax.plot(q, x.values, lw=1.5)
    ax.axhline(0, color="0.5", lw=0.8)
    if "critical_spin_ratio" in ds and ds["critical_spin_ratio"].size == 1:
        qc = float(ds["critical_spin_ratio"].values.ravel()[0])
        ax.axvline(qc, color="C3", ls="--", lw=1, label=f"$q_c = {qc:.12f}$")
        ax.legend()
    scale_axes(ax, ds, x="spin_ratio")
    ax.set_xlabel(axis_label(ds, "spin_ratio", _declared()))
    ax.set_ylabel(axis_label(ds, "final_displacement", _declared()))
    ax.set_title("Final displacement against spin ratio (Gao 2021, Fig. 14)")
    ax.grid(alpha=0.3)
    return fig


def _critical_map(ds):
    import matplotlib.pyplot as plt
    qc = ds["critical_spin_ratio"]
    fig, ax = plt.subplots(figsize=(6, 4.5), constrained_layout=True)
    dims = qc.dims
    if len(dims) == 1:
        ax.plot(qc[dims[0]].values, qc.values, marker=".")
        scale_axes(ax, ds, x=dims[0])
        ax.set_xlabel(axis_label(ds, dims[0], _declared()))
        ax.set_ylabel(_CRITICAL)
    else:
        y, x = dims[:2]
        mesh = ax.pcolormesh(qc[x].values, qc[y].values, qc.transpose(y, x).values, shading="auto")
        cs = ax.contour(qc[x].values, qc[y].values, qc.transpose(y, x).values, colors="w", linewidths=0.6)
        ax.clabel(cs, fontsize=7)
        fig.colorbar(mesh, ax=ax, label=_CRITICAL)
        ax.set_xlabel(axis_label(ds, x, _declared()))
        ax.set_ylabel(axis_label(ds, y, _declared()))
        scale_axes(ax, ds, x=x, y=y)
    ax.set_title("Spin ratio at which the ball returns to its start")
    return fig


def _boundary_map(ds):
    import matplotlib.pyplot as plt
    from matplotlib.colors import SymLogNorm
    other = [d for d in ds["final_displacement"].dims if d != "spin_ratio"][0]
    x = ds["final_displacement"].transpose(other, "spin_ratio")
    fig, ax = plt.subplots(figsize=(6.5, 4.5), constrained_layout=True)
    limit = float(np.nanmax(np.abs(x.values)))
    # Symmetric log: zero drag throws the ball metres away, yet the interesting
    # part is the centimetres around the boundary.
    norm = SymLogNorm(linthresh=0.01, vmin=-limit, vmax=limit)
    mesh = ax.pcolormesh(ds["spin_ratio"].values, ds[other].values, x.values, cmap="RdBu", norm=norm, shading="auto")
    ax.contour(ds["spin_ratio"].values, ds[other].values, x.values, levels=[0.0], colors="k", linewidths=1.2)
    fig.colorbar(mesh, ax=ax, label=axis_label(ds, "final_displacement", _declared())
                 + "\n(blue: ends ahead, red: behind)")
    scale_axes(ax, ds, x="spin_ratio", y=other)
    ax.set_xlabel(axis_label(ds, "spin_ratio", _declared()))
    ax.set_ylabel(axis_label(ds, other, _declared()))
    ax.set_title(r"Forward/backward boundary (black: $x_\mathrm{final} = 0$)")
    return fig


# Curves of a trajectories figure at most: a family beyond it is unreadable.
_MOST_CURVES = 8


def _trajectories(ds):
    """Gao 2021 Figs 6-9: the centre's displacement and speed against time,
    the solver's samples (lines) against the paper's analytical solution
    (dots), for up to _MOST_CURVES points of the cube; the largest difference
    in the title."""
    import matplotlib.pyplot as plt

    from . import closed_form

    axes = [d for d in ds["x"].dims if d != "time"]
    shape = tuple(ds.sizes[d] for d in axes)
    x = ds["x"].transpose(*axes, "time").values.reshape(-1, ds.sizes["time"])
    speed = ds["x_dot"].transpose(*axes, "time").values.reshape(-1, ds.sizes["time"])
    chosen = np.unique(np.linspace(0, len(x) - 1, min(_MOST_CURVES, len(x))).astype(int))
    times = ds["time"].values
    fixed = {name: float(ds.attrs[f"parameter.{name}"]) for name in closed_form.DEFAULTS
             if f"parameter.{name}" in ds.attrs}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.5, 6), sharex=True, constrained_layout=True)
    worst = [0.0, 0.0]
    for colour, i in enumerate(chosen):
        index = np.unravel_index(i, shape)
        at = {name: float(ds[name].values[k]) for name, k in zip(axes, index, strict=True) if name != SAMPLE}
        if SAMPLE in axes:  # a sampled design's point: its drawn values, coordinates along the sample dimension
            k = index[axes.index(SAMPLE)]
            at |= {str(name): float(c.values[k]) for name, c in ds.coords.items()
                   if c.dims == (SAMPLE,) and name != SAMPLE}
        label = ", ".join(f"{label_of(name, _declared())} = {v:g}" for name, v in at.items())
        exact = np.array([closed_form.centre(t, fixed | at) for t in times])
        for k, (panel, values) in enumerate(((top, x[i]), (bottom, speed[i]))):
            panel.plot(times, values, color=f"C{colour}", lw=1.3, label=label if k == 0 else None)
            panel.plot(times[::10], exact[::10, k], ".", color=f"C{colour}", ms=4)
            worst[k] = max(worst[k], float(np.nanmax(np.abs(values - exact[:, k]))))
    top.set_ylabel(axis_label(ds, "x", _declared()))
    bottom.set_ylabel(axis_label(ds, "x_dot", _declared()))
    bottom.set_xlabel(axis_label(ds, "time", ()))
    for panel in (top, bottom):
        panel.axhline(0, color="0.5", lw=0.8)
        panel.grid(alpha=0.3)
    top.legend(fontsize=7, title="lines: solver, dots: closed form", title_fontsize=7)
    top.set_title("Centre against time (Gao 2021, Figs 6-9)\nlargest difference from the closed form: "
                  f"{worst[0]:.1e} m, {worst[1]:.1e} m/s", fontsize=10)
    return fig


def figures(ds) -> dict:
    """The study's standard figures for whatever cube `ds` holds. A sampled
    design's `sample` dimension is no grid axis: a drawn spin ratio is a
    coordinate along it (the final displacement against it, point by point),
    and a swept spin ratio with drawn inputs gives a band (median, 5-95%)."""
    dims = ds["final_displacement"].dims
    grid = tuple(d for d in dims if d != SAMPLE)
    found = {}
    if SAMPLE in dims:
        if "spin_ratio" in ds and (grid == ("spin_ratio",) or (not grid and ds["spin_ratio"].dims == (SAMPLE,))):
            found["final_displacement"] = _final_vs_spin_sampled(ds)
    elif dims == ("spin_ratio",) or (len(dims) == 1 and ds.sizes.get("spin_ratio", 0) > 1):
        found["final_displacement"] = _final_vs_spin(ds)
    if len(dims) == 2 and "spin_ratio" in dims and SAMPLE not in dims:
        found["boundary"] = _boundary_map(ds)
    critical = ds["critical_spin_ratio"] if "critical_spin_ratio" in ds else None
    if critical is not None and critical.ndim >= 1 and SAMPLE not in critical.dims:
        found["critical_spin_ratio"] = _critical_map(ds)
    if "x" in ds and "x_dot" in ds:
        found["trajectories"] = _trajectories(ds)
    return found


def _final_vs_spin_sampled(ds):
    """A sampled design's final displacements against the spin ratio: each
    point where the spin ratio is drawn; where it is an axis, the median and
    the 5-95% band of the drawn points at each spin ratio."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
    x = ds["final_displacement"]
    drawn = [str(n) for n, c in ds.coords.items() if c.dims == (SAMPLE,) and n != SAMPLE]
    words = ", ".join(label_of(n, _declared()) for n in drawn) or "the drawn inputs"
    if "spin_ratio" in x.dims:
        x = x.transpose("spin_ratio", SAMPLE).values
        q = ds["spin_ratio"].values
        low, median, high = np.nanpercentile(x, [5, 50, 95], axis=1)
        ax.fill_between(q, low, high, alpha=0.3, label="5-95% of the drawn points")
        ax.plot(q, median, lw=1.5, label="median")
        ax.legend(fontsize=8)
        ax.set_title(f"Final displacement against spin ratio, {ds.sizes[SAMPLE]:,} draws of {words}", fontsize=10)
    else:
        ax.plot(ds["spin_ratio"].values, x.values, ".", ms=3)
        ax.set_title(f"Final displacement at {ds.sizes[SAMPLE]:,} drawn points ({words})", fontsize=10)
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set_xlabel(axis_label(ds, "spin_ratio", _declared()))
    ax.set_ylabel(axis_label(ds, "final_displacement", _declared()))
    ax.grid(alpha=0.3)
    return fig
