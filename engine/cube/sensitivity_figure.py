"""A sensitivity sweep's indices drawn: the figure `rollsweep plot` and
`ds.rollsweep.figures()` give a cube that holds them. Of an opened cube (an
xarray Dataset) alone: no store is read here."""

import numpy as np

from engine.study.interface import readable


def cube_figures(ds, study, skipped: list | None = None) -> dict:
    """A cube's standard figures: a sensitivity sweep's indices as bars, and
    the study's own figures. A study's figures are written for its grids; on
    a cube with a sampled design's `sample` dimension (a [samples] or a
    sensitivity sweep) each study draws those that make sense, and one that
    raises there is skipped, never a traceback: one line in `skipped` says
    why (so one that draws nothing there)."""
    from engine.sweep.samples import SAMPLE

    found = {"sensitivity": figure(ds)} if has_indices(ds) else {}
    if study.figures is None:
        return found
    if SAMPLE not in ds.dims:
        return study.figures(ds)  # a grid's (a sensitivity sweep's cube always has a sample dimension)
    import matplotlib.pyplot as plt

    before = set(plt.get_fignums())
    dims = ", ".join(str(d) for d in ds.dims)
    try:
        own = study.figures(ds)
    except Exception as error:  # noqa: BLE001 - any figure code's: skipped in one line
        for number in set(plt.get_fignums()) - before:  # what it had drawn before it raised
            plt.close(number)
        said = " ".join(str(error).split())
        _say(skipped, f"study {study.name!r}'s figures skipped: they do not draw a cube with dimensions ({dims}) "
                      f"({type(error).__name__}: {said})")
        return found
    if isinstance(own, dict) and not own and not found:
        _say(skipped, f"study {study.name!r} has no figure of a cube with dimensions ({dims}); "
                      "its figures are of its grids")
    if not isinstance(own, dict):
        return own  # plot_cube names what it is
    return found | {name: fig for name, fig in own.items() if name not in found}


def _say(skipped: list | None, line: str) -> None:
    if skipped is not None:
        skipped.append(line)


def has_indices(ds) -> bool:
    """Whether an opened cube (an xarray Dataset) holds sensitivity indices."""
    return "sensitivity_method" in ds.attrs and ("ST" in ds or "mu_star" in ds)


def figure(ds):
    """One panel per output: Sobol's S1 and ST (or Morris' mu*) of each
    parameter as bars with their confidence intervals, the parameters
    ranked by ST (mu*)."""
    import matplotlib.pyplot as plt

    sobol = "ST" in ds
    outputs = [str(v) for v in ds["output"].values]
    fig, axes = plt.subplots(len(outputs), 1, figsize=(7.5, 2.8 * len(outputs)), squeeze=False)
    level = f"{float(ds.attrs.get('sensitivity_confidence', 0.95)):.0%}"
    grid = [d for d in ds["ST" if sobol else "mu_star"].dims if d not in ("output", "parameter")]
    for ax, output in zip(axes[:, 0], outputs, strict=True):
        one = ds.sel(output=output)
        if grid:  # indices at each grid point: the bars their means over it
            one = one[[n for n in ("S1", "S1_conf", "ST", "ST_conf", "mu_star", "mu_star_conf", "sigma")
                       if n in one]].mean(grid)
        order = np.argsort(-(one["ST"] if sobol else one["mu_star"]).values, kind="stable")
        names = [str(ds["parameter"].values[j]) for j in order]
        x = np.arange(len(names))
        if sobol:
            for shift, name, colour in ((-0.2, "S1", "tab:blue"), (0.2, "ST", "tab:orange")):
                ax.bar(x + shift, one[name].values[order], 0.4, yerr=one[f"{name}_conf"].values[order], capsize=3,
                       color=colour, label=name)
            ax.set_ylabel("index")
        else:
            ax.bar(x - 0.2, one["mu_star"].values[order], 0.4, yerr=one["mu_star_conf"].values[order], capsize=3,
                   color="tab:blue", label=r"$\mu^*$")
            ax.bar(x + 0.2, one["sigma"].values[order], 0.4, color="tab:gray", label=r"$\sigma$")
            ax.set_ylabel("elementary effect")
        ax.set_xticks(x, names, rotation=45 if len(names) > 8 else 0, ha="right" if len(names) > 8 else "center")
        ax.axhline(0.0, color="black", linewidth=0.6)
        label = (ds[output].attrs.get("long_name") if output in ds else None) or readable(output)
        over = f", means over {', '.join(grid)}" if grid else ""
        ax.set_title(f"{label} ({level} intervals{over})", fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle(ds.attrs.get("sensitivity", ""), fontsize=8)
    fig.tight_layout()
    return fig
