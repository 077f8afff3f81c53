"""The `rollsweep` command line."""

import argparse
import gc
import os
import pathlib
import sys
import threading

from engine._imports import import_paused
from engine._jax_setup import DeviceError, backend_started, start_backend
from engine.cli import stops
from engine.errors import ConfigError, SchedulerError, StoreError
from engine.limits import MAX_GPUS, MAX_POINTS, MAX_SHARDS, MAX_WORKERS

EXIT_BAD_INPUT = 2
EXIT_PARTIAL = 3  # verify: what is done is sound, but not every shard is

# The ranges of the numeric flags: the sweep layer's (engine.limits). --index
# is below the grid's points (checked with the sweep); --task an index into a share.
# --connect-timeout, --lost-after: a week; a longer wait is a slip (minutes or
# milliseconds given as seconds), not a choice.
MAX_WAIT_S = 7 * 24 * 3600


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line (`rollsweep run: error:
    argument --workers: must be ...`, exit 2), without the usage argparse puts
    above them: bad input gets one clear line, as a bad sweep file does, and
    `--help` shows the usage."""

    def error(self, message):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _integer(low: int, high: int):
    """An argparse type: an integer from `low` to `high`, refused otherwise with
    a line that says what is accepted."""

    def integer(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer from {low:,} to {high:,}, got {text!r}")
        return value

    return integer


def _seconds(text: str) -> float:
    """An argparse type: a wait in seconds, above 0 and at most MAX_WAIT_S
    (0 would mean "the default" to the runner, a negative one "at once")."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 < value <= MAX_WAIT_S:  # NaN is refused too
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 and at most {MAX_WAIT_S:,}, "
                                         f"got {text!r}")
    return value


_workers = _integer(1, MAX_WORKERS)


def _studies(args):
    """Every study, or the one named; a study whose plugin fails to load is
    named with its error in one line (exit 1) after the others are listed."""
    from engine.study.interface import StudyLoadError, available_studies, load_study

    if args.name is not None:
        try:
            study = load_study(args.name)
        except KeyError as err:
            raise ConfigError("<command line>", "studies NAME", err.args[0]) from None
        _describe_study(study, solvers=True)
        return 0
    broken = []
    for _, load in sorted(available_studies().items()):
        try:
            study = load()
        except StudyLoadError as err:
            broken.append(err)
            continue
        _describe_study(study, solvers=False)
    for err in broken:
        print(f"rollsweep: error: {err}", file=sys.stderr)
    return 1 if broken else 0


def _describe_study(study, solvers: bool) -> None:
    print(f"{study.name}: {study.title}\n  source: {study.source}")
    print("  parameters:")
    for p in study.parameters:
        print(f"    {p.name:<20} {p.unit_suffix.strip():<7} default {p.default:<10g} allowed {p.domain}  "
              f"{p.description}")
    print("  outputs:")
    for o in study.outputs:
        dims = f" dims {dict(o.dims)}" if o.dims else ""
        print(f"    {o.name:<20} {o.unit_suffix.strip():<7} {o.description}{dims}")
    if study.solver_defaults:
        print("  solver defaults: " + ", ".join(f"{k} = {v!r}" for k, v in study.solver_defaults.items()))
    if solvers:  # one study asked for: worth tracing its kernel (a second or two)
        _describe_solvers(study)


def _describe_solvers(study) -> None:
    """The batch solver this machine's plan takes, and the one a GPU's would (with why not fused)."""
    from engine.solve import SOLVERS, Device, detect
    from engine.solve.plan import GPU_MIN_POINTS, default_solver

    here = detect()
    print(f"  solver here ({here.platform}): {default_solver(study, here)}")
    on_gpu = default_solver(study, Device(platform="gpu"))
    reason = SOLVERS["fused"].unsupported(study)
    print(f"  solver on a GPU: {on_gpu}" + (f" (not fused: {reason})" if on_gpu != "fused" and reason else ""))
    if on_gpu == "fused":
        for part, why in SOLVERS["fused"].outside(study).items():
            print(f"  on a GPU, its {part} runs outside the kernel: {why}")
    else:
        print(f"  on a GPU machine, sweeps under {GPU_MIN_POINTS:,} points run on its CPU cores")


