"""Where the test suite's compile time goes: JAX's compile events per test.

A pytest plugin and its report. Loaded into a run, it records, for each test,
the seconds JAX spent tracing, lowering and compiling (its
`/jax/core/compile/...` duration events, on any thread of the test's process)
and how many programs it compiled; each pytest-xdist worker writes its own
JSON file into $COMPILE_PROFILE (default: compile-profile/):

    COMPILE_PROFILE=/tmp/cp PYTHONPATH=benchmarks make test PYTEST_ARGS="-p compile_profile"
    python benchmarks/compile_profile.py /tmp/cp [--top 30]

The report prints the costliest files and tests. Tests that run their work
in another process (`rollsweep` command lines, notebooks, dask workers) show
no compile time here: pytest's --durations has their whole time.
"""

import argparse
import collections
import json
import os
import pathlib

EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}
_current = ["<collection>"]  # the test running now (events between tests: "<between>")
_seconds: dict = collections.defaultdict(collections.Counter)


def pytest_configure(config):
    import jax

    def record(event, seconds, **kwargs):
        phase = EVENTS.get(event)
        if phase:
            _seconds[_current[0]][phase] += seconds
            _seconds[_current[0]]["programs"] += phase == "compile"

    jax.monitoring.register_event_duration_secs_listener(record)


def pytest_runtest_logstart(nodeid, location):
    _current[0] = nodeid


def pytest_runtest_logfinish(nodeid, location):
    _current[0] = "<between>"


def pytest_unconfigure(config):
    folder = pathlib.Path(os.environ.get("COMPILE_PROFILE", "compile-profile"))
    folder.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (folder / f"{worker}.json").write_text(json.dumps({test: dict(c) for test, c in _seconds.items()}))


def report(folder: pathlib.Path, top: int) -> str:
    tests: dict = {}
    for path in sorted(folder.glob("*.json")):
        tests |= json.loads(path.read_text())
    if not tests:
        raise SystemExit(f"{folder}: no profile (*.json) here: run the tests with -p compile_profile first")

    def total(c):
        return c.get("trace", 0) + c.get("lower", 0) + c.get("compile", 0)

    files: dict = collections.defaultdict(collections.Counter)
    for test, c in tests.items():
        files[test.partition("::")[0]].update(c)
    phases = collections.Counter()
    for c in tests.values():
        phases.update(c)
    lines = [f"{len(tests)} tests with compile events: {phases['programs']} programs compiled; "
             f"trace {phases['trace']:.0f} s, lower {phases['lower']:.0f} s, compile {phases['compile']:.0f} s", "",
             "| s | programs | file |", "|---:|---:|---|"]
    for name, c in sorted(files.items(), key=lambda kv: -total(kv[1]))[:top]:
        lines.append(f"| {total(c):.1f} | {c['programs']} | `{name}` |")
    lines += ["", "| s | programs | test |", "|---:|---:|---|"]
    for name, c in sorted(tests.items(), key=lambda kv: -total(kv[1]))[:top]:
        lines.append(f"| {total(c):.1f} | {c.get('programs', 0)} | `{name}` |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=pathlib.Path, help="the folder the plugin wrote ($COMPILE_PROFILE)")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    print(report(args.folder, args.top))


if __name__ == "__main__":
    main()
