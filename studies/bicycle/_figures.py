"""Standard figures of the bicycle study, drawn from a cube."""

# matplotlib is imported where a figure is drawn: every run imports this module
# (its study names its figures) but never draws, and importing matplotlib costs
# ~0.4 s of a run's start-up.

import numpy as np

from engine.cube.plot import axis_label, label_of, scale_axes

# A sampled design's dimension (engine.sweep.samples.SAMPLE).
SAMPLE = "sample"


def _declared():
    from ._response import RESPONSE_OUTPUTS, RESPONSE_PARAMETERS
    from ._study import OUTPUTS, PARAMETERS  # here: _study imports this module
    return PARAMETERS + OUTPUTS + RESPONSE_PARAMETERS + RESPONSE_OUTPUTS

_STYLE = {"weave": "C0", "weave_conjugate": "C0", "capsize": "C1", "caster": "C2"}


def _eigen_speed(ds):
    """Meijaard et al. 2007, Fig. 3: real (solid) and imaginary (dashed) parts against v."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
    v = ds["v"].values
    for mode in ds["mode"].values:
        color = _STYLE.get(str(mode), None)
        label = None if mode == "weave_conjugate" else rf"{mode} $\mathrm{{Re}}\,\lambda$"
        ax.plot(v, ds["eigenvalue_real"].sel(mode=mode).values, color=color, label=label)
    # The weave pair's imaginary part; the other modes stay real.
    ax.plot(v, np.abs(ds["eigenvalue_imag"].sel(mode="weave").values), color=_STYLE["weave"], ls="--",
            label=r"weave $|\mathrm{Im}\,\lambda|$")
    for name, ls, symbol in (("double_root_speed", ":", "v_d"), ("weave_speed", "-.", "v_w"),
                             ("capsize_speed", "-.", "v_c")):
        speed = float(ds[name].values.ravel()[0])
        if np.isfinite(speed):
            ax.axvline(speed, color="0.4", ls=ls, lw=0.8)
            ax.annotate(f"${symbol} = {speed:.4f}$", (speed, ax.get_ylim()[1]), rotation=90,
                        va="top", ha="right", fontsize=7)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_ylim(-10, 10)
    scale_axes(ax, ds, x="v")
    ax.set_xlabel(axis_label(ds, "v", _declared()))
    ax.set_ylabel(r"eigenvalue $\lambda$ [1/s]")
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
        over = ", ".join(label_of(name, _declared()) for name in extra)
        label = f"share of designs (over {over})\nwith a self-stable speed range"
    else:
        data, label = width, axis_label(ds, "stable_speed_width", _declared())
    fig, ax = plt.subplots(figsize=(6.5, 4.8), constrained_layout=True)
    mesh = ax.pcolormesh(ds[x].values, ds[y].values, data.transpose(y, x).values, shading="auto", cmap="viridis")
    fig.colorbar(mesh, ax=ax, label=label)
    if width.ndim == 2:
        for name, color in (("weave_speed", "w"), ("capsize_speed", "orange")):
            cs = ax.contour(ds[x].values, ds[y].values, ds[name].transpose(y, x).values, colors=color, linewidths=0.7)
            ax.clabel(cs, fontsize=6)
    scale_axes(ax, ds, x=x, y=y)
    ax.set_xlabel(axis_label(ds, x, _declared()))
    ax.set_ylabel(axis_label(ds, y, _declared()))
    ax.set_title("Self-stable speed range (white: weave speed $v_w$, orange: capsize speed $v_c$)", fontsize=9)
    return fig


def figures(ds) -> dict:
    found = {}
    if "eigenvalue_real" in ds and ds["eigenvalue_real"].dims == ("v", "mode"):
        found["eigenvalues"] = _eigen_speed(ds)
    if "eigenvalue_real" in ds and ds["eigenvalue_real"].dims == (SAMPLE, "v", "mode"):
        found["eigenvalue_bands"] = _eigen_bands(ds)
    # A design map is of two design axes (a sampled design's index is none).
    width = ds["stable_speed_width"] if "stable_speed_width" in ds else None
    if width is not None and width.ndim >= 2 and SAMPLE not in width.dims:
        found["design_map"] = _design_map(ds)
    return found


def _eigen_bands(ds):
    """The eigenvalues against speed of a sampled set of designs: each mode's
    median real part and the band of 5-95% of the designs (the weave's |Im|
    dashed); the weave and capsize speeds' 5-95% ranges shaded."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
    v = ds["v"].values
    n = ds.sizes[SAMPLE]

    def band(values, color, label, ls="-"):
        low, median, high = np.nanpercentile(values, [5, 50, 95], axis=0)
        ax.fill_between(v, low, high, color=color, alpha=0.25, lw=0)
        ax.plot(v, median, color=color, ls=ls, label=label)

    for mode in ds["mode"].values:
        if mode == "weave_conjugate":  # the weave's real part again
            continue
        real = ds["eigenvalue_real"].sel(mode=mode).transpose(SAMPLE, "v").values
        band(real, _STYLE.get(str(mode)), rf"{mode} $\mathrm{{Re}}\,\lambda$")
    imag = np.abs(ds["eigenvalue_imag"].sel(mode="weave").transpose(SAMPLE, "v").values)
    band(imag, _STYLE["weave"], r"weave $|\mathrm{Im}\,\lambda|$", ls="--")
    for name, color, symbol in (("weave_speed", "C0", "v_w"), ("capsize_speed", "C1", "v_c")):
        if name not in ds:
            continue
        speeds = ds[name].values.ravel()
        speeds = speeds[np.isfinite(speeds)]
        if speeds.size:
            low, high = np.percentile(speeds, [5, 95])
            ax.axvspan(low, high, color=color, alpha=0.12, lw=0, label=f"${symbol}$: {low:.2f}-{high:.2f} m/s")
    ax.axhline(0, color="k", lw=0.6)
    ax.set_ylim(-10, 10)
    scale_axes(ax, ds, x="v")
    ax.set_xlabel(axis_label(ds, "v", _declared()))
    ax.set_ylabel(r"eigenvalue $\lambda$ [1/s]")
    ax.set_title(f"Eigenvalues against speed of {n:,} drawn designs: median, 5-95% band", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    return fig


def response_figures(ds) -> dict:
    """Weave period seen in the time response against the linear prediction;
    and where the cube samples times, lean and steer against time."""
    found = {"lean_and_steer": _lean_and_steer(ds)} if "lean" in ds and ds["lean"].dims == ("v", "time") else {}
    if "weave_period" not in ds or ds["weave_period"].dims != ("v",):
        return found
    return found | _weave_period(ds)


def _lean_and_steer(ds):
    """Lean and steer against time, one curve a speed (Meijaard et al. 2007,
    section 8: below, inside and above the self-stable speed range)."""
    import matplotlib.pyplot as plt
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.5, 5.5), sharex=True, constrained_layout=True)
    for i, v in enumerate(ds["v"].values):
        label = f"$v$ = {v:g} m/s"
        top.plot(ds["time"].values, ds["lean"].values[i], color=f"C{i}", label=label)
        bottom.plot(ds["time"].values, ds["steer"].values[i], color=f"C{i}")
    top.set_ylabel(axis_label(ds, "lean", _declared()))
    bottom.set_ylabel(axis_label(ds, "steer", _declared()))
    bottom.set_xlabel(axis_label(ds, "time", ()))
    for panel in (top, bottom):
        panel.axhline(0, color="0.5", lw=0.8)
        panel.grid(alpha=0.3)
    top.legend(fontsize=8)
    top.set_title(r"Released upright at lean rate $\dot\phi_0$ (Meijaard et al. 2007, section 8)", fontsize=10)
    return fig


def _weave_period(ds) -> dict:
    import matplotlib.pyplot as plt
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.5, 5.5), sharex=True, constrained_layout=True)
    v = ds["v"].values
    top.plot(v, ds["weave_period_linear"].values, label=r"linear: $2\pi/|\mathrm{Im}\,\lambda_\mathrm{weave}|$")
    top.plot(v, ds["weave_period"].values, "o", ms=3, label=r"time response: $2\times$ lean-extremum spacing")
    top.set_ylabel("weave period [s]")
    top.legend(fontsize=8)
    top.set_title(r"Release at lean rate $\dot\phi_0 = 0.5$ rad/s (Meijaard et al. 2007, section 8)", fontsize=10)
    bottom.plot(v, ds["fall_time"].values, "o-", ms=3, color="C3")
    bottom.set_ylabel(axis_label(ds, "fall_time", _declared()) + "\n(none: did not fall)")
    scale_axes(bottom, ds, x="v")  # shared with the top plot
    bottom.set_xlabel(axis_label(ds, "v", _declared()))
    return {"response": fig}
