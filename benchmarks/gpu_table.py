"""The one table of benchmarks/gpu_lease.sh, from the rows its parts recorded.

ROWS (a JSON-lines file) gathers two kinds of line: rows a benchmark recorded
itself as it measured them (_common.record_row, tagged with its part), and a
`part` line that gpu_lease.sh adds after each part with its exit status, wall
time and the rows read from its output (the summary lines of `rollsweep run`,
pytest, stream_large.py). Standard library only: it must run even where the
parts' dependencies failed to install.

    python3 benchmarks/gpu_table.py record ROWS PART RC SECONDS LIMIT OUTPUT LOG
    python3 benchmarks/gpu_table.py skip ROWS PART REASON
    python3 benchmarks/gpu_table.py table ROWS          (the Markdown table on stdout)
"""

import json
import math
import pathlib
import re
import sys

# What each part is, in the table's words (and in the order gpu_lease.sh runs them).
TITLES = {
    "install": "wheels installed (gpu_install.sh)",
    "setup": "environment",
    "tests": "the test suite on this device (pytest)",
    "rolling": "rolling ball, compiled calls (bench_gpu.py)",
    "run1m": "rolling ball, `rollsweep run` end to end",
    "startup": "rolling ball, 1M points: where a `rollsweep run` process spends its time (startup.py)",
    "kernel": "fused solver by kernel backend (bench_kernel.py)",
    "bicycle": "bicycle (trail, speed) map, `rollsweep run`",
    "landing": "serve landing map (gpu_landing.py)",
    "host": "the engine's own cost a point: nothing to solve, `rollsweep run` (host_cost.py)",
    "stream": "rolling ball, 1e8 points streamed to zarr (stream_large.py)",
}
RUN_SUMMARY = re.compile(r"([\d,]+) points solved in ([\d.]+) s \(([\d,]+) points/s\), ([\d,]+) of them failed")
PYTEST_SUMMARY = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+)(?: in ([\d.]+)s)?", re.MULTILINE)
# Where each test's outcome ends up: the counts of pytest's summary line, else (a run
# cut off before it) the progress characters of `pytest -q` (xdist's too).
OUTCOMES = {"passed": ".", "failed": "F", "skipped": "s", "error": "E"}
# A result line of `pytest -v` under xdist, written as each test ends (so a run cut off
# by its timeout still names its failures): "[gw3] [ 41%] FAILED tests/test_x.py::name".
VERBOSE = re.compile(r"^\[gw\d+\] \[\s*\d+%\] (PASSED|FAILED|SKIPPED|ERROR) tests/", re.MULTILINE)
FAILURES_NAMED = 5  # the failed tests a row names (the log has them all)


# `rollsweep run --profile`: a run's stages (seconds), and its tasks' (share of the threads' time).
RUN_STAGE = re.compile(r"^  (\S+(?: \S+)?)\s+([\d.]+) s  ", re.MULTILINE)
TASK_STAGE = re.compile(r"^      (\S+(?: \S+)?)\s+[\d.]+ s\s+([\d.]+)%", re.MULTILINE)


def profile_note(output: str) -> str:
    """A run's stages, as `rollsweep run --profile` printed them, in one phrase:
    "; stages: start-up 0.4 s, ..., solving 0.9 s (device 35%, writes 30%, ...)"
    (the tasks' stages over 0.5% of their threads' time); "" where none is printed."""
    run = RUN_STAGE.findall(output)
    if not run:
        return ""
    tasks = ", ".join(f"{name} {float(share):.0f}%" for name, share in TASK_STAGE.findall(output)
                      if float(share) >= 0.5)
    return "; stages: " + ", ".join(f"{name} {float(t):.2f} s" + (f" ({tasks})" if name == "solving" and tasks else "")
                                    for name, t in run)


def number(text: str) -> float:
    return float(text.replace(",", ""))


def _outcomes(counts: dict) -> str:
    return ", ".join(f"{n} {outcome}{'s' * (outcome == 'error' and n != 1)}" for outcome, n in counts.items())


