"""A warm process compiles nothing: the second `rollsweep run` of a sweep, in
a fresh process with the first one's compile cache, gets every program it
calls (the solver's batch function, and whatever else a run dispatches: fixed
parameters' batches, casts, checks) from the executables it kept, JAX's
persistent cache or the exported programs. A program JAX would not keep (under its default
thresholds: 1 s to compile) was compiled again in every process: 10-40 ms
each on 2 cores, where a warm run takes about a second in all.

Counted with JAX's monitoring events, as in JAX 0.10 and 0.12: every
compile, of a program read from the persistent cache too, records one
backend-compile duration; a program read from it also records a cache hit.
The difference is what XLA compiled. Nor does it trace anything: the
modules that trace a study's solve are not imported."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import jax

from conftest import cubes_identical

REPO = pathlib.Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
# The rolling ball's demo sweep of Fig. 14: 301 points and the critical spin
# ratio (its root search calls the solver again, point by point).
SWEEP = REPO / "studies" / "pingpong" / "demo" / "pingpong_spin_ratio.toml"

CHILD = textwrap.dedent("""
    import json, sys
    import jax.monitoring

    counts = {"compiles": 0, "cache_hits": 0}

    def on_duration(event, seconds, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            counts["compiles"] += 1

    def on_event(event, **kwargs):
        if event == "/jax/compilation_cache/cache_hits":
            counts["cache_hits"] += 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)
    from engine.cli.commands import entry

    code = entry(sys.argv[1:])
    counts["imported"] = sorted({m.partition(".")[0] for m in sys.modules} & {"equinox", "diffrax"})
    counts["kernel modules"] = sorted(m for m in sys.modules if "pallas" in m or m.startswith("engine.solve.kernel."))
    print(json.dumps(counts))
    sys.exit(code)
    """)


def run_in_a_fresh_process(cache: pathlib.Path, out: pathlib.Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "run", str(SWEEP), "--out", str(out), "--quiet", "--executor", "inline"],
        env=ENV | {"ROLLSWEEP_CACHE": str(cache)}, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_second_process_compiles_nothing(tmp_path):
    import xarray as xr

    cache = tmp_path / "cache"
    cold = run_in_a_fresh_process(cache, tmp_path / "cold.zarr")
    warm = run_in_a_fresh_process(cache, tmp_path / "warm.zarr")
    assert cold["compiles"] - cold["cache_hits"] > 0, cold  # what the count counts
    assert warm["compiles"] - warm["cache_hits"] == 0, f"a warm process compiled: {warm}"
    # Its solver's two programs (the grid's, the critical spin ratio's root search) not even
    # read from JAX's cache: their executables, kept by the first process, are loaded
    # (engine.solve.executables). On CPU nothing else is compiled; on a GPU the fixed
    # parameters' batches are made by programs read from JAX's cache.
    assert len(list((cache / "programs").glob("*.executable"))) == 2
    if jax.default_backend() == "cpu":
        assert warm["compiles"] == 0, warm
    # nor traced: what traces a study (diffrax, equinox: 0.26 s of imports) is not even imported
    assert cold["imported"] == ["diffrax", "equinox"] and warm["imported"] == [], (cold, warm)
    # and the fused kernel's (Pallas among them), which a CPU run of lanes never uses, neither; on a GPU,
    # where the fused kernel's program is read, only what registers its launcher (no Pallas, no NVRTC)
    kernel = "engine.solve.kernel."
    warm_gpu = [kernel + m for m in ("backends", "fused", "host", "stored")]
    assert warm["kernel modules"] == ([kernel + "fused"] if jax.default_backend() == "cpu" else warm_gpu), warm
    # and from the same programs, the same cube
    assert cubes_identical(*(xr.open_zarr(tmp_path / f"{name}.zarr").load() for name in ("cold", "warm")))
