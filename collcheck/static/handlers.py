"""`try` statements: which paths enter an `except` handler, and under what condition.

In: an `ast.Try`, the path's `State` on entry and the `Frame`. Out: the states after the whole
statement (body and `else`, the handlers, then `finally`). The statement interpreter
(`interpret.Interpreter`) inherits this and supplies `exec_block`.

Paths into a handler:

* an explicit `raise` in the body lands there (any rank that raised);
* an error one rank can hit alone (a data or I/O error, running out of memory:
  `syntax.catches_data_errors`) enters it on some ranks only: a flag that differs between ranks
  (`nondet`). Followed when the handler leaves the loop or function (its ranks skip what the
  others still do) or when it communicates (its ranks issue what the others do not). Not when
  what it catches comes only from `raise` statements the body reaches (itself, or in helpers
  it runs: inside such a body, helpers that may raise are run, `raises.may_raise`), each under
  tests that are the same on every rank and read no data (`raises.data_tests`), while every call
  of the body is one the analysis follows or a function of the run (a helper of another file is
  run there when the project index says it may raise: `Project.may_raise`, so that a validation
  written in another module is seen with its tests): then every rank raises or
  none does, and the handler is entered only by those raises, under their conditions;
* a failure of a call that may fail on one rank alone (`failures.may_fail_alone`: files, a
  future's `result()`, the network, a callable handed in), caught by a broad handler (`except
  Exception:`, bare, a data error) that lets its rank go on, enters it on some ranks only when
  that rank then does what the others do not: the body issues collectives after that call
  (the failed rank skips them), or the body leaves (`break`, `return`) where the handler falls
  through; and when the handler records the failure in a name read later (in the `finally`, or
  after the `try`) and the call touches the process's own world (`failures.touches_own_world`).
  A handler that always raises again ends its rank (not a divergence) unless its `finally` read
  the record: that raise is marked (`Exit.after_recorded_failure`) and compared. A body that waits
  on its collectives with a timeout (`work.wait(t)`) makes the others fail too: not followed;
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
from collections.abc import Callable
from dataclasses import replace

from collcheck.catalog import FILESYSTEM_STATE
from collcheck.findings import ConditionKind
from collcheck.static.calls import CallKind
from collcheck.static.conditions import source_of
from collcheck.static.failures import always_raises, catches_broadly, may_fail_alone, touches_own_world
from collcheck.static.inliner import HelperInliner
from collcheck.static.names import nodes_under, qualified_name, source_text
from collcheck.static.program import CAUGHT_EXCEPTION, Element, ExitKind, unposted
from collcheck.static.raises import catches
from collcheck.static.state import Frame, State, merge_envs
from collcheck.static.symbolic import Atom, GroupVal, is_rank_dependent, negate
from collcheck.static.syntax import assigned_names, catches_data_errors, may_leave, read_names
from collcheck.static.values import where_of

MAX_HELPER_DEPTH = 2  # functions of the file looked into for the I/O a failure may come from
GROUP_KEYWORDS = frozenset({"group", "process_group", "pg"})  # a call handed a group communicates


def _anchor_line(event: Element, depth: int) -> int:
    """The line, in the function being run (`depth` calls below the root), of the call that
    issued `event`: its chain holds the root's call first."""
    return event.chain[depth].line if len(event.chain) > depth else event.line


def _leaving_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """`break`, `continue` and `return` statements of `body` that leave it (not those of a loop
    or function nested in it)."""
    found: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, (ast.Break, ast.Continue, ast.Return)):
            found.append(stmt)
        elif isinstance(stmt, ast.If):
            found.extend(_leaving_statements(stmt.body) + _leaving_statements(stmt.orelse))
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            found.extend(_leaving_statements(stmt.body))
    return found


