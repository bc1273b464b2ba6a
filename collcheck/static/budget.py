"""A wall-clock budget per analysed file (`file-timeout`).

The caller opens `file_budget(seconds)` around one file's analysis. Inside it:

* the engine's loops call `check_active()`, which raises `BudgetExceeded` once the time is spent;
* every z3 solver is wrapped by `bounded_solver`, so each query's timeout is the smaller of the
  per-query timeout and the time the file has left, and a query that ends after the deadline
  stops the file instead of becoming a silent "unknown";
* a hard backstop, a little after the deadline: a SIGALRM (only in a main thread on POSIX, which is
  where both `-j 1` runs and worker processes analyse files) raises `BudgetExceeded` wherever the
  Python code happens to be, and a timer thread interrupts every z3 solver the file created (z3's
  own cross-thread cancellation), since a signal handler cannot run while z3's native code does.
  The alarm never raises inside an import (a module cut off half-way stays broken for every later
  file of the process: z3 was seen losing `is_expr`); it waits for the import to end.
* the z3 contexts a stopped file created are never deleted (`track_context`): z3's destructor of
  such a context was seen looping forever in a worker, after the budget, where nothing bounds it
  (the run then hung on that worker); the process's exit frees their memory.

The deadline is held in a context variable rather than passed through every stage, so that the
engine's signatures stay as they are; it carries no setting that changes what a file yields.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

BACKSTOP_GRACE_S = 2.0  # after the deadline, how long the cooperative checks get before the alarm


class BudgetExceeded(Exception):
    """A file's analysis ran past its wall-clock budget."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"over the per-file time budget of {seconds:g} s")
        self.seconds = seconds


@dataclass(frozen=True)
class Deadline:
    """`seconds` of wall-clock time, counted from `started` (time.monotonic()), the solvers
    working under it (for the backstop's interrupt) and the z3 contexts created under it (kept
    from deletion if the file is stopped)."""

    seconds: float
    started: float
    solvers: list[Any] = field(default_factory=list, compare=False, repr=False)
    contexts: list[Any] = field(default_factory=list, compare=False, repr=False)

    def remaining(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def expired(self) -> bool:
        return self.remaining() <= 0

    def check(self) -> None:
        if self.expired():
            raise BudgetExceeded(self.seconds)

    def query_timeout_ms(self, per_query_ms: int) -> int:
        """The per-query timeout, shortened to what is left of the file's budget (at least 1 ms)."""
        left_ms = math.ceil(self.remaining() * 1000)
        return max(1, min(per_query_ms, left_ms))


_ACTIVE: ContextVar[Deadline | None] = ContextVar("collcheck_file_deadline", default=None)


def active() -> Deadline | None:
    return _ACTIVE.get()


def check_active() -> None:
    """Raise `BudgetExceeded` if the current file's budget is spent; nothing outside a budget."""
    deadline = _ACTIVE.get()
    if deadline is not None:
        deadline.check()


class BoundedSolver:
    """A z3 Solver whose `check` respects the current file's deadline; everything else passes through."""

    def __init__(self, solver: Any, per_query_ms: int) -> None:
        self._solver = solver
        self._per_query_ms = per_query_ms

    def check(self, *assumptions: Any) -> Any:
        deadline = _ACTIVE.get()
        if deadline is None:
            return self._solver.check(*assumptions)
        deadline.check()
        if not any(solver is self._solver for solver in deadline.solvers):
            deadline.solvers.append(self._solver)
        self._solver.set("timeout", deadline.query_timeout_ms(self._per_query_ms))
        verdict = self._solver.check(*assumptions)
        # An "unknown" because the budget ran out is not the solver's answer: stop the file.
        deadline.check()
        return verdict

    def __getattr__(self, name: str) -> Any:
        return getattr(self._solver, name)


class SliceExceeded(Exception):
    """A part of a file's analysis ran past the share of the file's budget it was given; the rest
    of the file goes on."""


@contextmanager
def time_slice(seconds: float) -> Iterator[None]:
    """Run the body under a stricter deadline: `seconds`, or what the file has left if less.
    Past it, `SliceExceeded` (the file's own deadline, if that is what passed, still raises
    `BudgetExceeded`). Outside a file budget: no limit."""
    outer = _ACTIVE.get()
    if outer is None:
        yield
        return
    inner = Deadline(
        max(0.0, min(seconds, outer.remaining())), time.monotonic(), outer.solvers, outer.contexts
    )
    token = _ACTIVE.set(inner)
    try:
        yield
    except BudgetExceeded:
        if outer.expired():
            raise
        raise SliceExceeded(f"over its {seconds:.2g} s share of the file's time budget") from None
    finally:
        _ACTIVE.reset(token)


def bounded_solver(solver: Any, per_query_ms: int) -> BoundedSolver:
    return BoundedSolver(solver, per_query_ms)


def track_context(context: Any) -> None:
    """Register a z3 context created for the current file: if the file is stopped, the context
    is disowned (`_disown`) instead of deleted. Outside a budget: nothing."""
    deadline = _ACTIVE.get()
    if deadline is not None:
        deadline.contexts.append(context)


def _disown(contexts: list[Any]) -> None:
    """Never delete these z3 contexts (z3py deletes a context it `owner`s when the last object
    of it goes): the analysis that used them was cut off at an arbitrary point, and z3's
    destructor of such a context was seen looping forever."""
    for context in contexts:
        context.owner = False
    contexts.clear()


def _interrupt_solvers(deadline: Deadline) -> None:
    """From the timer thread: cancel whatever check the file's solvers are running."""
    for solver in list(deadline.solvers):
        with contextlib.suppress(Exception):  # a solver already gone is nothing to interrupt
            solver.interrupt()


def _alarm_usable() -> bool:
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return False
    # Someone else's alarm (a test runner's timeout, an outer budget) is left alone.
    return signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


_IMPORT_MACHINERY = "<frozen importlib"  # the file names of importlib's own frames
_IMPORT_WAIT_S = 0.05  # how soon the alarm comes back when it found an import in progress


def _importing(frame: FrameType | None) -> bool:
    """Whether `frame` or a caller of it is executing an import."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(_IMPORT_MACHINERY):
            return True
        frame = frame.f_back
    return False


@contextmanager
def file_budget(seconds: float | None, grace: float = BACKSTOP_GRACE_S) -> Iterator[Deadline | None]:
    """Run the body under a budget of `seconds` (None or 0: unbounded)."""
    if not seconds:
        yield None
        return
    deadline = Deadline(float(seconds), time.monotonic())
    token = _ACTIVE.set(deadline)
    interrupter = threading.Timer(float(seconds) + grace, _interrupt_solvers, args=(deadline,))
    interrupter.daemon = True
    interrupter.start()
    backstop = _alarm_usable()
    previous: Any = None
    ended = False  # an alarm already due when the body ends is ignored, not raised in the cleanup

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if ended:
            return
        if _importing(frame):
            signal.setitimer(signal.ITIMER_REAL, _IMPORT_WAIT_S)
            return
        raise BudgetExceeded(deadline.seconds)

    if backstop:
        previous = signal.signal(signal.SIGALRM, interrupt)
        signal.setitimer(signal.ITIMER_REAL, float(seconds) + grace)
    try:
        yield deadline
    except BudgetExceeded:
        ended = True
        _disown(deadline.contexts)
        raise
    finally:
        ended = True
        if backstop:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
        interrupter.cancel()
        _ACTIVE.reset(token)
