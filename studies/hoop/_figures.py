"""Standard figures of the hoop study."""

# matplotlib is imported where a figure is drawn: every run imports this module
# (its study names its figures) but never draws, and importing matplotlib costs
# ~0.4 s of a run's start-up.

import numpy as np

from engine.cube.plot import axis_label

# How a legend names a value of a swept parameter (the seed's notation).
_SYMBOL = {"stabilization": r"\lambda", "step": "h", "initial_error": r"\varepsilon", "duration": "T"}


def _declared():
    from ._study import OUTPUTS, PARAMETERS  # here: _study imports this module
    return PARAMETERS + OUTPUTS


def _math(value: float) -> str:
    """A number for mathtext: 1e-05 as 10^{-5}, 2e-05 as 2\times10^{-5}."""
    text = f"{value:g}"
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    power = f"10^{{{int(exponent)}}}"
    return power if mantissa == "1" else f"{mantissa}\times{power}"


def _setting(name: str, value: float) -> str:
    symbol = _SYMBOL.get(name)
    if symbol is None:
        from engine.cube.plot import label_of
        return f"{label_of(name, _declared())} = ${_math(value)}$"
    return f"${symbol} = {_math(value)}$"


def _residual_map(ds):
    import matplotlib.pyplot as plt
    da = ds["max_residual"].transpose("step", "stabilization")
    fig, ax = plt.subplots(figsize=(6.5, 4.5), constrained_layout=True)
    lam = ds["stabilization"].values
    for h in ds["step"].values:
        values = da.sel(step=h).values
        line = ax.loglog(lam[lam > 0], values[lam > 0], marker="o", ms=3, label=_setting("step", h))[0]
        if np.any(lam == 0):  # no stabilisation cannot sit on a log axis: a dashed level
            ax.axhline(values[lam == 0][0], color=line.get_color(), ls="--", lw=0.8,
                       label=f"{_setting('step', h)}, no stabilisation ($\\lambda = 0$)")
    ax.set_xlabel(axis_label(ds, "stabilization", _declared()))
    ax.set_ylabel("steady " + axis_label(ds, "max_residual", _declared()))
    ax.axhline(7e-9, color="0.5", ls=":", lw=0.8, label=r"seed's bound $7\times10^{-9}$")
    ax.set_title(r"Steady residuals, RK2 (seed section 4: $< 7\times10^{-9}$ at $\lambda = 10^3$, $h = 10^{-5}$)",
                 fontsize=9)
    ax.legend(fontsize=8)
    return fig


# Curves one figure draws at most (points of the cube's other axes).
_MOST_CURVES = 6


def _points(ds, name):
    """The cube's points of `name` (at most _MOST_CURVES, evenly chosen): each
    as (legend text, {dimension: index}) over the dims other than time and
    constraint."""
    axes = [d for d in ds[name].dims if d not in ("time", "constraint")]
    shape = tuple(ds.sizes[d] for d in axes)
    count = int(np.prod(shape)) if shape else 1
    chosen = np.unique(np.linspace(0, count - 1, min(_MOST_CURVES, count)).astype(int))
    found = []
    for i in chosen:
        index = dict(zip(axes, np.unravel_index(i, shape), strict=True))
        text = ", ".join(_solver(ds[d].values[k]) if d == "step" else _setting(d, ds[d].values[k])
                         for d, k in index.items())
        found.append((text, index))
    return found


def _solver(step: float) -> str:
    return "adaptive" if step == 0 else f"RK2, {_setting('step', step)}"


