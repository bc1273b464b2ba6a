"""`try` statements: which paths enter an `except` handler, and under what condition.

In: an `ast.Try`, the path's `State` on entry and the `Frame`. Out: the states after the whole
statement (body and `else`, the handlers, then `finally`). The statement interpreter
(`interpret.Interpreter`) inherits this and supplies `exec_block`.

Paths into a handler:

* an explicit `raise` in the body lands there (any rank that raised);
* an error one rank can hit alone (a data or I/O error, running out of memory:
  `syntax.catches_data_errors`) enters it on some ranks only: a flag that differs between ranks
  (`nondet`). Followed when the handler leaves the loop or function (its ranks skip what the
  others still do) or when it communicates (its ranks issue what the others do not);
* any other exception (`except RuntimeError:` around a call that fails the same way everywhere,
  a backend's missing feature) is followed as one that every rank takes together: a flag the
  same on every rank (`shared`). Then the handler is compared only with itself, so its own
  rank-dependent code (`if rank == 0: all_reduce(t)` in a fallback) is checked without claiming
  that one rank fails where another does not. Followed only when the handler communicates.

A handler entered without an explicit raise starts from the state before the `try`; variables
the body assigns may hold their value from before the body or after it.
"""

from __future__ import annotations

import ast

from collcheck.static.conditions import ConditionKind, source_of
from collcheck.static.helpers import HelperInliner
from collcheck.static.names import nodes_under, source_text
from collcheck.static.state import Frame, State, merge_envs
from collcheck.static.symbolic import Atom, negate
from collcheck.static.syntax import assigned_names, catches_data_errors, may_leave
from collcheck.static.values import where_of


class ExceptionFlow(HelperInliner):
    """`try`/`except`/`else`/`finally` for the statement interpreter."""

    def _stmt_Try(self, stmt: ast.Try, state: State, frame: Frame) -> list[State]:
        body_states = self.exec_block(stmt.body, [state.fork()], frame)
        normal = [s for s in body_states if s.exit is None or s.exit.kind != "raise"]
        raised = [s for s in body_states if s.exit is not None and s.exit.kind == "raise"]
        handled: list[State] = []
        for handler in stmt.handlers:
            states, flag = self._handler(stmt, handler, state, raised, normal, frame)
            handled.extend(states)
            if flag is not None:  # the paths through the body are those without that exception
                normal = [s.fork(negate(flag)) for s in normal]
        results = self.exec_block(stmt.orelse, normal, frame) if stmt.orelse else normal
        results.extend(handled)
        if not stmt.handlers:
            results.extend(raised)
        if stmt.finalbody:
            results = self._finally(stmt.finalbody, results, frame)
        return results

    _stmt_TryStar = _stmt_Try

    def _handler(
        self,
        stmt: ast.Try,
        handler: ast.ExceptHandler,
        entry: State,
        raised: list[State],
        normal: list[State],
        frame: Frame,
    ) -> tuple[list[State], Atom | None]:
        """The states after `handler`, and the flag of an exception it was entered by, if the
        paths through it are kept apart from those through the body."""
        starts = []
        for state in raised:  # an explicit raise inside the body lands here
            start = state.fork()
            start.exit = None
            starts.append(start)
        per_rank = catches_data_errors(
            handler, {name: info.bases for name, info in self.module.classes.items()}
        )
        flag = Atom(f"exception@{where_of(handler)}", "nondet", why="an exception")
        text = "except" + (f" {source_text(handler.type)}" if handler.type is not None else "")
        origin = source_of(handler, self.module.path, ConditionKind.EXCEPTION, text)
        self.conditions.note(flag, origin)
        calls = any(isinstance(node, ast.Call) for part in stmt.body for node in nodes_under(part))
        if per_rank and may_leave(handler.body) and calls:
            # Any call may raise on some ranks only (bad data, I/O): a handler that leaves the
            # loop or function then skips what the other ranks still do.
            starts.append(entry.fork(flag))
        if handler.name:
            for start in starts:
                start.env[handler.name] = Atom(f"exc@{where_of(handler)}", "shared")
        results = self.exec_block(handler.body, starts, frame) if starts else []
        if (per_rank and may_leave(handler.body) and calls) or not stmt.body:
            return results, None
        if not per_rank:
            flag = Atom(flag.name, "shared")
            self.conditions.note(flag, origin)
        entered = self._communicating_handler(stmt, handler, entry.fork(flag), normal, frame)
        return [*results, *entered], flag if entered else None

    def _communicating_handler(
        self, stmt: ast.Try, handler: ast.ExceptHandler, start: State, normal: list[State], frame: Frame
    ) -> list[State]:
        """The handler entered by an exception of the body (not an explicit raise), from `start`:
        its states if it communicates, else none."""
        if normal:
            body_env = merge_envs([start, *normal])
            for name in assigned_names(stmt.body):
                if name in body_env:
                    start.env[name] = body_env[name]
        if handler.name:
            start.env[handler.name] = Atom(f"exc@{where_of(handler)}", "shared")
        before = start.events
        states = self.exec_block(handler.body, [start], frame)
        if not self.record_events or all(state.events == before for state in states):
            return []
        return states

    def _finally(self, body: list[ast.stmt], states: list[State], frame: Frame) -> list[State]:
        results = []
        for state in states:
            pending = state.exit
            resumed = state.fork()
            resumed.exit = None
            for after in self.exec_block(body, [resumed], frame):
                if after.exit is None:
                    after.exit = pending
                results.append(after)
        return results
