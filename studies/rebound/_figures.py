"""Standard figures of the rebound studies."""

# matplotlib is imported where a figure is drawn: every run imports this module
# (its study names its figures) but never draws, and importing matplotlib costs
# ~0.4 s of a run's start-up.

import numpy as np

from engine.cube.plot import axis_label, scale_axes

from ._bounce import MODEL_NAMES

# A sampled design's dimension (engine.sweep.samples.SAMPLE).
SAMPLE = "sample"

# The outcomes of a landing, by code, and how the landing map colours them.
_OUTCOMES = ((1, "in (far half)", "tab:green"), (2, "net fault", "tab:red"), (3, "out (off the table)", "tab:gray"),
             (4, "second bounce on the near half", "tab:orange"))


def _declared(name: str):
    """The parameters and outputs of study `name` (imported here: its module imports this one)."""
    from ._flight import LANDING
    from ._study import REBOUND, REGIME, TABLE1
    study = {s.name: s for s in (REBOUND, REGIME, TABLE1, LANDING)}[name]
    return study.parameters + study.outputs


def _map(ax, fig, ds, name, label, cmap="viridis"):
    da = ds[name].transpose("spin_ratio", "incidence_angle")
    mesh = ax.pcolormesh(ds["incidence_angle"].values, ds["spin_ratio"].values, da.values, shading="auto", cmap=cmap)
    fig.colorbar(mesh, ax=ax, label=label)
    phi = float(np.nanmedian(ds["critical_angle"].values))
    ax.axvline(phi, color="w", ls="--", lw=1.2)
    ax.annotate(rf"critical angle $\alpha_c = {phi:.2f}^\circ$", (phi, ds["spin_ratio"].values.max()), color="w",
                rotation=90,
                va="top", ha="right", fontsize=7)
    scale_axes(ax, ds, x="incidence_angle", y="spin_ratio")
    ax.set_xlabel(axis_label(ds, "incidence_angle", _declared("rebound_regime")))
    ax.set_ylabel(axis_label(ds, "spin_ratio", _declared("rebound_regime")))


def regime_figures(ds) -> dict:
    import matplotlib.pyplot as plt
    if set(ds["out_angle"].dims) != {"incidence_angle", "spin_ratio"}:
        return {}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    _map(left, fig, ds, "out_angle", axis_label(ds, "out_angle", _declared("rebound_regime")))
    _map(right, fig, ds, "out_spin_ratio", axis_label(ds, "out_spin_ratio", _declared("rebound_regime")),
         cmap="RdBu_r")
    fig.suptitle("Rebound regime: sliding right of the critical angle, rolling left (white: no such motion)",
                 fontsize=10)
    return {"regime": fig}


def bounce_figures(ds) -> dict:
    """Outgoing velocity and spin of each model along one swept parameter (the
    demo's incoming spin wy), with where the ball leaves rolling shaded."""
    import matplotlib.pyplot as plt
    if SAMPLE in ds["out_angle"].dims:
        return _uncertainty(ds)
    along = [d for d in ds["out_vx"].dims if d != "model"]
    if "model" not in ds.dims or len(along) != 1:
        return {}
    (x,) = along
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for ax, name in zip(axes, ("out_vx", "out_wy"), strict=True):
        for model in ds["model"].values:
            ds[name].sel(model=model).plot(ax=ax, x=x, label=MODEL_NAMES[int(model)])
        rolling = (ds["regime"].sel(model=ds["model"].values[0]) == 0).values
        ax.fill_between(ds[x].values, 0, 1, where=rolling, transform=ax.get_xaxis_transform(), color="0.9",
                        label="rolling (first model)")
        ax.set_title("")
    axes[0].legend(fontsize=7)
    fig.suptitle("Table bounce by model: outgoing vx and wy (shaded: the ball leaves rolling)", fontsize=10)
    return {"bounce": fig}


