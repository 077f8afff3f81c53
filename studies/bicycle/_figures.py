"""Standard figures of the bicycle study, drawn from a cube."""

# matplotlib is imported where a figure is drawn: every run imports this module
# (its study names its figures) but never draws, and importing matplotlib costs
# ~0.4 s of a run's start-up.

import numpy as np

from engine.cube.plot import scale_axes

_STYLE = {"weave": "C0", "weave_conjugate": "C0", "capsize": "C1", "caster": "C2"}


def _eigen_speed(ds):
    """Meijaard et al. 2007, Fig. 3: real (solid) and imaginary (dashed) parts against v."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
    v = ds["v"].values
    for mode in ds["mode"].values:
        color = _STYLE.get(str(mode), None)
        label = None if mode == "weave_conjugate" else f"{mode} (real)"
        ax.plot(v, ds["eigenvalue_real"].sel(mode=mode).values, color=color, label=label)
    # The weave pair's imaginary part; the other modes stay real.
    ax.plot(v, np.abs(ds["eigenvalue_imag"].sel(mode="weave").values), color=_STYLE["weave"], ls="--",
            label="weave (|imag|)")
    for name, ls in (("double_root_speed", ":"), ("weave_speed", "-."), ("capsize_speed", "-.")):
        speed = float(ds[name].values.ravel()[0])
        if np.isfinite(speed):
            ax.axvline(speed, color="0.4", ls=ls, lw=0.8)
            ax.annotate(f"{name.split('_')[0]} {speed:.4f}", (speed, ax.get_ylim()[1]), rotation=90,
                        va="top", ha="right", fontsize=7)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_ylim(-10, 10)
    scale_axes(ax, ds, x="v")
    ax.set_xlabel("forward speed v [m/s]")
    ax.set_ylabel("eigenvalue [1/s]")
    ax.set_title("Benchmark bicycle: eigenvalues against speed (Meijaard 2007, Fig. 3)", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    return fig


def _design_map(ds):
    import matplotlib.pyplot as plt
    width = ds["stable_speed_width"]
    y, x = width.dims[:2]
    if width.ndim > 2:  # reduce the further design axes: share of stable designs
        extra = width.dims[2:]
        data = (width > 0).mean(extra)
        label = f"share of designs (over {', '.join(extra)}) with a stable speed range"
    else:
        data, label = width, "width of the self-stable speed range vc - vw [m/s]"
    fig, ax = plt.subplots(figsize=(6.5, 4.8), constrained_layout=True)
    mesh = ax.pcolormesh(ds[x].values, ds[y].values, data.transpose(y, x).values, shading="auto", cmap="viridis")
    fig.colorbar(mesh, ax=ax, label=label)
    if width.ndim == 2:
        for name, color in (("weave_speed", "w"), ("capsize_speed", "orange")):
            cs = ax.contour(ds[x].values, ds[y].values, ds[name].transpose(y, x).values, colors=color, linewidths=0.7)
            ax.clabel(cs, fontsize=6)
    scale_axes(ax, ds, x=x, y=y)
    ax.set_xlabel(f"{x} [{ds[x].attrs.get('units', '')}]")
    ax.set_ylabel(f"{y} [{ds[y].attrs.get('units', '')}]")
    ax.set_title("Self-stable speed range (white: weave speed, orange: capsize speed)", fontsize=9)
    return fig


def figures(ds) -> dict:
    found = {}
    if "eigenvalue_real" in ds and ds["eigenvalue_real"].dims == ("v", "mode"):
        found["eigenvalues"] = _eigen_speed(ds)
    if "stable_speed_width" in ds and ds["stable_speed_width"].ndim >= 2:
        found["design_map"] = _design_map(ds)
    return found


def response_figures(ds) -> dict:
    """Weave period seen in the time response against the linear prediction."""
    import matplotlib.pyplot as plt
    if ds["weave_period"].dims != ("v",):
        return {}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.5, 5.5), sharex=True, constrained_layout=True)
    v = ds["v"].values
    top.plot(v, ds["weave_period_linear"].values, label="linear: 2 pi / Im(weave eigenvalue)")
    top.plot(v, ds["weave_period"].values, "o", ms=3, label="time response: 2 x lean-extremum spacing")
    top.set_ylabel("weave period [s]")
    top.legend(fontsize=8)
    top.set_title("Release at lean rate 0.5 rad/s (Meijaard et al. 2007, section 8)", fontsize=10)
    bottom.plot(v, ds["fall_time"].values, "o-", ms=3, color="C3")
    bottom.set_ylabel("fall time [s] (none: did not fall)")
    scale_axes(bottom, ds, x="v")  # shared with the top plot
    bottom.set_xlabel("forward speed v [m/s]")
    return {"response": fig}
