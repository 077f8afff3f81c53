"""Solving many points: fixed-size batches through the plan's BatchSolver.

Every call uses the same batch shape (the last batch is padded), so one
compiled program serves every shard: a point's result cannot depend on the
shard size, and there is a single compilation per process.
"""

import collections
import contextlib
import dataclasses
import functools
import threading

import jax
import jax.numpy as jnp
import numpy as np

import engine.solve.executables as executables
import engine.solve.exported as exported
import engine.stages as stages
from engine._jax_setup import float64_here
from engine.solve._host_memory import keep_freed_memory
from engine.solve.base import Plan
from engine.solve.device import current_device, on_platform
from engine.solve.plan import make_plan, writes_no_samples, writes_samples
from engine.solve.staging import PINNED_RESULTS as PINNED_RESULTS
from engine.solve.staging import (
    Staging,
    as_the_program_takes,
    call_results_layout,
    staged,
    staging_for,
    to_pinned,
    unpacked,
)
from engine.sweep.settings import SolverSettings

# Calls queued ahead of the one whose results are being copied out. Few: a
# call's buffers are allocated when it is queued, so with every call of an
# evaluate queued at once each had fresh memory, faulted in page by page,
# while with few queued the allocator hands back the buffers just freed.
# Measured on the rebound regime map (10^6 points, 16,384 a call, one core):
# 24.3 ns a point with all queued, 22.1 with 2 (1 and 4: 22.2, 22.0).
WINDOW = 2


@dataclasses.dataclass(frozen=True)
class Evaluation:
    outputs: dict  # name -> (n, *extra dims) float array
    status: np.ndarray  # (n,) int8
    num_steps: np.ndarray  # (n,) int32
    num_events: np.ndarray  # (n,) int32


def pinned_results(plan: Plan) -> bool:
    """Whether `plan`'s calls leave their results in pinned host memory: on an
    accelerator, unless $ROLLSWEEP_PINNED_RESULTS is 0 (engine.solve.staging)."""
    return staging_for(plan.device.accelerator).results_pinned


COUNTERS = ("status", "num_steps", "num_events")  # a batch function's results after its outputs


def listed(results, selected: tuple[str, ...]) -> list:
    """A batch function's results as a list: the selected outputs, then status, steps, events."""
    outputs, *counters = results
    return [outputs[k] for k in selected] + counters


def packed_layout(study, settings: SolverSettings, selected: tuple[str, ...], plan: Plan, staging: Staging):
    """Where each result lies in a call's one buffer of results (engine.solve.staging),
    None where its results are not packed."""
    if not staging.results_packed:
        return None
    shapes = tuple(study.outputs_by_name[k].shape_at(len(settings.save_times)) for k in selected)
    return call_results_layout(shapes, settings.dtype, plan.batch)


def compiled(study, settings: SolverSettings, selected: tuple[str, ...], plan: Plan):
    """The jitted batch function: one per study, settings, outputs and plan (and
    where its inputs come from and its results go: engine.solve.staging)."""
    return _compiled(study, settings, selected, plan, staging_for(plan.device.accelerator))