def _timed_wait(node: ast.AST) -> bool:
    """`work.wait(timeout)`: a wait on an asynchronous collective's handle that gives up after a
    time, so that the ranks whose peer failed raise too (into the same handler)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "wait"
        and bool(node.args or node.keywords)
    )


def _read_to_decide(function: ast.AST, names: set[str], end: int) -> bool:
    """`names` are read after line `end` of `function` other than to raise the failure again
    (`if error is not None: raise error`, `raise error`): a record kept only to end the rank later
    is an uncaught failure, not a divergence."""
    reraising: set[int] = set()
    for node in nodes_under(function):
        guard = isinstance(node, ast.If) and always_raises(node.body) and not node.orelse
        if guard or isinstance(node, ast.Raise):
            reraising.update(id(read) for read in nodes_under(node))
    return any(
        isinstance(node, ast.Name) and node.id in names and node.lineno > end and id(node) not in reraising
        for node in nodes_under(function)
    )


def _block_after(root: ast.AST | None, stmt: ast.stmt) -> list[ast.stmt]:
    """The statements after `stmt` in the block of `root` that holds it."""
    if root is None:
        return []
    for node in nodes_under(root):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and stmt in block:
                return block[block.index(stmt) + 1 :]
    return []


def _uncaught_calls(body: list[ast.stmt]) -> list[ast.Call]:
    """The calls of `body` whose exceptions leave it: not those of an inner `try` whose handler
    catches whatever they raise (`failures.catches_broadly`)."""
    found: list[ast.Call] = []
    for stmt in body:
        if isinstance(stmt, ast.Try) and any(catches_broadly(h, {}) for h in stmt.handlers):
            found.extend(_uncaught_calls(stmt.orelse) + _uncaught_calls(stmt.finalbody))
            found.extend(call for h in stmt.handlers for call in _uncaught_calls(h.body))
        elif isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            heads: list[ast.AST] = (
                [stmt.test] if isinstance(stmt, (ast.If, ast.While))
                else [stmt.iter] if isinstance(stmt, (ast.For, ast.AsyncFor))
                else list(stmt.items)
            )  # fmt: skip
            found.extend(node for head in heads for node in nodes_under(head) if isinstance(node, ast.Call))
            found.extend(_uncaught_calls(stmt.body) + _uncaught_calls(getattr(stmt, "orelse", [])))
        else:
            found.extend(node for node in nodes_under(stmt) if isinstance(node, ast.Call))
    return found


class ExceptionFlow(HelperInliner):
    """`try`/`except`/`else`/`finally` for the statement interpreter."""

    def _stmt_Try(self, stmt: ast.Try, state: State, frame: Frame) -> list[State]:
        # A handler that would be entered on some ranks only: the body's helpers that may raise are
        # run, to learn whether what it catches comes only from `raise` statements seen here.
        follow = any(self._per_rank_exit(stmt, handler) for handler in stmt.handlers)
        self.raises_followed += follow
        try:
            body_states = self.exec_block(stmt.body, [state.fork()], frame)
        finally:
            self.raises_followed -= follow
        normal = [s for s in body_states if s.exit is None or s.exit.kind is not ExitKind.RAISE]
        raised = [s for s in body_states if s.exit is not None and s.exit.kind is ExitKind.RAISE]
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
        per_rank = catches_data_errors(handler, self._class_bases())
        flag = Atom(f"exception@{where_of(handler)}", "nondet", why=CAUGHT_EXCEPTION)
        text = "except" + (f" {source_text(handler.type)}" if handler.type is not None else "")
        origin = source_of(handler, self.module.path, ConditionKind.EXCEPTION, text)
        self.conditions.note(flag, origin)
        leaves = self._per_rank_exit(stmt, handler)
        alike = leaves and self._raised_alike(stmt, handler, entry, raised, frame)
        if leaves and not alike:
            # Any call may raise on some ranks only (bad data, I/O): a handler that leaves the
            # loop or function then skips what the other ranks still do.
            starts.append(entry.fork(flag))
        if handler.name:
            for start in starts:
                start.env[handler.name] = Atom(f"exc@{where_of(handler)}", "shared")
        results = self.exec_block(handler.body, starts, frame) if starts else []
        if leaves or not stmt.body:
            return results, None
        if self._skips_on_failure(stmt, handler, entry, normal, frame):
            # A rank whose call failed goes on from the handler while the others went through the
            # body: the body's collectives after that call, or its way out, are theirs alone.
            start = self._failure_start(stmt, entry, flag, frame, self._fails_alone)
            return [*results, *self._failed_alone(stmt, handler, start, normal, frame)], flag
        if self._records_failure(stmt, handler, entry, normal, frame):
            # The handler records the failure (`failed = True`) and what runs after it reads that.
            start = self._failure_start(stmt, entry, flag, frame, self._touches_at_top)
            failed = self._failed_alone(stmt, handler, start, normal, frame)
            for state in failed:
                if state.exit is not None and state.exit.kind is ExitKind.RAISE and stmt.finalbody:
                    state.exit = replace(state.exit, after_recorded_failure=True)
            return [*results, *failed], flag
        if not per_rank:
            flag = Atom(flag.name, "shared")
            self.conditions.note(flag, origin)
        entered = self._communicating_handler(stmt, handler, entry.fork(flag), normal, frame)
        return [*results, *entered], flag if entered else None

    def _skips_on_failure(
        self, stmt: ast.Try, handler: ast.ExceptHandler, entry: State, normal: list[State], frame: Frame
    ) -> bool:
        """`handler` lets a rank go on after a call of the body that may fail on that rank alone
        (`failures.may_fail_alone`), and that rank then does what the others do not: the body
        issues collectives after that call, or leaves (`break`, `return`) where the handler falls
        through. A handler that always raises again ends its rank instead."""
        if not normal or not catches_broadly(handler, self._class_bases()) or always_raises(handler.body):
            return False
        if any(_timed_wait(node) for part in stmt.body for node in nodes_under(part)):
            return False  # the body bounds its collectives: a peer's failure times them out too
        known = len(entry.events)
        depth = len(frame.chain)
        last = max((_anchor_line(event, depth) for s in normal for event in s.events[known:]), default=0)
        leaving = [node.lineno for node in _leaving_statements(stmt.body)]
        if leaving and (may_leave(handler.body) or not self._communicates_after(stmt, entry, frame)):
            # Only the statements after the `try` are the failed rank's alone: retrying the same
            # attempt is not taken for a divergence (real code retries over alternatives).
            leaving = []
        limit = max(last, *leaving) if leaving else last
        if limit == 0:
            return False
        return any(
            node.lineno < limit and self._fails_alone(node, entry, frame)
            for node in _uncaught_calls(stmt.body)
        )

    def _communicates_after(self, stmt: ast.Try, state: State, frame: Frame) -> bool:
        """A statement after `stmt` in its block issues a collective or calls a function of the
        file that communicates."""
        for node in (
            node
            for part in _block_after(frame.stack[-1] if frame.stack else None, stmt)
            for node in nodes_under(part)
        ):
            if not isinstance(node, ast.Call):
                continue
            resolution = self.resolve(node, frame, state)
            if resolution.kind is CallKind.COLLECTIVE:
                return True
            target = resolution.target
            if (
                resolution.kind is CallKind.HELPER
                and target is not None
                and target[0] in self.module.communicating
            ):
                return True
        return False

    def _records_failure(
        self, stmt: ast.Try, handler: ast.ExceptHandler, entry: State, normal: list[State], frame: Frame
    ) -> bool:
        """`handler` catches a failure of a call of the body that may fail on this rank alone and
        assigns a name that is read after it: in the `finally` clause (even when the handler raises
        again), or, when the handler lets its rank go on, in the code of the function after the
        `try`. That name then differs between ranks."""
        if not catches_broadly(handler, self._class_bases()):
            return False
        recorded = assigned_names(handler.body) - {handler.name}
        if not recorded:
            return False
        read_later = any(read_names(part) & recorded for part in stmt.finalbody)
        if not read_later and not always_raises(handler.body) and frame.stack:
            end = stmt.end_lineno or stmt.lineno
            read_later = _read_to_decide(frame.stack[-1], recorded, end)
        # The failed rank is followed from the start of the body: only a call before the body's
        # first collective can fail with none of them issued (a helper that communicates and then
        # fails is not such a call).
        known, depth = len(entry.events), len(frame.chain)
        first = min((_anchor_line(e, depth) for s in normal for e in s.events[known:]), default=None)
        calls = [call for call in _uncaught_calls(stmt.body) if first is None or call.lineno < first]
        return read_later and any(self._touches_at_top(call, entry, frame) for call in calls)

    def _failure_start(
        self,
        stmt: ast.Try,
        entry: State,
        flag: Atom,
        frame: Frame,
        fails: Callable[[ast.Call, State, Frame], bool],
    ) -> State:
        """Where a rank whose call failed enters the handler: `entry` under the flag and, when every
        call of the body that may fail (`fails`) is under one `if` of the body whose test depends
        on the rank (`if rank == 0:` around the writes), under that test too: only those ranks
        can fail there."""
        start = entry.fork(flag)
        failing = {id(call) for call in _uncaught_calls(stmt.body) if fails(call, entry, frame)}
        for part in stmt.body:
            if not isinstance(part, ast.If):
                continue
            inside = {id(node) for branch in part.body for node in nodes_under(branch)}
            if failing and failing <= inside:
                test = self.pure(part.test, entry, frame)
                if is_rank_dependent(test):
                    return start.fork(test)
        return start

    def _filesystem_reads(self) -> frozenset[str]:
        """The catalog's per-process sources that read the filesystem (`os.path.exists`, `open`);
        not the clock or random numbers, which do not fail."""
        return frozenset(
            name for name, why in self.catalog.nondeterministic.items() if why == FILESYSTEM_STATE
        )

    def _touches_at_top(self, call: ast.Call, state: State, frame: Frame) -> bool:
        return self._touches_own_world(call, state, frame, 0)

    def _touches_own_world(self, call: ast.Call, state: State, frame: Frame, depth: int) -> bool:
        """`call` reads or writes this process's own files or waits on its own future
        (`failures.touches_own_world`), itself or in a function of the file it calls (two calls
        deep: `write_rows(path)` that opens the file)."""
        per_process = self._filesystem_reads()
        resolution = self.resolve(call, frame, state)
        if resolution.kind is CallKind.HELPER and resolution.target is not None:
            if depth >= MAX_HELPER_DEPTH:
                return False
            inner = _uncaught_calls(resolution.target[0].body)  # what the helper lets out
            return any(self._touches_own_world(node, state, frame, depth + 1) for node in inner)
        if resolution.kind is not CallKind.UNKNOWN:
            return False
        return touches_own_world(call, qualified_name(call.func, self.local_imports), per_process)

    def _fails_alone(self, call: ast.Call, state: State, frame: Frame) -> bool:
        """`call` may raise on this rank alone (`failures.may_fail_alone`); a function of the file
        when it touches the process's own world (`_touches_own_world`)."""
        kind = self.resolve(call, frame, state).kind
        if kind is CallKind.HELPER:
            return self._touches_own_world(call, state, frame, 0)
        if kind is not CallKind.UNKNOWN:
            return False
        if isinstance(call.func, ast.Name) and call.func.id in self.module.classes:
            return False
        name = qualified_name(call.func, self.local_imports)
        if name in self.catalog.rank_functions:
            return False
        if isinstance(call.func, ast.Attribute) and call.func.attr in self.catalog.rank_methods:
            return False
        handed_group = any(keyword.arg in GROUP_KEYWORDS for keyword in call.keywords) or any(
            isinstance(self.pure(arg, state, frame), GroupVal)
            for arg in [*call.args, *(keyword.value for keyword in call.keywords)]
            if isinstance(arg, (ast.Name, ast.Attribute))
        )
        return may_fail_alone(call, name, handed_group, self._filesystem_reads())

    def _failed_alone(
        self, stmt: ast.Try, handler: ast.ExceptHandler, start: State, normal: list[State], frame: Frame
    ) -> list[State]:
        """The handler entered by a failure of one rank's own call, from `start` (flagged)."""
        _enter_handler(stmt, handler, start, normal)
        return self.exec_block(handler.body, [start], frame)

    def _class_bases(self) -> dict[str, list[str]]:
        return {name: info.bases for name, info in self.module.classes.items()}

    def _per_rank_exit(self, stmt: ast.Try, handler: ast.ExceptHandler) -> bool:
        """`handler` catches an error one rank can hit alone, leaves the loop or function, and the
        body makes calls that may raise it."""
        return (
            bool(stmt.body)
            and catches_data_errors(handler, self._class_bases())
            and may_leave(handler.body)
            and any(isinstance(node, ast.Call) for part in stmt.body for node in nodes_under(part))
        )

    def _raised_alike(
        self, stmt: ast.Try, handler: ast.ExceptHandler, entry: State, raised: list[State], frame: Frame
    ) -> bool:
        """Every rank enters `handler` or none does: what it catches comes only from `raise`
        statements the body reaches (itself or in the helpers it runs), each on a path whose
        conditions are the same on every rank (configuration, arguments, results of collectives),
        and every call the body makes is one the analysis follows. An unknown call (I/O, a library,
        data) may raise on one rank alone."""
        bases = self._class_bases()
        caught = [
            state for state in raised if state.exit is not None and catches(handler, state.exit.raised, bases)
        ]
        if not caught:
            return False
        for part in stmt.body:
            for node in nodes_under(part):
                if isinstance(node, ast.Call) and not self._followed(node, entry, frame):
                    return False
        known = len(entry.conds)
        for state in caught:
            assert state.exit is not None
            on_data = state.exit.data_tests
            for test in state.conds[known:]:
                if is_rank_dependent(test) or any(test is read or test == read for read in on_data):
                    return False
        return True

    def _followed(self, call: ast.Call, state: State, frame: Frame) -> bool:
        """`call` runs code the analysis sees (a helper, a collective, an exit), reads the rank or
        the world size, or runs a function of the run that it did not open because that function
        neither communicates nor reads the rank (`get_group()`): such a function raises, if at all,
        on what it is given, as the caller's own `raise` statements do. A call into a library
        (`torch.load`, `json.loads`) may fail on one rank alone."""
        if self.resolve(call, frame, state).kind in (CallKind.HELPER, CallKind.COLLECTIVE, CallKind.EXIT):
            return True
        catalog = self.catalog
        name = qualified_name(call.func, self.local_imports)
        if name in catalog.rank_functions:
            return True
        if isinstance(call.func, ast.Attribute) and call.func.attr in catalog.rank_methods:
            return True
        project = self.module.project
        return name is not None and project is not None and project.lookup(name, self.module.path) is not None

    def _communicating_handler(
        self, stmt: ast.Try, handler: ast.ExceptHandler, start: State, normal: list[State], frame: Frame
    ) -> list[State]:
        """The handler entered by an exception of the body (not an explicit raise), from `start`:
        its states if it communicates, else none."""
        _enter_handler(stmt, handler, start, normal)
        before = start.events
        states = self.exec_block(handler.body, [start], frame)
        # Posted transfers alone do not make it one (they are no element of the compared sequences).
        if not self.record_events or all(unposted(state.events) == unposted(before) for state in states):
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


def _enter_handler(stmt: ast.Try, handler: ast.ExceptHandler, start: State, normal: list[State]) -> None:
    """`start` as the handler sees it: what the body assigns may or may not have been stored
    when the exception came (the merge of `start` and the body's normal ends), and the handler's
    name holds the exception."""
    if normal:
        body_env = merge_envs([start, *normal])
        for name in assigned_names(stmt.body):
            if name in body_env:
                start.env[name] = body_env[name]
    if handler.name:
        start.env[handler.name] = Atom(f"exc@{where_of(handler)}", "shared")
