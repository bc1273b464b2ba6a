"""Bounds on one file's analysis: work budgets that count work, and a far-off safety clock.

Work budgets make the result a function of the file alone: the same file yields the same findings,
notes and exit code on an idle laptop and on a loaded CI runner. The interpreter counts statements
and paths (`max-steps`, `max-paths`: interpret.py, over_budget.py); the solver side counts z3's own
resource units (`rlimit`), which z3 increments deterministically as it works:

* every query gets `z3-rlimit` units (smt.py sets it on the solver; z3 counts it per check);
* every function's queries together get `z3-function-rlimit` units (`solver_allowance`): each query
  costs what z3 counted for it plus `QUERY_UNITS` for the work around it (building the facts, the
  call itself), so that a function of very many cheap queries is bounded too. Past it,
  `SolverBudgetSpent`: the engine cuts that function short with a note and goes on with the next.

The safety clock (`file_budget(seconds)`, `file-timeout`) is far off, about ten times what the
slowest file of the measured corpora takes: only a file the work budgets fail to bound (a hostile
one, or a bug) reaches it, and that file is an error (`BudgetExceeded`). Inside it:

* the engine's loops call `check_active()`, which raises `BudgetExceeded` once the time is spent;
* every z3 solver is wrapped by `bounded_solver`: a query that ends after the deadline stops the
  file instead of becoming a silent "unknown";
* a hard backstop, a little after the deadline: a SIGALRM (only in a main thread on POSIX, which is
  where both `-j 1` runs and worker processes analyse files) raises `BudgetExceeded` wherever the
  Python code happens to be, and a timer thread interrupts every z3 solver the file created (z3's
  own cross-thread cancellation), since a signal handler cannot run while z3's native code does.
  The alarm never raises inside an import (a module cut off half-way stays broken for every later
  file of the process: z3 was seen losing `is_expr`); it waits for the import to end.
* the z3 contexts a stopped file created are never deleted (`track_context`): z3's destructor of
  such a context was seen looping forever in a worker, after the budget, where nothing bounds it
  (the run then hung on that worker); the process's exit frees their memory.

The deadline and the allowance are held in context variables rather than passed through every
stage, so that the engine's signatures stay as they are.
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
# What a query costs besides z3's own count: about the time of building its facts and of the call,
# in resource units (measured on torch/distributed and megatron-core: 0.3-0.5 ms a query, against
# 2-5 million units a second in queries that work hard).
QUERY_UNITS = 1_000
RESOURCE_COUNTER = "rlimit count"  # z3's statistic of the resource units its context spent


class BudgetExceeded(Exception):
    """A file's analysis ran past its wall-clock safety clock."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"over the per-file safety clock of {seconds:g} s")
        self.seconds = seconds


class SolverBudgetSpent(Exception):
    """One function's queries spent their `z3-function-rlimit`; the rest of its queries are not asked."""

    def __init__(self, units: int) -> None:
        super().__init__(f"its solver queries spent {units:,} z3 resource units")
        self.units = units


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


_ACTIVE: ContextVar[Deadline | None] = ContextVar("collcheck_file_deadline", default=None)


class SolverAllowance:
    """The z3 resource units one function's queries may spend: what z3 counted (its counter is one
    per z3 context, read after each check) plus `QUERY_UNITS` a query."""

    def __init__(self, units: int) -> None:
        self.units = units
        self.spent = 0
        self._last: dict[int, tuple[Any, int]] = {}  # id of a z3 context -> it, its count last read

    def before(self, solver: Any) -> None:
        if self.spent > self.units:
            raise SolverBudgetSpent(self.units)
        context = solver.ctx
        if id(context) not in self._last:
            self._last[id(context)] = (context, resource_count(solver))

    def after(self, solver: Any) -> None:
        context = solver.ctx
        count = resource_count(solver)
        self.spent += QUERY_UNITS + max(0, count - self._last[id(context)][1])
        self._last[id(context)] = (context, count)
        if self.spent > self.units:
            raise SolverBudgetSpent(self.units)