@functools.cache
def _compiled(study, settings: SolverSettings, selected: tuple[str, ...], plan: Plan, staging: Staging):
    """compiled's: its first call (trace or load the exported program, compile or
    load from the cache) is made by one thread while the others wait: shard
    threads starting together each traced the same program at once (~1.3 s of
    tracing each on 2 cores). A program exported by an earlier process is not
    traced again (engine.solve.exported); on CPU, on a plan of one device, its
    executable is kept too, and a later process neither reads nor lowers the
    program (engine.solve.executables): calls then go through that executable,
    the one a later process loads.
    `staging`: the inputs and results moved inside the call, through the
    host's pinned memory (engine.solve.staging; around the exported program,
    which stays the same)."""
    if settings.save_times and not writes_samples(plan.solver.name, settings.solver):  # a plan made without sampled
        raise ValueError(writes_no_samples(plan.solver.name, settings.solver))
    if not plan.device.accelerator:
        keep_freed_memory()  # else every call faults its buffers in afresh (engine.solve._host_memory)
    lock, ready, loaded = threading.Lock(), threading.Event(), threading.Event()
    # One device: every call on it, and its executable may be kept between processes.
    # On several, each pinned thread's calls compile their own (jit's, per device).
    single = plan.device.count == 1
    fn = None

    def make():
        return jax.jit(plan.solver.batch_function(study, settings, selected, plan))

    def wrapped(program):
        if not staging.wraps:
            return program
        return staged(program, staging, packed_layout(study, settings, selected, plan, staging),
                      functools.partial(listed, selected=selected), (*selected, *COUNTERS))

    shared = False  # whether `fn` is the program stored under its key (exported.program)

    def made(args, program_key):
        nonlocal fn, shared
        if fn is None:
            program, shared = exported.program(make, program_key, as_the_program_takes(args, staging))
            fn = wrapped(program)
        return fn

    def keys(args) -> tuple:
        """(the program's key, its executable's on this thread's device, where kept, and the device)."""
        program_key = exported.program_key(study, settings, selected, plan, args)
        device = current_device()
        return program_key, executables.executable_key(program_key, device, staging) if single else None, device

    def kept_as(key):
        """`key` where the program made (made) is the one stored under its key,
        else None: a program made for this process alone (the fused kernel run
        by Pallas where the host kernel cannot be built here, whatever an
        earlier process stored) is not kept, nor its executable."""
        return key if shared else None

    def compiled_here(args):
        """The program for calls like `args` made ready on this thread: its
        executable loaded where kept, else compiled (or read from JAX's cache)
        and kept. Calls then go through that executable, where it is kept."""
        nonlocal fn
        program_key, key, device = keys(args)
        executable = executables.load(key, device)
        if executable is None:
            program = made(args, program_key)
            key = kept_as(key)
            executable = executables.compile_and_keep(key, program, args)
        if key is not None:  # calls through the executable kept, the one a later process loads
            fn = executable

    def call(*args):
        if not ready.is_set():
            # Its threads wait here for the program (not for one another's calls):
            # the first compiles it, or finds it made ahead (load_ahead); a
            # thread whose calls differ (another device) compiles its own,
            # jit's, at its first call.
            with stages.stage("compile"), lock:
                if not ready.is_set():
                    if not loaded.is_set():
                        compiled_here(args)
                    ready.set()
        return fn(*args)

    def load_ahead(*args) -> threading.Thread | None:
        """The program for calls like `args` made ready before the first: its
        kept executable loaded, or the program traced (or its exported program
        read) and lowered on this thread and compiled (or its executable read
        from the compile cache) on a thread of its own, started and returned,
        which holds the lock the calls wait on until it is done; the loads and
        the compile release the GIL. None where the program is ready or being
        made already. A failure here is left for the first call to meet and
        report where it belongs, in its task."""
        if started() or not lock.acquire(blocking=False):
            return None
        handed_over = False
        try:
            program_key, key, device = keys(args)
            if executables.stored(key):
                def work():
                    return executables.load(key, device)
            else:
                program = made(args, program_key)
                key = kept_as(key)
                lowered = executables.lowered_to_keep(key, program, args)

                def work():
                    return executables.compiled_to_keep(key, lowered)

            def compile_then_release():
                nonlocal fn
                try:
                    executable = work()
                    if executable is not None and key is not None:
                        fn = executable
                    if executable is not None and fn is not None:
                        loaded.set()
                except Exception:  # noqa: BLE001 - the first call compiles it again and raises there
                    pass
                finally:
                    lock.release()

            thread = threading.Thread(target=compile_then_release, name="rollsweep-compile")
            thread.start()
            handed_over = True
            return thread
        except Exception:  # noqa: BLE001 - as above
            return None
        finally:
            if not handed_over:  # (an interrupt too: a lock kept would stop every later call)
                lock.release()

    def started() -> bool:
        """Whether the program is made, being made, or loaded ahead."""
        return ready.is_set() or loaded.is_set() or lock.locked()

    call.load_ahead, call.started = load_ahead, started
    return call


