"""How a command takes its stops: SIGTERM (a scheduler's or `kill`'s) and
Ctrl-C (SIGINT), raised in the main thread as Terminated and KeyboardInterrupt.

Three ways a stop went astray, each handled here:

- Python prints and drops an exception raised in a garbage collector's
  callback (JAX has one) or a __del__ (sys.unraisablehook), and a signal's
  exception is raised wherever the main thread happens to be: the run went
  on, to its end. A stop dropped so is sent again a moment later, from a
  thread (sent from the hook, it would be raised there and dropped again),
  unless another stop has been raised since: one on its way out is never
  raised again inside its own clean-up.
- Raised while a C extension initialised (jaxlib, imported by a run), a stop
  became an ImportError, and the process crashed at its exit (SIGSEGV): a
  stop that comes while the command imports (`deferred`) is raised once the
  import is done (a second one at once: an import that hangs can be stopped).
- A stop raised during clean-up that fails another way surfaces as that
  error: `behind` finds the stop in its chain.

A stop is handled so where its signal has its default (SIGTERM: SIG_DFL;
SIGINT: Python's own handler): a shell that ignores Ctrl-C for a background
job, or a caller's own handler, keeps it.
"""

import contextlib
import os
import signal
import sys
import threading


class Terminated(KeyboardInterrupt):
    """SIGTERM (a job scheduler's or `kill`'s stop), handled as Ctrl-C is."""


# A stop that Python dropped is sent again this much later.
RESEND_AFTER = 0.05


class Stops:
    """One command's stops (see the module's docstring); `taken` is set where
    the command takes one, and no stop is raised or sent after it."""

    def __init__(self):
        self.taken = threading.Event()
        self.raised: list[KeyboardInterrupt] = []
        self.resends: list[threading.Timer] = []
        self.previous_hook = sys.unraisablehook
        self.deferring = False
        self.pending: int | None = None  # a stop that came while deferring

    def raise_stop(self, signum, frame):
        if self.taken.is_set():  # sent again, late for a command that has already stopped
            return
        if self.deferring and self.pending is None:
            self.pending = signum
            return
        stop = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        self.raised.append(stop)
        raise stop

    def ours(self, error) -> bool:
        return any(error is stop for stop in self.raised)

    @contextlib.contextmanager
    def deferred(self):
        """A stop that comes inside is raised as it ends."""
        self.deferring = True
        try:
            yield
        finally:
            self.deferring = False
            signum, self.pending = self.pending, None
            if signum is not None:
                self.raise_stop(signum, None)

    def dropped(self, unraisable):
        """sys.unraisablehook: a stop of this command's that Python dropped is sent again."""
        if _current is self and self.ours(unraisable.exc_value) and not self.taken.is_set():
            signum = signal.SIGTERM if isinstance(unraisable.exc_value, Terminated) else signal.SIGINT
            resend = threading.Timer(RESEND_AFTER, self._resend, (signum, len(self.raised)))
            resend.daemon = True
            try:
                resend.start()
                self.resends.append(resend)
            except RuntimeError:  # no thread to be had: the stop is lost, as Python would lose it
                pass
        try:
            self.previous_hook(unraisable)  # printed, as Python does
        except BaseException:  # noqa: BLE001 - a broken or closed stderr, or a stop raised while printing
            pass

    def _resend(self, signum: int, raised: int):
        if not self.taken.is_set() and len(self.raised) == raised:
            os.kill(os.getpid(), signum)

    def close(self):
        """No stop raised or sent any more: every resend stopped or waited for."""
        self.taken.set()
        for resend in self.resends:
            resend.cancel()
            resend.join()


def _stopped_early(signum, frame):
    """Ctrl-C before the command's own stops are taken (while the program
    imports its modules) or after they are given back (as it exits): nothing is
    under way, so the process ends at once with one line, not a traceback."""
    try:
        sys.stdout.flush()  # what the command printed, where it has returned
    except BaseException:  # noqa: BLE001, S110 - a flush interrupted mid-write, a closed stream: ending anyway
        pass
    try:
        os.write(2, b"rollsweep: interrupted\n")
    finally:
        os._exit(130)


def early() -> None:
    """In the program's own process (the `rollsweep` script, `python -m
    engine.cli`), Ctrl-C ends it with one line until the command takes its
    stops (taken_in_main_thread), and again once it gives them back. Nothing
    changes in another process that imports the engine (a notebook, a test)."""
    if _is_the_program() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _stopped_early)


def _is_the_program() -> bool:
    processes = sys.modules.get("multiprocessing")  # a worker it started, given its sys.argv: not the program
    if processes is not None and processes.parent_process() is not None:
        return False
    if os.path.basename(sys.argv[0]).removesuffix(".exe") == "rollsweep":
        return True
    # `python -m engine.cli`: while the package is imported sys.argv[0] is still "-m".
    argv = getattr(sys, "orig_argv", [])
    return any(a == "-m" and b == "engine.cli" for a, b in zip(argv, argv[1:], strict=False))


# The stops of the command running in the main thread (None: none is).
_current: Stops | None = None


def current() -> Stops | None:
    """The stops of the command running in the main thread, asked from it (None elsewhere)."""
    return _current if threading.current_thread() is threading.main_thread() else None


@contextlib.contextmanager
def taken_in_main_thread():
    """A command's stops, for the command run inside (in the main thread; in
    another, where signals never go, nothing is changed). Every handler and
    hook it installs is given back if still installed, and an enclosing
    command's stops are current again."""
    global _current
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    stops, enclosing, previous = Stops(), _current, {}
    try:
        _current = stops
        sys.unraisablehook = stops.dropped
        for signum, default in ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler)):
            if signal.getsignal(signum) in (default, _stopped_early):  # (early's: given back as the command ends)
                previous[signum] = signal.signal(signum, stops.raise_stop)
        yield stops
    finally:
        try:
            stops.close()
        finally:
            for signum, handler in previous.items():
                if signal.getsignal(signum) == stops.raise_stop:
                    signal.signal(signum, handler)
            if sys.unraisablehook == stops.dropped:
                sys.unraisablehook = stops.previous_hook
            _current = enclosing


def deferred():
    """Stops that come inside raised as it ends (for an import: see the module's docstring)."""
    stops = current()
    return stops.deferred() if stops is not None else contextlib.nullcontext()


def behind(error: BaseException) -> KeyboardInterrupt | None:
    """The current command's stop that `error` was raised in the handling of, if any."""
    stops, seen = current(), set()
    while stops is not None and error is not None and id(error) not in seen:
        if stops.ours(error):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def take(stop: KeyboardInterrupt) -> int:
    """The command takes `stop`: none raised or sent after it. Its exit code."""
    stops = current()
    if stops is not None:
        stops.taken.set()
    return 143 if isinstance(stop, Terminated) else 130