def _transient(ds):
    """The seed's Fig. 2: |f_i| against time from wrong initial data, one panel
    a solver (where the cube sweeps the step), one colour a point of the cube's
    other axes (lambda), one line style a constraint."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    steps = ds["step"].values if "step" in ds["residual"].dims else [None]
    fig, panels = plt.subplots(1, len(steps), figsize=(5 + 3.5 * len(steps), 4.5), sharey=True, squeeze=False,
                               constrained_layout=True)
    t = ds["time"].values
    styles = ("-", "--", "-.", ":")
    for panel, h in zip(panels[0], steps, strict=True):
        da = ds["residual"] if h is None else ds["residual"].sel(step=h)
        for colour, (text, index) in enumerate(_points(da.to_dataset(name="residual"), "residual")):
            f = da.isel(index).transpose("constraint", "time").values
            for i, style in enumerate(styles):
                panel.semilogy(t, np.abs(f[i]), color=f"C{colour}", ls=style, lw=1.1, label=text if i == 0 else None)
        panel.set_xlabel(axis_label(ds, "time", ()))
        panel.grid(alpha=0.3)
        if h is not None:
            panel.set_title(_solver(h), fontsize=9)
        handles, labels = panel.get_legend_handles_labels()
        handles += [Line2D([], [], color="k", ls=style, lw=1.1) for style in styles]
        labels += [f"$|f_{i + 1}|$" for i in range(len(styles))]
        panel.legend(handles, labels, fontsize=7, ncol=2)
    panels[0][0].set_ylabel(r"residual $|f_i|$")
    lam = ds["stabilization"].values if "stabilization" in ds.dims else [ds.attrs.get("parameter.stabilization")]
    if all(value == 0 for value in lam):
        title = r"Residuals without stabilisation ($\lambda = 0$): an initial error does not decay"
    else:
        title = (r"Decay of initial residuals (seed Fig. 2): $f_2, f_3, f_4 \propto e^{-\lambda t}$, "
                 r"$f_1 \propto (1 + \lambda t) e^{-\lambda t}$")
    fig.suptitle(title, fontsize=10)
    return fig


def _steady(ds):
    """The seed's Fig. 3: f1..f4 against time on a window of a long run, one
    panel a constraint, one colour a point of the cube; the largest |f_i| in
    the title (seed: < 7e-9 at lambda = 1e3, h = 1e-5, f3 the largest)."""
    import matplotlib.pyplot as plt
    fig, panels = plt.subplots(4, 1, figsize=(6.5, 7), sharex=True, constrained_layout=True)
    t = ds["time"].values
    largest = []
    for colour, (text, index) in enumerate(_points(ds, "residual")):
        f = ds["residual"].isel(index).transpose("constraint", "time").values
        largest.append(f"{np.nanmax(np.abs(f)):.1e} ({text})")
        for i, panel in enumerate(panels):
            panel.plot(t, f[i], color=f"C{colour}", lw=0.7, label=text if i == 0 else None)
    for i, panel in enumerate(panels):
        panel.set_ylabel(f"$f_{i + 1}$")
        panel.grid(alpha=0.3)
    panels[-1].set_xlabel(axis_label(ds, "time", ()))
    panels[0].legend(fontsize=7)
    panels[0].set_title("Steady residuals from integration errors (seed Fig. 3)\nlargest $|f_i|$: "
                        + "; ".join(largest), fontsize=9)
    return fig


def _contact_path(ds):
    """The seed's Fig. 4: the contact point's path (x_a, z_a) against the
    track z = p(x), and how far off the track it is (z_a - p(x_a) = -f1)
    against time, one colour a point of the cube."""
    import matplotlib.pyplot as plt

    from ._profile import p

    def fixed(name):
        return float(ds.attrs.get(f"parameter.{name}", _defaults()[name]))

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.5, 7), constrained_layout=True)
    t = ds["time"].values
    lowest, highest = np.inf, -np.inf
    for colour, (text, index) in enumerate(_points(ds, "contact_x")):
        a = float(ds["a"].values[index["a"]]) if "a" in index else fixed("a")
        b = float(ds["b"].values[index["b"]]) if "b" in index else fixed("b")
        xa = ds["contact_x"].isel(index).values
        za = ds["contact_z"].isel(index).values
        top.plot(xa, za, color=f"C{colour}", lw=0.8, label=f"contact point, {text}")
        bottom.semilogy(t, np.abs(za - np.asarray(p(xa, a, b))), color=f"C{colour}", lw=0.8, label=text)
        if np.any(np.isfinite(xa)):
            lowest, highest = min(lowest, np.nanmin(xa)), max(highest, np.nanmax(xa))
    if np.isfinite(lowest):
        x = np.linspace(lowest - 0.1, highest + 0.1, 400)
        top.plot(x, p(x, fixed("a"), fixed("b")), color="k", lw=1.5, ls="--", zorder=0, label="track $z = p(x)$")
    top.set_xlabel(axis_label(ds, "contact_x", _declared()))
    top.set_ylabel(axis_label(ds, "contact_z", _declared()))
    top.legend(fontsize=7)
    top.set_title("Contact point against the track (seed Fig. 4)", fontsize=10)
    bottom.set_xlabel(axis_label(ds, "time", ()))
    bottom.set_ylabel(r"off the track $|z_a - p(x_a)| = |f_1|$")
    bottom.grid(alpha=0.3)
    bottom.legend(fontsize=7)
    return fig


def _defaults():
    from ._study import PARAMETERS
    return {p.name: p.default for p in PARAMETERS}


def figures(ds) -> dict:
    found = {}
    if "max_residual" in ds and set(ds["max_residual"].dims) == {"stabilization", "step"} and "time" not in ds.dims:
        found["residuals"] = _residual_map(ds)
    if "residual" in ds and "time" in ds["residual"].dims:
        # From t = 0: the decay of initial residuals (Fig. 2); a window later in
        # the run: the steady residuals (Fig. 3).
        if ds["time"].values[0] == 0:
            found["transient"] = _transient(ds)
        else:
            found["steady"] = _steady(ds)
    if "contact_x" in ds and "contact_z" in ds and "time" in ds["contact_x"].dims:
        found["contact_path"] = _contact_path(ds)
    return found