compiled.cache_clear = _compiled.cache_clear  # every batch function made so far forgotten (tests)


# Fixed parameters' batches kept: a sweep's (the bicycle has 27) with room for a
# notebook's next sweeps; at most 512 MB at a GPU's 2^20-point float64 batch.
FILLED_KEPT = 64


@functools.lru_cache(maxsize=FILLED_KEPT)
def _filled(batch: int, value: bytes, dtype: str, device, x64: bool) -> jax.Array:
    """A fixed parameter's batch: its one value (as bytes, so that -0.0 is not
    0.0) `batch` times, made on this thread's device, once per process. Made
    afresh at every evaluate, the bicycle's 27 fixed parameters cost 27 eager
    dispatches a task, holding the GIL: 2.1 of 4.2 ms per 4,096 points. (An
    array is immutable: every call may share it. `device` and `x64`, the
    thread's, are in the key: a pinned thread's array lives on its device.)
    Made on the host and copied in once, not by `jnp.full` on the device: that
    compiled a program in every process (~40 ms each on CPU, of a warm run's
    0.6 s to its first results); and copied by `device_put`, not `jnp.asarray`,
    which in JAX 0.10 stages the copy as a program of its own (compiled again
    in every process: tests/test_warm_compiles.py).

    On an accelerator, made there by a program of one broadcast (one a batch
    and dtype, read from the compile cache by a warm process): copied in, a
    2^20-point float64 batch took 4.2 ms through one H100 machine's pageable
    host memory, the bicycle's 27 fixed parameters 0.11 s of every process."""
    one = np.frombuffer(value, dtype)[0]
    if current_device().platform == "cpu":
        return jax.device_put(np.full((batch,), one))
    return _broadcast(batch)(one)


@functools.cache
def _broadcast(batch: int):
    """The program making a batch of one value, on the calling thread's device."""
    return jax.jit(lambda one: jnp.broadcast_to(one, (batch,)))