def _say_fused_fallback(sweep, plan) -> None:
    """On a GPU, one line on stderr where the fused kernel's check failed
    unexpectedly (an exception, not a property of the study) and the plan fell
    back to another solver. Nothing on CPU, where the fused kernel is not the
    default. From the run's `plan` and its check (made once per process), not
    checked or planned again for the message."""
    from engine.solve import SOLVERS, detect

    if detect().platform != "gpu":
        return
    from engine.errors import PLEASE_REPORT

    reason = SOLVERS["fused"].unsupported(sweep.study)
    if reason and reason.endswith(PLEASE_REPORT):
        print(f"rollsweep: warning: study {sweep.study.name} is not fused on this GPU ({reason}); it solves with the "
              f"{plan.solver.name} solver on {plan.device.platform}", file=sys.stderr)


def _validate(args):
    from engine._jax_setup import configure
    from engine.runner.cost import check_memory, describe_programs, plan_for
    from engine.sweep.config import check_workers, load_sweep

    check_workers(args.workers)
    sweep = load_sweep(args.config, out=args.out)
    configure()  # as a run's: its programs' keys are those of float64 and its compile cache
    plan = plan_for(sweep)
    _say_fused_fallback(sweep, plan)
    cost = check_memory(sweep, args.workers or 1, plan)
    axes = ", ".join(f"{a.name}[{len(a.values)}]" for a in sweep.axes)
    print(f"{args.config}: valid {sweep.study.name} sweep, axes {axes}")
    if sweep.sensitivity is not None:
        print(f"sensitivity      {sweep.samples.describe()}; {', '.join(sweep.sensitivity.outputs)} analysed by "
              "SALib once every shard is done")
    elif sweep.samples is not None:
        print(f"design           {sweep.samples.describe()}")
    if sweep.samples is not None:  # drawn whole where the sweep is read: the unit design and the values
        held = 2 * sweep.samples.points * len(sweep.samples.parameters) * 8
        print(f"draws            {held / 2**20:,.1f} MiB in each process reading the sweep "
              f"({len(sweep.samples.parameters)} parameters)")
    print(cost.describe())
    print(describe_programs(sweep, plan))
    print(f"output           {sweep.out} (config hash {sweep.config_hash[:12]})")


def _run(args):
    import engine.stages as stages

    # The process's start-up (interpreter, imports) where the process is the program's own.
    startup = {"start-up": stages.seconds_since_start()} if args.whole_process else {}
    clock = stages.Clock("planning")  # the run's clock from here: reading and planning the sweep
    with stages.running(clock):
        report = _run_sweep(args)
    if args.profile:
        print(stages.table(startup | report.stages, report.task_stages, report.threads))
    if report.failed_shards:
        print(f"rollsweep: {report.failed_shards} shards raised; their errors: rollsweep status {report.path}; "
              "run again to retry them", file=sys.stderr)
        return 1


def _run_sweep(args):
    from engine._jax_setup import configure
    from engine.runner.ahead import load_ahead_of_run
    from engine.runner.cost import plan_for
    from engine.sweep.config import check_workers, load_sweep

    check_workers(args.workers)
    sweep = load_sweep(args.config, out=args.out)
    if sweep.samples is not None:  # drawn beside the planning, the program's load and the store's making
        sweep.samples.draw_ahead()
    args.store = sweep.out  # where a disk error happened, if it does not say
    configure()  # before the plan: its check's programs come from the compile cache too
    plan = plan_for(sweep)  # the run's one plan, and the message's
    _note_compiles(sweep, plan)
    _say_fused_fallback(sweep, plan)
    # The program's compile (a warm process: its executable read from the cache)
    # started before the runner's own modules (zarr's among them) are imported.
    load_ahead_of_run(sweep, plan, sweep.run_executor(args.executor, args.scheduler), args.overwrite)
    run = _import_command("engine.runner.execute", args).run
    report = run(
        sweep,
        executor=args.executor,
        workers=args.workers,
        scheduler=args.scheduler,
        overwrite=args.overwrite,
        progress=not args.quiet,
        slurm=_slurm_keywords(args),
        connect_timeout=args.connect_timeout,
        lost_after=args.lost_after,
        plan=plan,
    )
    print(_summary(report))
    if report.sensitivity:
        print(f"{report.path}: sensitivity {report.sensitivity}")
    return report


def _note_compiles(sweep, plan) -> None:
    """The run's compiles timed and noted for `validate` (engine.solve.executables.COMPILE_TIMES)."""
    from engine.runner.cost import compile_kind
    from engine.solve.executables import note_compiles_as

    note_compiles_as(compile_kind(sweep, plan))


