"""Run one py-rattler coroutine so that the process can exit safely afterwards.

Why (tests/perf/rattler_exit_crash.py reproduces it; docs/conda-lock.md has the counts):
py-rattler's awaitables come from pyo3-async-runtimes' `future_into_py_with_locals`. When the
Rust future is done, a tokio blocking thread takes the GIL and runs the event loop's Python
`call_soon_threadsafe` to hand over the result, then drops its references to the future and
to the TaskLocals (event loop + contextvars context). That thread can lose the GIL in the
middle of this (the self-pipe write releases it); the main thread then resumes, `asyncio.run`
returns, and the interpreter starts finalizing. When the tokio thread asks for the GIL again,
CPython ends it with pthread_exit, and unwinding through pyo3's guard aborts the process
("PyGILState_Release: thread state ... must be current when releasing", SIGABRT) or crashes it
(SIGSEGV) - after the install had completed.

The fix follows from that: rattler's thread holds a reference to *our* event loop until it has
finished with Python. We run each coroutine on a loop we own and, before returning, wait until
the loop's reference count is back to what it was before rattler saw it, i.e. until rattler's
thread has let go of it. That is a wait on the exact condition, not a pause: it usually ends
at once, and after it no rattler thread needs the GIL for this call. (A reference a rattler
thread dropped *without* the GIL is parked in pyo3's pool until the next call into pyo3, e.g.
after an install with nothing to do; the wait makes such a call, which applies it.)
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

RELEASE_DEADLINE_S = 10.0  # rattler lets go within microseconds; this only bounds a surprise
_YIELD_S = 0.0002  # releases the GIL so rattler's thread can finish with it


def _apply_pending_decrefs() -> None:
    """A reference that a rattler thread dropped without the GIL waits in pyo3's pool until
    the next call into pyo3 applies it; any cheap call into rattler's extension is one."""
    import rattler

    rattler.Version("0")


def run(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """make() builds the coroutine (so it is created with our loop set); returns its result."""

    async def settled() -> tuple[bool, Any]:
        # Catch inside the loop: an exception escaping run_until_complete would carry frames
        # that reference the loop and keep its count above the baseline.
        try:
            return True, await make()
        except BaseException as error:
            return False, error

    loop = asyncio.new_event_loop()
    baseline = sys.getrefcount(loop)
    try:
        ok, outcome = loop.run_until_complete(settled())
    except BaseException:  # interrupted (Ctrl-C): nothing left worth waiting for
        loop.close()
        raise
    # Measured in this frame, like `baseline`: any excess is rattler's.
    deadline = time.monotonic() + RELEASE_DEADLINE_S
    while sys.getrefcount(loop) > baseline and time.monotonic() < deadline:
        _apply_pending_decrefs()
        time.sleep(_YIELD_S)
    loop.close()
    if not ok:
        raise outcome
    return outcome