def pytest_row(output: str, seconds: float, limit: float | None = None, rc: int | None = None) -> dict:
    """The tests part's row: what ran (the command, the output's first line), how
    many tests passed, failed, were skipped or errors, the failed ones named, and
    whether it finished within its timeout (`limit`; rc 124 or 137: cut off)."""
    command = output.split("\n", 1)[0]
    files = re.findall(r"tests/(\S+)\.py", command)
    keyword, processes = re.search(r"\s-k\s+(\S+)", command), re.search(r"\s-n\s+(\S+)", command)
    method = "pytest, " + (", ".join(files) if files else "the default suite (not slow, not slurm)")
    method += f", -k {keyword.group(1)}" if keyword else ""
    method += f", {processes.group(1)} process{'es' * (processes.group(1) != '1')}" if processes else ""
    summaries = [m for m in PYTEST_SUMMARY.finditer(output) if re.search(r"passed|failed|error", m.group(1))]
    if summaries:
        text, took = summaries[-1].groups()
        found = {"error" if word.startswith("error") else word: int(n) for n, word in re.findall(r"(\d+) (\w+)", text)}
        counts = {outcome: found.get(outcome, 0) for outcome in OUTCOMES}
        note = _outcomes(counts) + (f" in {float(took):.0f} s" if took else "")
    else:  # cut off before its summary: count its progress characters, or (-v) its result lines
        progress = "".join(re.findall(r"^([.FEsxX]+)\s*(?:\[\s*\d+%\])?$", output, re.MULTILINE))
        counts = {outcome: progress.count(char) for outcome, char in OUTCOMES.items()}
        for word in VERBOSE.findall(output):
            counts[word.lower()] += 1
        note = "before its summary: " + _outcomes(counts)
    if rc in (124, 137):
        note = f"cut off by its {limit:.0f} s timeout, {note}" if limit else f"cut off by its timeout, {note}"
    elif limit:
        note += f"; finished within its {limit:.0f} s timeout (the part: {seconds:.0f} s)"
    failed = list(dict.fromkeys(re.findall(r"^(?:\[gw\d+\] \[\s*\d+%\] )?(?:FAILED|ERROR) tests/(.+?)(?: - .*)?\s*$",
                                           output, re.MULTILINE)))
    if failed:
        more = len(failed) - FAILURES_NAMED
        note += "; failed: " + ", ".join(failed[:FAILURES_NAMED]) + (f" and {more} more" if more > 0 else "")
    return {"method": method, "note": note, "counts": counts}


def parsed_rows(part: str, output: str, seconds: float, limit: float | None = None,
                rc: int | None = None) -> list[dict]:
    """The rows a part's own output gives (benchmarks that record rows themselves give none here).
    limit, rc: the part's timeout and exit status (the tests part's row says whether it finished in time)."""
    rows = []
    if part.startswith(("run1m", "bicycle")):
        # Each run's summary, then (rollsweep run --profile) its stages, up to the next run's.
        for block in re.split(r"^(?=.*points solved in )", output, flags=re.MULTILINE):
            summary = RUN_SUMMARY.search(block)
            if not summary:
                continue
            points, solving, rate, failed = summary.groups()
            # The run's own process, where its --profile table says (the part may hold several runs).
            whole = re.search(r"where the time went: ([\d.]+) s in all", block)
            wall = float(whole.group(1)) if whole else seconds
            rows.append({"method": "rollsweep run (default shards and batch)", "points": number(points),
                         "rate": number(rate), "note": f"solving {float(solving):.1f} s; whole process "
                         f"{wall:.1f} s = {number(points) / wall:,.0f} points/s wall; {failed} points failed"
                         + profile_note(block)})
    elif part == "tests":
        rows.append(pytest_row(output, seconds, limit, rc))
    elif part.startswith("stream"):
        run = re.search(r"run:\s+([\d.,]+) s, ([\d,]+) points/s end to end", output)
        points = re.search(r"^\w+: ([\d,]+) points, shards", output, re.MULTILINE)
        details = [m.group(0).strip() for m in re.finditer(r"^(peak memory|cube on disk|read back):.*$", output,
                                                           re.MULTILINE)]
        if run:
            rows.append({"method": "stream_large.py --study pingpong (rollsweep run, inline, shards of 2^20)",
                         "points": number(points.group(1)) if points else None, "rate": number(run.group(2)),
                         "note": f"run {run.group(1)} s; " + "; ".join(re.sub(r"\s+", " ", d) for d in details)
                         + profile_note(output)})
    elif part == "startup":
        # startup.py's rows: config, cold|warm, seconds at each stage, CPU seconds, exported programs.
        header = re.search(r"^config\s+run\s+(.*?)\s+exported programs$", output, re.MULTILINE)
        stages = re.split(r"\s{2,}", header.group(1).strip()) if header else []
        for kind, cells in re.findall(r"^\S+\s+(cold|warm)\s+((?:[\d.]+s\s*)+)", output, re.MULTILINE):
            times = re.findall(r"([\d.]+)s", cells)
            rows.append({"method": f"rollsweep run, {kind} process", "note": "; ".join(
                f"{stage} {float(t):.1f} s" for stage, t in zip(stages, times, strict=False))})
    elif part == "setup":
        rows += [{"method": line.strip(), "note": "environment"} for line in output.splitlines()
                 if line.startswith("machine:")]
    return rows


