"""zarr's asynchronous API from synchronous code: one event loop thread per process.

Several arrays are written at once by gathering their writes on a loop (written
one after another, each waits for its own round trip). zarr's own loop helper is
private API, so the engine keeps its own loop.
"""

import asyncio
import os
import threading

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_loop_pid: int | None = None


def _running_loop() -> asyncio.AbstractEventLoop:
    global _loop, _loop_pid
    with _lock:
        # A forked child inherits the loop object but not its thread: it starts its own.
        if _loop is None or _loop_pid != os.getpid():
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="rollsweep-io", daemon=True).start()
            _loop_pid = os.getpid()
        return _loop


def sync(coroutine):
    """Run `coroutine` on the process's loop thread and return its result (or raise its error)."""
    return asyncio.run_coroutine_threadsafe(coroutine, _running_loop()).result()