def _summary(report) -> str:
    """One line: points solved (and how many of them without success) apart from
    shards that raised, which solved nothing and so count in no rate."""
    line = (f"{report.path}: {report.state}; {_shards_and_points(report)} solved "
            f"in {report.seconds:.2f} s ({report.rate:,.0f} points/s), {report.failed_points:,} of them failed")
    if report.failed_shards:
        line += (f"; {report.failed_shards:,} shards raised ({report.points_run - report.solved:,} points "
                 "not solved)")
    return line


def _shards_and_points(report) -> str:
    """What a run solved, in validate's words: the grid's shards and points, and
    the critical search's shards and roots where it had any."""
    if not report.critical_shards:
        return f"{report.shards_run:,} shards, {report.solved:,} points"
    grid_shards = report.shards_run - report.critical_shards
    grid_points = report.points_run - report.critical_roots
    return (f"{grid_shards:,} grid shards and {report.critical_shards:,} critical-search shards, "
            f"{grid_points:,} grid points and {report.critical_roots:,} critical roots")


def _slurm_keywords(args) -> dict:
    return {k: getattr(args, k) for k in ("partition", "account", "cores", "memory", "walltime", "gpus", "tasks")}


def _submit(args):
    from engine.runner.submit import submit
    from engine.sweep.config import load_sweep

    sweep = load_sweep(args.config, out=args.out)
    result = submit(sweep, _slurm_keywords(args), dry_run=args.dry_run)
    if not result.shards:
        print(f"{sweep.out}: complete, nothing to submit")
    elif args.dry_run:
        print(result.script, end="")
    else:
        print(f"submitted job array {result.array_job} ({result.tasks} tasks, {result.shards} shards) and check "
              f"job {result.check_job}; follow with: rollsweep status {sweep.out}")


def _work(args):
    from engine.runner.submit import work

    return work(args.store, args.task, args.share)


def _verify(args):
    from engine.cube.verify import examine

    verdict = examine(args.path)
    for problem in verdict.problems:
        print(f"{args.path}: {problem}")
    print(f"{args.path}: {verdict.summary()}")
    if verdict.problems:
        return 1
    return EXIT_PARTIAL if verdict.partial else 0


# An eager solve still running this many seconds on says so, once: most points
# take a second or less, a long one (millions of steps) minutes.
POINT_QUIET_S = 5.0


def _point(args):
    from engine._jax_setup import configure
    from engine.runner.point import describe, select_point, solve_compiled, solve_eagerly
    from engine.sweep.config import load_sweep

    sweep = load_sweep(args.config, writes=False)
    params = select_point(sweep, args.at or [], args.index)
    configure()
    # An exception propagates whole: its traceback is the point of this command.
    if args.compiled:
        print("rollsweep point: compiling the point's solve (one program, seconds), then solving it", file=sys.stderr)
        report = solve_compiled(sweep.study, params, sweep.solver)
    else:
        notice = threading.Timer(POINT_QUIET_S, _still_solving, (POINT_QUIET_S,))
        notice.daemon = True
        notice.start()
        try:
            report = solve_eagerly(sweep.study, params, sweep.solver)
        finally:
            notice.cancel()
    print(describe(sweep.study, report))


def _still_solving(seconds: float) -> None:
    print(f"rollsweep point: still solving eagerly after {seconds:g} s, the study's code line by line (a long solve "
          "takes minutes so); Ctrl-C stops it, --compiled solves it through a compiled program", file=sys.stderr,
          flush=True)


def _status(args):
    """Exit codes as verify's: 0 complete, 1 where shards raised or are damaged
    (run exits 1 on them too), EXIT_PARTIAL where shards are still to solve."""
    from engine.cube.status_report import progress

    report = progress(args.path)
    print(report.describe())
    if report.failed or report.damaged:
        return 1
    return 0 if report.complete else EXIT_PARTIAL


def _sensitivity(args):
    """The cube's indices ranked; one line on stderr and exit 1 where it holds none."""
    from engine.cube.sensitivity_report import NoIndices, ranking

    try:
        print(ranking(args.path))
    except NoIndices as err:
        print(f"rollsweep: {err}", file=sys.stderr)
        return 1
    return 0


def _plot(args):
    from engine.cube.plot import plot_cube

    for path in plot_cube(args.path, args.out):
        print(path)


def _demo(args):
    from engine.cli.demo import run_demo

    run_demo(pathlib.Path(args.out), workers=args.workers, executor=args.executor)  # a line a sweep, a summary


