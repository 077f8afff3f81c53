"""Standard figures of the hoop study."""

# matplotlib is imported where a figure is drawn: every run imports this module
# (its study names its figures) but never draws, and importing matplotlib costs
# ~0.4 s of a run's start-up.

import numpy as np


def _residual_map(ds):
    import matplotlib.pyplot as plt
    da = ds["max_residual"].transpose("step", "stabilization")
    fig, ax = plt.subplots(figsize=(6.5, 4.5), constrained_layout=True)
    lam = ds["stabilization"].values
    for k, h in enumerate(ds["step"].values):
        values = da.sel(step=h).values
        line = ax.loglog(lam[lam > 0], values[lam > 0], marker="o", ms=3, label=f"h = {h:g}")[0]
        if np.any(lam == 0):  # no stabilisation cannot sit on a log axis: a dashed level
            ax.axhline(values[lam == 0][0], color=line.get_color(), ls="--", lw=0.8,
                       label=f"h = {h:g}, lambda = 0" if k == 0 else None)
    ax.set_xlabel("stabilisation lambda")
    ax.set_ylabel("steady max residual max_i |f_i|")
    ax.axhline(7e-9, color="0.5", ls=":", lw=0.8)
    ax.set_title("Steady residuals, RK2 (seed section 4: < 7e-9 at lambda = 1e3, h = 1e-5)", fontsize=9)
    ax.legend(fontsize=8)
    return fig


def _transient(ds):
    import matplotlib.pyplot as plt
    hist = ds["residual_history"]
    fig, ax = plt.subplots(figsize=(6.5, 4.5), constrained_layout=True)
    duration = float(ds.attrs.get("parameter.duration", 1.0))
    t = np.linspace(0, duration, hist.sizes["sample"])
    other = [d for d in hist.dims if d not in ("sample", "constraint")]
    for value in ds[other[0]].values:
        for c in hist["constraint"].values:
            values = np.abs(hist.sel({other[0]: value, "constraint": c}).values)
            ax.semilogy(t, values, label=f"{c}, {other[0]}={value:g}")
    ax.set_xlabel("time")
    ax.set_ylabel("|f_i|")
    ax.set_title("Decay of initial residuals (seed Fig. 2)", fontsize=10)
    ax.legend(fontsize=6, ncol=2)
    return fig


def figures(ds) -> dict:
    found = {}
    if "max_residual" in ds and set(ds["max_residual"].dims) == {"stabilization", "step"}:
        found["residuals"] = _residual_map(ds)
    if "residual_history" in ds and ds["residual_history"].ndim == 3:
        found["transient"] = _transient(ds)
    return found