def call_room(plan: Plan, points: int) -> int:
    """The length of columns that hold `points` points and their last call's
    padding: whole calls of the plan's batch (queue_calls' `points`)."""
    return -(-points // plan.batch) * plan.batch


def pad_last_call(columns, points: int, batch: int) -> None:
    """The room of each of `columns` after its `points` points, up to the end of
    the last call, filled as _padded fills a copy: with copies of that call's
    first point. (Copied instead, a GPU-sized task's last call, of 1,040,000
    points in a batch of 2^20, cost 3-7 ms a column on 2 cores: the whole call.)"""
    last = (points - 1) // batch * batch
    for column in columns:
        column[points:last + batch] = column[last]


def _padded(values: np.ndarray, batch: int) -> np.ndarray:
    """`values` then copies of its first value, `batch` in all. (Taken by an index
    array, the copy cost 10 ms per 2^20-point column on 2 cores: 60% of a
    GPU-sized task's host work where its study has nothing to solve.)"""
    out = np.empty((batch, *values.shape[1:]), values.dtype)
    out[: len(values)] = values
    pad_last_call((out,), len(values), batch)  # the one padding rule, a task's columns' too
    return out


def _selected(study, outputs, settings: SolverSettings) -> tuple[str, ...]:
    """The outputs asked for (None: every output the study declares, its
    sampled ones where the settings sample times)."""
    if outputs is not None:
        return tuple(outputs)
    return tuple(o.name for o in study.outputs if settings.save_times or not o.sampled)


def _fixed_and_columns(study, params: dict, batch: int, dtype: str) -> tuple[dict, dict]:
    """The study's parameters of `params` (name -> 1-D array): the fixed ones (a
    value seen n times, a broadcast view) as their batches on the device
    (_filled), the varying ones as host columns."""
    raw = {p.name: np.asarray(params[p.name]) for p in study.parameters}
    fixed = {k: _filled(batch, np.asarray(v[0], dtype=dtype).tobytes(), dtype,
                        jax.config.jax_default_device, jax.config.jax_enable_x64)
             for k, v in raw.items() if v.ndim == 1 and v.size and v.strides[0] == 0}
    return fixed, {k: np.asarray(v, dtype=dtype) for k, v in raw.items() if k not in fixed}


def _call_args(columns: dict, fixed: dict, start: int, stop: int, batch: int, put) -> dict:
    """The arguments of the call of points start:stop, always `batch` of them;
    the varying columns copied by `put` (_put_for; None: read where they are)."""
    if all(len(v) >= start + batch for v in columns.values()):  # a whole batch, or the
        args = {k: v[start:start + batch] for k, v in columns.items()}  # last padded in its room: views
    else:  # padded with copies of the batch's first point: same compiled shape every call
        args = {k: _padded(v[start:stop], batch) for k, v in columns.items()}
    if put is not None:  # the varying columns' copies issued (on CPU the call reads them where they are);
        with stages.stage("copy in"):  # not waited for here: the call queues behind them
            args = put(args)
    return args | fixed


def _put_for(staging: Staging, accelerator: bool):
    """How a call's varying columns leave the host's memory: on an accelerator
    copied to the device, or into pinned host memory whence the call moves them
    (engine.solve.staging); on CPU not at all (None)."""
    if not accelerator:
        return None
    return to_pinned if staging.inputs_pinned else jax.device_put


def _is_float64(settings: SolverSettings) -> bool:
    return jnp.dtype(settings.dtype) == jnp.float64


def _in_precision(context: contextlib.ExitStack, float64: bool) -> None:
    """JAX's x64 entered in `context` where `float64` asks for it and this thread lacks it."""
    if float64 and not jax.config.jax_enable_x64:
        context.enter_context(float64_here())


def _in_settings_and_plan(fn):
    """fn(study, settings, ..., plan=...) under JAX's x64 where its settings are
    float64 and the calling thread has no x64 (a notebook that never ran
    `engine.run`: there it solved in float32, with a warning of JAX's only, the
    bouncing ball at rtol 1e-10 taking 15,000 steps a point instead of 60); and
    with its calls on the plan's platform (engine.solve.device.on_platform), as
    a run's tasks have them: a CPU plan on a GPU machine (the host kernel, a
    sweep too small for the GPU) otherwise ran on the GPU, where the host
    kernel cannot read its buffers."""

    @functools.wraps(fn)
    def in_settings_and_plan(study, settings: SolverSettings, *args, **kwargs):
        with contextlib.ExitStack() as context:
            _in_precision(context, _is_float64(settings))
            if kwargs.get("plan") is not None:
                context.enter_context(on_platform(kwargs["plan"].device.platform))
            return fn(study, settings, *args, **kwargs)

    return in_settings_and_plan


@_in_settings_and_plan  # as evaluate: its program is the one evaluate calls
def load_ahead(study, settings: SolverSettings, params: dict, outputs=None, *, plan: Plan):
    """Make ready, before the first call, the program that `evaluate` of
    `params` (any points of the sweep: the arguments' kinds matter, not their
    values) with these `outputs` and `plan` calls: traced or read and lowered on
    this thread, compiled on a thread of its own, which is returned (None where
    the program is ready or being made already). The first call waits for it.
    A run starts it before the store's creation, whose work then overlaps the
    compile: on CPU a warm process reads XLA's executable from the compile
    cache there, 0.33 s of a 4,096-point pingpong run's 1.2 s on 2 cores."""
    staging = staging_for(plan.device.accelerator)
    fn = _compiled(study, settings, _selected(study, outputs, settings), plan, staging)
    if fn.started():
        return None
    try:
        # Under a clock of its own: its copies are no stage of the caller's (a
        # run's "program" stage holds all of it).
        with stages.running(stages.Clock("program")):
            fixed, columns = _fixed_and_columns(study, params, plan.batch, settings.dtype)
            count = min(len(next(iter(params.values()))), plan.batch)
            args = _call_args(columns, fixed, 0, count, plan.batch, _put_for(staging, plan.device.accelerator))
            return fn.load_ahead(args, np.int32(count))
    except Exception:  # noqa: BLE001 - as the program's own load_ahead: left for the first call
        return None


@_in_settings_and_plan
def evaluate(
    study,
    settings: SolverSettings,
    params: dict,
    batch_size: int | None = None,
    outputs=None,
    *,
    solver: str | None = None,
    width: int | None = None,
    plan: Plan | None = None,
    empty=np.empty,
) -> Evaluation:
    """Solve every point of `params` (name -> equal-length 1-D arrays).

    `outputs` names the outputs wanted (default: all the study declares).
    `plan` says how; without one, a plan is made for this device from
    `solver` (a name of engine.solve.SOLVERS; default: the device's choice),
    `batch_size` (points per call) and `width` (points in flight).
    `empty(shape, dtype)` makes the whole result arrays where a call does not
    make them (a run's task hands out arrays of earlier tasks:
    engine.solve._host_memory.reused_arrays).

    Settings of float64 (the default) solve in float64 wherever this is
    called from (_in_settings_and_plan).
    """
    if plan is None:
        plan = make_plan(study, solver=solver, batch=batch_size, width=width, sampled=bool(settings.save_times),
                         integrator=settings.solver)
    return Queued(study, settings, params, outputs, plan, empty).result()


@_in_settings_and_plan
def queue_calls(study, settings: SolverSettings, params: dict, outputs=None, *, plan: Plan,
                empty=np.empty, points: int | None = None) -> "Queued":
    """evaluate's calls for `params`, the first WINDOW + 1 queued now on this
    thread's device (its points packed, its inputs' copies issued): their results
    are gathered by the returned Queued's result(), on this thread or another,
    which queues the rest as they end. A run's pipeline queues a task's calls so
    on its feeding thread and hands the gathering and the writes to a writer
    (engine.runner.pipeline).

    `points`: the points solved, where the varying columns are longer:
    call_room long, their room holding the last call's padding (pad_last_call),
    so that no call copies its columns (None: every column's length)."""
    return Queued(study, settings, params, outputs, plan, empty, points=points)


class Queued:
    """A batch of points being solved: its calls queued on the device, `ahead`
    in flight at a time, and each call's results gathered as it ends, into the whole
    arrays, while the next calls run: on CPU the copies overlap them, and a
    call's buffers go back once copied. The calls queued after the first (by
    result(), maybe on another thread) go where the first went, in the same
    precision.

    Every call has the plan's batch shape (the last one padded), so one
    compiled program serves every call and a point's result cannot depend on
    how many points came with it."""

    def __init__(self, study, settings: SolverSettings, params: dict, outputs, plan: Plan, empty,
                 ahead: int = WINDOW + 1, points: int | None = None):
        self._selected = _selected(study, outputs, settings)
        staging = staging_for(plan.device.accelerator)
        self._fn = _compiled(study, settings, self._selected, plan, staging)
        self._layout = packed_layout(study, settings, self._selected, plan, staging)  # None: results not packed
        self._put = _put_for(staging, plan.device.accelerator)
        self._batch = plan.batch
        self._accelerator = plan.device.accelerator
        self._empty = empty
        self._n = n = len(next(iter(params.values()))) if points is None else points
        if n == 0:
            raise ValueError(f"evaluate of study {study.name!r}: no points (every parameter's column is empty)")
        # A fixed parameter (one value seen n times: a broadcast view) is put on the
        # device once, as a batch of its value, and passed to every call: copied in
        # call by call from its view it cost ~10 ns a point (rebound regime map, one
        # core, 16,384 points a call: 50 against 40). Not as its one value (0-d,
        # vmapped with in_axes None), though that was faster (rebound regime map:
        # 14.1 -> 11.8 ns a point): the program then computes what depends on fixed
        # values alone once, by scalar code whose roundings are not the vectorised
        # code's (the bicycle's eigenvalues differed in the last bit), and a point's
        # results would depend on whether its sweep fixes a parameter or sweeps it
        # (tests/test_fixed_values.py).
        # Made once a process (_filled): copied in from its view at every call it was
        # 8 bytes a point per fixed parameter through the host's memory and the bus
        # (on a GPU, a 2^20-point call of the rolling ball moved 48 MB for its six
        # fixed parameters).
        self._fixed, self._columns = _fixed_and_columns(study, params, self._batch, settings.dtype)
        self._host = []  # the whole arrays, made at the first results: the selected outputs, status, steps, events
        self._starts = iter(range(0, n, self._batch))
        self._in_flight = collections.deque()
        self._ahead = ahead
        # Where the first calls go (this thread's device, which the caller may have
        # chosen: engine.solve.device.on_platform, a thread pinned to one of several),
        # as JAX's setting says it: set again only where a later thread's differs
        # (the setting is part of a jitted function's cache key).
        self._device = jax.config.jax_default_device
        self._float64 = _is_float64(settings)
        self._queue()

    @contextlib.contextmanager
    def _as_first(self):
        """The block's calls queued as the first ones were (_device, _float64)."""
        with contextlib.ExitStack() as context:
            _in_precision(context, self._float64)
            if jax.config.jax_default_device is not self._device:
                context.enter_context(jax.default_device(self._device))
            yield

    def _queue(self) -> None:
        """Calls queued until `ahead` are in flight or none is left."""
        while len(self._in_flight) < self._ahead:
            start = next(self._starts, None)
            if start is None:
                return
            stop = min(start + self._batch, self._n)
            args = _call_args(self._columns, self._fixed, start, stop, self._batch, self._put)
            with stages.stage("device"):  # queued; on CPU the call may run here
                call = self._fn(args, np.int32(stop - start))
            if self._accelerator:  # each array's copy to the host starts as soon as the call ends
                # (a stage of its own: asking for the copies held the task threads: 23 of the 42
                # samples py-spy took of them in a warm 4M-point run, one H100, 2026-11-27)
                with stages.stage("copy out"):
                    for piece in jax.tree.leaves(call):
                        piece.copy_to_host_async()
            self._in_flight.append((start, stop - start, call))

    def _collect(self, start, count, call) -> None:
        # On an accelerator a call's arrays come back together (their copies started
        # when it was queued); on CPU they are views of its buffers (device_get
        # would copy them: one call of 2^20 rebound-regime points, 52 -> 55 ms).
        with stages.stage("device"):  # the call runs (or is still queued): wait for it
            jax.block_until_ready(call)
        with stages.stage("copy out"):
            if self._layout is not None:  # one buffer of every result's bytes, read as views
                pieces = unpacked(np.asarray(jax.device_get(call)), self._layout)
            else:
                results = listed(call, self._selected)
                pieces = jax.device_get(results) if self._accelerator else [np.asarray(p) for p in results]
        host, n = self._host, self._n
        if count == n:  # the only call (a GPU task is one): its arrays as they come out, not copied again
            host.extend(p[:count] for p in pieces)
            return
        if not host:
            host.extend(self._empty((n, *p.shape[1:]), p.dtype) for p in pieces)
        for whole, piece in zip(host, pieces, strict=True):
            whole[start:start + count] = piece[:count]

    def result(self) -> Evaluation:
        """Every call's results gathered (the calls not yet queued queued as
        earlier ones end): the points' outputs, status, steps and events."""
        while self._in_flight:
            self._collect(*self._in_flight.popleft())
            with self._as_first():
                self._queue()
        *values, status, steps, events = self._host
        return Evaluation(outputs=dict(zip(self._selected, values, strict=True)), status=status, num_steps=steps,
                          num_events=events)