def _uncertainty(ds) -> dict:
    """A sampled design's outgoing angle and spin (x, y): each model's histogram
    over the drawn incoming velocities and spins, its mean and standard
    deviation in the legend; beside any other axis a band (median, 5-95%)."""
    import matplotlib.pyplot as plt
    names = [n for n in ("out_angle", "out_wx", "out_wy") if n in ds]
    other = [d for d in ds["out_angle"].dims if d not in (SAMPLE, "model")]
    if not names or other:
        return {}
    models = [int(m) for m in ds["model"].values] if "model" in ds["out_angle"].dims else [None]
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.8), constrained_layout=True, squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        for k, model in enumerate(models):
            values = (ds[name] if model is None else ds[name].sel(model=model)).values
            values = values[np.isfinite(values)]
            label = "" if model is None else MODEL_NAMES[model] + ": "
            ax.hist(values, bins=40, alpha=0.55, color=f"C{k}",
                    label=f"{label}{values.mean():.2f} $\\pm$ {values.std(ddof=1):.2f}")
        ax.set_xlabel(axis_label(ds, name, _declared("rebound")))
        ax.set_ylabel("drawn points")
        ax.legend(fontsize=7, title="mean $\\pm$ sd", title_fontsize=7)
    drawn = [str(n) for n, c in ds.coords.items() if c.dims == (SAMPLE,) and n != SAMPLE]
    fig.suptitle(f"Outgoing angle and spin under the inputs' uncertainty: {ds.sizes[SAMPLE]:,} draws of "
                 f"{', '.join(drawn)}", fontsize=10)
    return {"uncertainty": fig}


def table1_figures(ds) -> dict:
    """Error of each model per component against the 12 measured bounces."""
    import matplotlib.pyplot as plt
    if "sample" not in ds.dims or "model" not in ds.dims:
        return {}
    components = ("vx", "vy", "vz", "wx", "wy", "wz")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    width = 0.8 / ds.sizes["model"]
    for k, model in enumerate(ds["model"].values):
        name = MODEL_NAMES[int(model)]
        for ax, group in zip(axes, (components[:3], components[3:]), strict=True):
            errors = np.stack([ds[f"error_{c}"].sel(model=model).values for c in group])
            x = np.arange(len(group)) + k * width
            ax.bar(x, np.abs(errors).mean(axis=1), width, label=f"{name} (mean |error|)", alpha=0.8)
            ax.plot(np.repeat(x, errors.shape[1]), np.abs(errors).ravel(), "k.", ms=2)
    for ax, group, unit in zip(axes, (components[:3], components[3:]), ("m/s", "rad/s"), strict=True):
        ax.set_xticks(np.arange(len(group)) + 0.4 - width / 2, [f"${c[0].replace('w', chr(92) + 'omega')}_{c[1]}$"
                                                                 for c in group])
        ax.set_ylabel(f"|measured $-$ predicted| [{unit}]")
    axes[0].legend(fontsize=7)
    fig.suptitle("Rebound models against Table 1 (dots: the 12 bounces)", fontsize=10)
    return {"model_comparison": fig}


def landing_figures(ds) -> dict:
    import matplotlib
    import matplotlib.patches
    import matplotlib.pyplot as plt
    dims = ds["outcome"].dims
    if len(dims) != 2:
        return {}
    y, x = dims
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    outcome = ds["outcome"].transpose(y, x).values
    cmap = matplotlib.colors.ListedColormap([color for _, _, color in _OUTCOMES])
    left.pcolormesh(ds[x].values, ds[y].values, outcome, cmap=cmap, vmin=0.5, vmax=4.5, shading="auto")
    left.legend(handles=[matplotlib.patches.Patch(color=color, label=text) for _, text, color in _OUTCOMES],
                title="outcome", fontsize=7, title_fontsize=8, loc="best", framealpha=0.85)
    left.set_title("Outcome of the flight", fontsize=9)
    landing = ds["landing_x"].where(ds["lands_in"] == 1).transpose(y, x)
    mesh = right.pcolormesh(ds[x].values, ds[y].values, landing.values, shading="auto")
    fig.colorbar(mesh, ax=right, label=axis_label(ds, "landing_x", _declared("rebound_landing"))
                 + " (far half)")
    right.set_title("Where it lands (in only)", fontsize=9)
    for ax in (left, right):
        scale_axes(ax, ds, x=x, y=y)
        ax.set_xlabel(axis_label(ds, x, _declared("rebound_landing")))
        ax.set_ylabel(axis_label(ds, y, _declared("rebound_landing")))
    return {"landing": fig}
