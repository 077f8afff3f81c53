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
            ax.semilogy(t, values, label=f"$|f_{str(c)[1:]}|$, {_setting(other[0], value)}")
    ax.set_xlabel("time $t$")
    ax.set_ylabel(r"residual $|f_i|$")
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