_ALLOWANCE: ContextVar[SolverAllowance | None] = ContextVar("collcheck_solver_allowance", default=None)


@contextmanager
def solver_allowance(units: int) -> Iterator[SolverAllowance]:
    """Charge the z3 queries of the body to one allowance of `units` (one function's)."""
    allowance = SolverAllowance(units)
    token = _ALLOWANCE.set(allowance)
    try:
        yield allowance
    finally:
        _ALLOWANCE.reset(token)


def resource_count(solver: Any) -> int:
    """z3's resource counter of the solver's context (0 before it counted anything)."""
    from z3.z3core import Z3_stats_get_key, Z3_stats_get_uint_value, Z3_stats_is_uint

    # One pass over z3's statistics (z3py's `keys()` then `get_key_value` walk them twice, each
    # key a call into z3, after every query).
    statistics = solver.statistics()
    reference = statistics.ctx.ref()
    for index in range(len(statistics)):
        if Z3_stats_get_key(reference, statistics.stats, index) == RESOURCE_COUNTER:
            if Z3_stats_is_uint(reference, statistics.stats, index):
                return int(Z3_stats_get_uint_value(reference, statistics.stats, index))
            return int(statistics.get_key_value(RESOURCE_COUNTER))
    return 0


def check_active() -> None:
    """Raise `BudgetExceeded` if the current file's safety clock has run out; nothing outside one."""
    deadline = _ACTIVE.get()
    if deadline is not None:
        deadline.check()


class BoundedSolver:
    """A z3 Solver whose `check` is charged to the current function's allowance and respects the
    file's safety clock; everything else passes through."""

    def __init__(self, solver: Any) -> None:
        self._solver = solver

    def check(self, *assumptions: Any) -> Any:
        deadline = _ACTIVE.get()
        allowance = _ALLOWANCE.get()
        if deadline is not None:
            deadline.check()
            if not any(solver is self._solver for solver in deadline.solvers):
                deadline.solvers.append(self._solver)
            # A query still running when the safety clock runs out ends by itself: the timer
            # thread's cross-thread interrupt is then a last resort (interrupting a check running
            # in another thread was seen to corrupt z3's heap: "double free" in a worker). Only a
            # file already past the clock, an error anyway, is affected: results stay a function
            # of the work budgets.
            self._solver.set("timeout", max(1, math.ceil(deadline.remaining() * 1000)))
        if allowance is not None:
            allowance.before(self._solver)
        verdict = self._solver.check(*assumptions)
        # An "unknown" because the clock ran out (the backstop's interrupt) is not the solver's
        # answer: stop the file.
        if deadline is not None:
            deadline.check()
        if allowance is not None:
            allowance.after(self._solver)
        return verdict

    def add(self, *facts: Any) -> None:
        """`Solver.add`, without z3py's checks of each fact's sort (a third of the cost of a query's
        facts, asked again for every fact of every query): a plain boolean term of the solver's
        own context goes to z3 as is, which is what `add` does with it after its checks; anything
        else (a Python bool, a quantifier, a term of another context) takes z3py's way."""
        from z3 import BoolRef
        from z3.z3core import Z3_solver_assert

        solver = self._solver
        context = solver.ctx
        for fact in facts:
            if type(fact) is BoolRef and fact.ctx is context:
                Z3_solver_assert(context.ref(), solver.solver, fact.as_ast())
            else:
                solver.add(fact)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._solver, name)


def bounded_solver(solver: Any) -> BoundedSolver:
    return BoundedSolver(solver)


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


JOIN_TIMER_S = 5.0  # the timer thread only calls `interrupt()`: it ends at once once cancelled
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
    """Run the body under a safety clock of `seconds` (None or 0: none, from the command line only)."""
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
        # The timer thread, if it ran, held the file's solvers: it must be gone before this thread
        # goes on, or it may drop their last references (z3 deletes them in that thread) while
        # this one uses z3, which aborted the process once ("Fatal Python error: Aborted" in
        # Z3_solver_dec_ref beside a Z3_dec_ref of the main thread).
        interrupter.join(JOIN_TIMER_S)
        _ACTIVE.reset(token)
