"""Standard figures of the rebound studies."""

# matplotlib is imported where a figure is drawn: every run imports this module
# (its study names its figures) but never draws, and importing matplotlib costs
# ~0.4 s of a run's start-up.

import numpy as np

from engine.cube.plot import scale_axes

from ._bounce import MODEL_NAMES


def _map(ax, fig, ds, name, label, cmap="viridis"):
    da = ds[name].transpose("spin_ratio", "incidence_angle")
    mesh = ax.pcolormesh(ds["incidence_angle"].values, ds["spin_ratio"].values, da.values, shading="auto", cmap=cmap)
    fig.colorbar(mesh, ax=ax, label=label)
    phi = float(np.nanmedian(ds["critical_angle"].values))
    ax.axvline(phi, color="w", ls="--", lw=1.2)
    ax.annotate(f"critical angle {phi:.2f} deg", (phi, ds["spin_ratio"].values.max()), color="w", rotation=90,
                va="top", ha="right", fontsize=7)
    scale_axes(ax, ds, x="incidence_angle", y="spin_ratio")
    ax.set_xlabel("incidence angle alpha [deg]")
    ax.set_ylabel("spin ratio r wy / |v|")


def regime_figures(ds) -> dict:
    import matplotlib.pyplot as plt
    if set(ds["out_angle"].dims) != {"incidence_angle", "spin_ratio"}:
        return {}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    _map(left, fig, ds, "out_angle", "outgoing angle from the normal [deg]")
    _map(right, fig, ds, "out_spin_ratio", "outgoing spin ratio r wy / |Ve|", cmap="RdBu_r")
    fig.suptitle("Rebound regime: sliding right of the critical angle, rolling left (white: no such motion)",
                 fontsize=10)
    return {"regime": fig}


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
        ax.set_xticks(np.arange(len(group)) + 0.4 - width / 2, group)
        ax.set_ylabel(f"|measured - predicted| [{unit}]")
    axes[0].legend(fontsize=7)
    fig.suptitle("Rebound models against Table 1 (dots: the 12 bounces)", fontsize=10)
    return {"model_comparison": fig}


def landing_figures(ds) -> dict:
    import matplotlib
    import matplotlib.pyplot as plt
    dims = ds["outcome"].dims
    if len(dims) != 2:
        return {}
    y, x = dims
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    outcome = ds["outcome"].transpose(y, x).values
    cmap = matplotlib.colors.ListedColormap(["tab:green", "tab:red", "tab:gray", "tab:orange"])
    left.pcolormesh(ds[x].values, ds[y].values, outcome, cmap=cmap, vmin=0.5, vmax=4.5, shading="auto")
    left.set_title("outcome: green in, red net, grey out, orange double bounce", fontsize=9)
    landing = ds["landing_x"].where(ds["lands_in"] == 1).transpose(y, x)
    mesh = right.pcolormesh(ds[x].values, ds[y].values, landing.values, shading="auto")
    fig.colorbar(mesh, ax=right, label="landing x on the far half [m]")
    right.set_title("where it lands (in only)", fontsize=9)
    for ax in (left, right):
        scale_axes(ax, ds, x=x, y=y)
        ax.set_xlabel(f"{x} [{ds[x].attrs.get('units', '')}]")
        ax.set_ylabel(f"{y} [{ds[y].attrs.get('units', '')}]")
    return {"landing": fig}