def _slurm_options(p, tasks_help):
    g = p.add_argument_group("SLURM (override the sweep's [slurm] table and ~/.config/rollsweep/slurm.toml)")
    g.add_argument("--partition")
    g.add_argument("--account")
    g.add_argument("--cores", type=_integer(1, MAX_WORKERS), help=f"CPUs per job (1 to {MAX_WORKERS:,})")
    g.add_argument("--memory", help="memory per job, e.g. 4G")
    g.add_argument("--walltime", help="e.g. 01:00:00")
    g.add_argument("--gpus", type=_integer(0, MAX_GPUS), help=f"GPUs per job (one worker per GPU; 0 to {MAX_GPUS})")
    g.add_argument("--tasks", type=_integer(1, MAX_SHARDS), help=f"{tasks_help}; 1 to {MAX_SHARDS:,}")


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="rollsweep", description=__doc__)
    top.set_defaults(backend=False)  # True: a command that asks for JAX's devices (_import_command)
    sub = top.add_subparsers(dest="command", required=True)

    p = sub.add_parser("studies", help="list studies, their parameters and outputs")
    p.add_argument("name", nargs="?", help="show only this study")
    p.set_defaults(fn=_studies, module="engine.study.interface")

    p = sub.add_parser("validate", help="check a sweep file and estimate its cost; writes nothing")
    p.add_argument("config")
    p.add_argument("--out", help="override [run] out")
    p.add_argument("--workers", type=_workers,
                   help=f"the workers the memory estimate assumes, as run's --workers (1 to {MAX_WORKERS:,})")
    p.set_defaults(fn=_validate, module="engine.runner.cost", backend=True)

    p = sub.add_parser("run", help="run (or resume) a sweep")
    p.add_argument("config")
    p.add_argument("--out", help="override [run] out")
    p.add_argument(
        "--workers",
        type=_workers,
        help="local: worker processes (default: one per device, a task per core on threads); inline: threads "
             f"(default: two per core or per GPU, spread over the devices); 1 to {MAX_WORKERS:,}",
    )
    p.add_argument("--scheduler", help="address of an existing dask scheduler, e.g. tcp://host:8786")
    p.add_argument("--connect-timeout", type=_seconds, metavar="S",
                   help="--scheduler: seconds to reach it before giving up, writing nothing (default 2; above 0, "
                        "at most a week)")
    p.add_argument("--lost-after", type=_seconds, metavar="S",
                   help="--scheduler: stop, keeping what is done, after S seconds without a worker (default 30; "
                        "above 0, at most a week)")
    p.add_argument("--executor", choices=["local", "inline", "slurm"], help="override [run] executor")
    p.add_argument("--overwrite", action="store_true", help="replace a cube written by another config")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--profile", action="store_true",
                   help="say where the time went: seconds per stage (start-up, planning, store, solving: compile, "
                        "device calls, copies, packing, writes, markers, waiting)")
    _slurm_options(p, tasks_help="worker jobs (executor slurm)")
    p.set_defaults(fn=_run, module="engine.runner.ahead", backend=True)

    p = sub.add_parser("submit", help="submit a sweep to SLURM as a job array")
    p.add_argument("config")
    p.add_argument("--out", help="override [run] out")
    p.add_argument("--dry-run", action="store_true", help="print the job script; submit and write nothing")
    _slurm_options(p, tasks_help="array tasks")
    p.set_defaults(fn=_submit, module="engine.runner.submit")

    p = sub.add_parser("work", help="(run by a SLURM array task) compute one task's share of the shards")
    p.add_argument("store")
    p.add_argument("--task", type=_integer(0, MAX_SHARDS - 1), required=True,
                   help=f"this array task's index in the share (0 to {MAX_SHARDS - 1:,})")
    p.add_argument("--share", required=True)
    p.set_defaults(fn=_work, module="engine.runner.submit", backend=True)

    p = sub.add_parser("point", help="solve one point of a sweep eagerly (no compiling) to debug a study")
    p.add_argument("config")
    p.add_argument("--compiled", action="store_true",
                   help="solve it through one compiled program instead: seconds to compile, then a long solve "
                        "(millions of steps) in seconds, not minutes")
    p.add_argument("--at", nargs="+", metavar="NAME=VALUE", help="the point's axis (or other parameter) values")
    p.add_argument("--index", type=_integer(0, MAX_POINTS - 1), metavar="N",
                   help="the grid's N-th point (C order of the axes; from 0)")
    p.set_defaults(fn=_point, module="engine.runner.point", backend=True)

    p = sub.add_parser("status", help="progress of a cube (being) written")
    p.add_argument("path")
    p.set_defaults(fn=_status, module="engine.cube.status_report")

    p = sub.add_parser("verify", help="check a cube against its markers and attributes (exit 0 sound, 1 damaged, "
                       "3 partial)")
    p.add_argument("path")
    p.set_defaults(fn=_verify, module="engine.cube.verify")

    p = sub.add_parser("sensitivity", help="a sensitivity sweep's indices, each output's parameters ranked "
                       "(exit 1 where the cube holds none, saying why)")
    p.add_argument("path")
    p.set_defaults(fn=_sensitivity, module="engine.cube.sensitivity_report")

    p = sub.add_parser("plot", help="draw a cube's standard figures as PNG")
    p.add_argument("path")
    p.add_argument("--out", help="folder for the PNGs (default: beside the cube)")
    p.set_defaults(fn=_plot, module="engine.cube.plot")

    p = sub.add_parser("demo", help="run small versions of every study's main figures")
    p.add_argument("--out", default="demo", help="folder for cubes and figures (default: demo)")
    p.add_argument("--workers", type=_workers, help=f"as run's (1 to {MAX_WORKERS:,})")
    p.add_argument("--executor", choices=["local", "inline"])
    p.set_defaults(fn=_demo, module="engine.cli.demo", backend=True)
    return top


