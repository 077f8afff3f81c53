"""A million points' time histories stream to the store: the host's peak memory
stays at a few shards.

An outside closed-form study (installed as a user's package would be: an entry
point) whose two outputs are sampled at the sweep's times: the position and
speed of a damped oscillator, x(t) = exp(-c t) cos(w t) and its derivative,
over an axis of w. `rollsweep run` (the default path) writes 201 samples of
both for every point, in a child process whose peak resident memory is
reported beside the size of the samples (points x 201 x 2 x 8 bytes: 3.2 GB at
a million points). Then one point's curve and one time's map are read back
lazily and checked against the closed form.

Run: `python benchmarks/stream_samples.py [--points 1000000] [--samples 201]`
(--quick: 20,000 points).
"""

import argparse
import pathlib
import resource
import shutil
import sys
import tempfile
import textwrap
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _common import rollsweep_process, write_registration  # noqa: E402

MODEL = textwrap.dedent('''
    import jax.numpy as jnp

    from engine import TIME, Interval, Output, Parameter, PointResult, Status, Study

    def _solve(p, settings):
        t = jnp.asarray(settings.save_times)
        decay, turn = jnp.exp(-0.5 * t), p["w"] * t
        x = decay * jnp.cos(turn)
        return PointResult({"x": x, "x_dot": -0.5 * x - p["w"] * decay * jnp.sin(turn)}, jnp.int8(Status.SUCCESS))

    STUDY = Study(
        name="damped_oscillator", title="x = exp(-t/2) cos(w t)", source="closed form", version="1",
        parameters=(Parameter("w", "rad/s", 1.0, Interval(0.0, 100.0), "angular frequency"),),
        outputs=(Output("x", "m", "position at the sample times", dims=(TIME,)),
                 Output("x_dot", "m/s", "speed at the sample times", dims=(TIME,))),
        solve_point=_solve, save_times={"linspace": [0.0, 10.0, 201]})
''')


def exact(w, t):
    return np.exp(-0.5 * t) * np.cos(w * t)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=201)
    parser.add_argument("--quick", action="store_true", help="20,000 points")
    args = parser.parse_args()
    points = 20_000 if args.quick else args.points
    folder = pathlib.Path(tempfile.mkdtemp(prefix="stream-samples-"))
    try:
        package = folder / "damped_oscillator"
        package.mkdir()
        (package / "__init__.py").write_text(MODEL)
        registered = write_registration(folder / "site", package, {"damped_oscillator": "damped_oscillator:STUDY"})
        out = folder / "cube.zarr"
        sweep = folder / "sweep.toml"
        sweep.write_text(f'study = "damped_oscillator"\n[axes]\nw = {{ linspace = [0.0, 20.0, {points}] }}\n'
                         f'[save]\ntimes = {{ linspace = [0.0, 10.0, {args.samples}] }}\n[run]\nout = "{out}"\n')
        start = time.perf_counter()
        seconds, done = rollsweep_process("run", str(sweep), "--quiet", path=[registered])
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        samples = points * args.samples * 2 * 8
        disk = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        print(done.stdout.strip())
        print(f"{points:,} points x {args.samples} samples x 2 outputs: {samples / 2**30:.2f} GiB of samples, "
              f"{disk / 2**30:.2f} GiB on disk; run {seconds:.1f} s ({points / seconds:,.0f} points/s end to end)")
        print(f"peak resident memory of the run: {peak / 2**30:.2f} GiB "
              f"({peak / samples:.2f} of the samples' size)")
        import xarray as xr

        ds = xr.open_zarr(out)
        w, t = ds.w.values, ds.time.values
        one = ds.x.isel(w=points // 3).values  # one point's curve: one chunk
        at = ds.x.isel(time=args.samples // 2).values  # one time's map: a column of every chunk
        worst = max(np.max(np.abs(one - exact(w[points // 3], t))), np.max(np.abs(at - exact(w, t[args.samples // 2]))))
        print(f"read back: one point's curve and one time's map, largest difference from the closed form {worst:.1e} "
              f"({time.perf_counter() - start - seconds:.1f} s)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