def kernel_rows(output: str) -> list[dict]:
    """bench_kernel.py's rows: `backend points/s seconds error  chosen` under a
    `rolling-ball sweep, N points` line; FAILED and skipped rows as notes."""
    rows, points = [], None
    smoke = "no GPU" in output  # its host and interpret-mode stand-ins: a smoke test, not a measurement
    for text in output.splitlines():
        size = re.match(r"rolling-ball sweep, ([\d,]+) points", text)
        measured = re.match(r"(\w+)\s+([\d,]+)\s+([\d.]+)\s+([\d.e+-]+)\s+(.*)$", text)
        on_device = re.match(r"(\w+)\*\s+([\d,]+)\s+([\d.]+)\s+(.*)$", text)  # the calls alone, no copies
        other = re.match(r"(\w+)\s+(FAILED|skipped)\b\s*(?:nan\s+nan\s+)?(.*)$", text)
        if size:
            points = number(size.group(1))
        elif measured and points:
            backend, rate, _, error, why = measured.groups()
            backend = backend.replace("_pinned", ", results to pinned host memory in the call").replace(
                "_device", ", results copied out of device memory after the call").replace(
                "_staged", ", inputs from pinned host memory, results in one buffer")
            rows.append({"method": f"fused solver, kernel backend {backend}", "points": points, "rate": number(rate),
                         "errors": {"max |x - closed form|": float(error)},
                         "note": why + ("; no GPU: a smoke test, not a measurement" if smoke else "")})
        elif on_device and points:
            backend, rate, _, why = on_device.groups()
            rows.append({"method": f"fused solver, kernel backend {backend}, inputs on the device", "points": points,
                         "rate": number(rate), "note": why})
        elif other and points:
            backend, what, why = other.groups()
            rows.append({"method": f"fused solver, kernel backend {backend}", "points": points,
                         "note": f"{what}: {why.strip()}"})
    return rows