def _disk_error(args, err: OSError) -> str:
    """One line for an OS error: where (the file it names, else the store, else the
    command's path) and, when a store with finished shards exists, how to resume."""
    from engine.cube.store import Cube

    store = getattr(args, "store", None)
    where = err.filename or store or getattr(args, "path", None) or getattr(args, "config", "")
    line = f"{where}: {err.strerror or err}"
    if store is not None and Cube(store).markers.any_done():
        line += "; shards already done are kept: run the same command again to resume"
    return line


def entry(argv=None) -> int:
    """The `rollsweep` program (its console script, `python -m engine.cli`):
    `main` in a process of its own, which freezes what the command imported.

    What the command imports (`_import_command`: the engine's modules it runs,
    JAX, zarr) lives until the process ends: frozen, the cyclic collector no
    longer traverses it, in the run's collections nor in the one at exit.
    Measured on 2 cores: `rollsweep run` of 100,000 points, whole processes,
    3.1 s -> 2.7 s (with the imports' collector paused: 2.6 s). Not in `main`,
    which a notebook or a test may call: there, freezing would keep the
    caller's garbage for good. Nor is JAX's backend started ahead there
    (_import_command): the caller's JAX may be set up otherwise."""
    try:
        return main(argv, freeze=True)
    finally:
        backend_started()


def program(argv=None):
    """The `rollsweep` console script and `python -m engine.cli`: `entry` in a
    process of its own, which then ends at once (_exit_now)."""
    _exit_now(entry(argv))


def _exit_now(code: int):
    """End the process with `code` without the interpreter's own exit, where
    nothing is left running: every region, marker and report is written and
    waited for before a command returns (and the chunk writers are waited for
    here, should an interrupt have come during a write). That exit (the atexit
    handlers, and the finalisation of the some 200,000 objects JAX, zarr and
    the study imported) took 0.09-0.11 s of a warm 1.2-s `rollsweep run` of
    4,096 points on 2 cores; ended at once, 0.03 s. The interpreter exits as
    usual where a thread or child process is still alive (a program's compile
    left by an error, say), where dask's distributed was used (its exit closes
    the clusters an interrupted run left open), or under a profiler, tracer or monitoring tool
    (which report at exit)."""
    chunks = sys.modules.get("engine.cube.chunks")
    if chunks is not None:
        chunks.stop_writers()
    alive = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    processes = sys.modules.get("multiprocessing")  # only where a command started one
    if (alive or (processes is not None and processes.active_children()) or "distributed" in sys.modules
            or sys.getprofile() is not None or sys.gettrace() is not None or _monitored()):
        sys.exit(code)
    logging = sys.modules.get("logging")
    if logging is not None:  # its handlers flushed and closed, as its atexit handler would
        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # a reader gone, or a closed stream: nothing more can be said
            pass
        except OSError:  # a full disk, say: what was said is not whole (as Python's own exit says)
            code = code or 120
    os._exit(code)


def _monitored() -> bool:
    """Whether a tool watches this process through sys.monitoring (Python
    3.12+: coverage's sysmon core, debuggers), which reports at exit."""
    monitoring = getattr(sys, "monitoring", None)
    return monitoring is not None and any(monitoring.get_tool(tool) is not None for tool in range(6))


def main(argv=None, freeze: bool = False) -> int:
    """The command line, its stops taken (engine.cli.stops): SIGTERM with its
    line and exit 143, Ctrl-C with exit 130."""
    with stops.taken_in_main_thread():
        return _main(argv, freeze)


def _import_command(module: str, args):
    """A module of the command (and so what it imports: JAX, zarr, ... for a run;
    nothing of them for --help), with the cyclic collector paused
    (engine._imports); in the program's own process, all of it then kept out of
    later collections. Its module first (args.module), and any it imports once
    under way (a run: the runner, after its program's compile is started).
    For a command that solves or plans, in the program's own process, JAX
    comes first and its backend starts beside the rest (start_backend)."""
    with stops.deferred():
        if args.whole_process and args.backend:
            import_paused("jax")
            start_backend()
        imported = import_paused(module)
    if args.whole_process:
        gc.freeze()
    return imported


def _main(argv, freeze: bool = False) -> int:
    args = parser().parse_args(argv)
    args.whole_process = freeze  # the program's own process (entry), not a caller's (a notebook, a test)
    try:
        if args.command in ("plot", "demo"):
            with stops.deferred():
                import matplotlib
            matplotlib.use("Agg")  # files only: never a window (and never in a user's notebook kernel)
        _import_command(args.module, args)
        code = args.fn(args)
    except KeyboardInterrupt as err:
        return _interrupted(err, args.command)
    except Exception as err:
        stop = stops.behind(err)  # a stop that surfaced as another error (an ImportError, in jaxlib's start)
        if stop is not None:
            return _interrupted(stop, args.command)
        if isinstance(err, (ConfigError, StoreError)):
            print(f"rollsweep: error: {err}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if isinstance(err, (DeviceError, SchedulerError)):  # the machine's devices or scheduler, not the sweep
            print(f"rollsweep: error: {err}", file=sys.stderr)
            return 1
        if isinstance(err, BrokenPipeError):  # output piped into `head` and the like
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
            return 0
        if isinstance(err, OSError):  # full disk, read-only or vanished store
            print(f"rollsweep: error: {_disk_error(args, err)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        line = _machine_failure(err)
        if line is None:
            raise
        print(f"rollsweep: error: {line}", file=sys.stderr)
        return 1
    return code or 0


def _machine_failure(err: Exception) -> str | None:
    """One line for a failure of this machine or installation, not of the sweep
    (exit 1): a study's plugin that does not load, JAX's platforms that do not
    start, memory that runs out; None for any other error (a traceback: a bug)."""
    from engine._jax_setup import platform_failure

    interface = sys.modules.get("engine.study.interface")  # (imported where a study was loaded)
    if interface is not None and isinstance(err, interface.StudyLoadError):
        return str(err)
    if isinstance(err, MemoryError):  # numpy's, and XLA's std::bad_alloc as nanobind raises it
        return _out_of_memory(err)
    if isinstance(err, ImportError) and _address_limit() is not None:  # a library's segments not mapped
        return (f"{_first_line(err)}: a library could not be loaded under this process's address-space limit "
                f"({_address_limit()}); raise it (ulimit -v unlimited)")
    return platform_failure(err)


def _out_of_memory(err: MemoryError) -> str:
    what = f"out of memory ({_first_line(err)})"
    limit = _address_limit()
    if limit is not None:
        return (f"{what} under this process's address-space limit ({limit}): raise it (ulimit -v unlimited), or "
                "lower the sweep's [run] shard_size or batch_size")
    return f"{what}: lower the sweep's [run] shard_size or batch_size, or run where more memory is free"


def _address_limit() -> str | None:
    """This process's address-space limit (`ulimit -v`), as a line names it; None where there is none."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else f"ulimit -v {soft // 1024} KiB, {soft / 2**30:.2f} GiB"


def _first_line(err: BaseException) -> str:
    """`Type: message` of the innermost error behind `err` (numpy's ImportError
    wraps the loader's), its first line."""
    while err.__cause__ is not None:
        err = err.__cause__
    message = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    return f"{type(err).__name__}: {message}" if message else type(err).__name__


# Commands whose interrupted work the same command resumes (a cube's done shards are kept).
RESUMABLE = ("run", "submit", "work", "demo")


def _interrupted(stop: KeyboardInterrupt, command: str | None = None) -> int:
    if command in RESUMABLE:
        print("rollsweep: interrupted; run the same command again to resume", file=sys.stderr)
    else:
        print("rollsweep: interrupted", file=sys.stderr)
    return stops.take(stop)