def last_error(output: str) -> str:
    """The line that best says why a part failed: the last one naming an error, else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"Error|error:|FAILED|Traceback|Killed", line)]
    return ((errors or lines or ["(no output)"])[-1])[:200]


def record(rows_file, part, rc, seconds, limit, output_file, log):
    output = pathlib.Path(output_file).read_text(errors="replace") if pathlib.Path(output_file).exists() else ""
    rc, seconds, limit = int(rc), float(seconds), float(limit)
    line = {"kind": "part", "part": part, "rc": rc, "seconds": seconds, "limit": limit, "log": log,
            "rows": parsed_rows(part, output, seconds, limit, rc)}
    if part == "kernel" and not any(r.get("part") == "kernel" for r in read(rows_file)):
        line["rows"] += kernel_rows(output)  # bench_kernel.py prints its own table, records no rows
    if rc:
        why = f"timed out after {limit:.0f} s" if rc in (124, 137) else f"exit {rc}"
        if part.startswith("stream") and rc == 1 and line["rows"]:  # it ran to the end; its own check failed
            line["failure"] = f"{why}: peak memory not below the cube's in-memory size (stream_large's check)"
        elif rc in (124, 137):  # the rows above are what it measured before
            line["failure"] = why
        else:
            line["failure"] = f"{why}; {last_error(output)}"
    with open(rows_file, "a") as f:
        f.write(json.dumps(line) + "\n")


def skip(rows_file, part, reason):
    with open(rows_file, "a") as f:
        f.write(json.dumps({"kind": "part", "part": part, "rc": None, "skipped": reason, "rows": []}) + "\n")


def read(rows_file) -> list[dict]:
    path = pathlib.Path(rows_file)
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut off by a killed process
            pass
    return out


def cell(value, kind="") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if kind == "points":
        return f"{value:,.0f}"
    if kind == "rate":
        return f"{value / 1e6:,.2f}M" if value >= 1e6 else f"{value:,.0f}"
    if kind == "ratio":
        return f"{value:.3g}"
    if isinstance(value, float):
        return f"{value:.1e}"
    return str(value).replace("|", "\\|")  # a | inside a cell would end it


def error_cell(errors: dict) -> str:
    """One error value as it is; several (the landing map's) each with its name."""
    shown = {name: value for name, value in (errors or {}).items() if value is not None}
    if len(errors or {}) > 1:
        return "; ".join(f"{name}: {cell(value)}" for name, value in shown.items())
    return ", ".join(cell(value) for value in shown.values())


def table(rows_file) -> str:
    lines = read(rows_file)
    measured = [r for r in lines if r.get("kind") == "row"]
    parts = [r for r in lines if r.get("kind") == "part"]
    # `rollsweep run` against the fused kernel's compiled calls at its size (else the default solver's).
    rolling = [r for r in measured if r["part"] == "rolling" and r.get("rate")]
    reference = {r["points"]: r["rate"] for r in rolling if "(default)" in r["method"]}
    reference |= {r["points"]: r["rate"] for r in rolling if "fused" in r["method"]}
    out = ["| part | method | points | points/s | ratio | max error | notes |", "|---|---|---|---|---|---|---|"]
    for p in parts:
        name = p["part"]
        base, _, variant = name.partition("-")
        kind = {"pinned": "results in pinned host memory", "device": "results copied out of device memory",
                "threads": "task threads, not the pipeline: ROLLSWEEP_PIPELINE=0",
                "serial": "JAX's backend started after the imports: ROLLSWEEP_BACKEND_AHEAD=0",
                "staged": "inputs from pinned host memory, results in one buffer: ROLLSWEEP_PINNED_INPUTS=1 "
                          "ROLLSWEEP_PACKED_RESULTS=1"}.get(
            variant, f"{variant} kernel backend")
        title = TITLES.get(name) or TITLES.get(base, name) + (
            f" ({kind})" if base == "run1m" or variant in ("threads", "staged") else f" ({variant})" if variant else "")
        # install and setup give no rows: their machine line heads the table (a failure still gets its row).
        rows = [] if name in ("install", "setup") else [r for r in measured if r["part"] == name] + p["rows"]
        for r in rows:
            points, ratio = r.get("points"), r.get("ratio")
            if points is None and r.get("title"):  # print_table's rows: the size is in the title
                size = re.search(r"= ([\d,]+) points", r["title"])
                points = number(size.group(1)) if size else None
            if name.startswith("run1m") and r.get("rate") and points in reference:
                ratio = r["rate"] / reference[points]
            cells = [title, cell(r["method"]), cell(points, "points"), cell(r.get("rate"), "rate"),
                     cell(ratio, "ratio"), cell(error_cell(r.get("errors")) or "-"), cell(r.get("note") or "")]
            out.append("| " + " | ".join(cells) + " |")
        if p.get("skipped"):
            out.append(f"| {title} | - | - | - | - | - | skipped: {cell(p['skipped'])} |")
        elif p.get("failure"):
            out.append(f"| {title} | **FAILED** | - | - | - | - | {cell(p['failure'])} (log: {p['log']}) |")
        elif not rows and name not in ("install", "setup"):
            out.append(f"| {title} | no rows | - | - | - | - | ran {p['seconds']:.0f} s; see {p['log']} |")
    machine = [r["method"] for p in parts if p["part"] == "setup" for r in p["rows"]]
    times = ", ".join(f"{p['part']} {p['seconds']:.0f}/{p['limit']:.0f} s" for p in parts if "seconds" in p)
    head = ["# GPU measurements (benchmarks/gpu_lease.sh)", "", *(f"{m}  " for m in machine),
            f"parts (wall/timeout): {times}", ""]
    foot = ["", "ratio: rolling-ball rows, against the engine's default solver at the same size (the fused kernel "
            "on a GPU); `rollsweep run`, against the fused kernel's compiled calls at the same size (else the "
            "default solver's); landing rows, against the engine's compiled calls; host_cost rows, the engine "
            "against numpy + zarr writing the same values, in the same figure. max error: against the closed "
            "form (rolling ball); against scipy DOP853 at rtol 1e-13 (landing: landing point, flight time, "
            "outcomes that differ)."]
    return "\n".join(head + out + foot) + "\n"


def main(argv) -> int:
    command, *args = argv
    if command == "record":
        record(*args)
    elif command == "skip":
        skip(*args)
    elif command == "table":
        sys.stdout.write(table(*args))
    else:
        raise SystemExit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
