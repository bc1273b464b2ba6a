"""Collectives that race a background session (an asynchronous checkpoint save) on its group.

In: a module's tree, its import table and the catalog (`[[async_session]]`: the calls that start a
session, the parameter naming its group, the calls on the returned handle that wait for it).
Out: `SessionRace`s: a collective issued, or a second session started, on the group an earlier
session still drives, on some path from the call that started it and before its handle is waited.

Each function and method of the file is run from its start, in order, over one joined state per
program point (not per path): which sessions may be open, and what each variable and object
attribute holds (`session_values.Value`: a group, the handles of sessions, an object of the file).
Calls of the file's functions and of methods of the file's objects are followed (four deep), so a
handle stored on `self` in one method and waited in another is followed from the caller that
runs both; loops run twice, so a session left open by one iteration meets the next one's
collectives. A session is open until a call the catalog names is made on its handle; a branch on
`handle is None` closes it there; a handle handed to code that is not followed (a list, a logger,
another library) is no longer tracked, and nothing is reported about it. Two groups are the same
only when `GroupKey.same` says so: both the default group, one factory, or one storage read while
not reassigned. Everything else is quiet.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
from dataclasses import dataclass, replace
from enum import Enum

from collcheck.catalog import Catalog, SessionSpec
from collcheck.static.names import ImportTable, qualified_name, source_text
from collcheck.static.session_states import PathState, join_states, join_values
from collcheck.static.session_values import (
    DEFAULT_GROUP,
    NONE_VALUE,
    UNKNOWN_GROUP,
    FunctionNode,
    GroupKey,
    GroupKind,
    Obj,
    SessionModel,
    Value,
    branch_test,
    default_of,
    nested_functions,
    none_test,
    other_than,
    parameter_names,
    runs_once_at_least,
    session_roots,
    starts_a_session,
)

MAX_DEPTH = 4  # calls followed below a root
MAX_STEPS = 4000  # statements run from one root before it is given up
MAX_FILE_STEPS = 100_000  # statements run for one file: the roots after that are not run
MAX_SESSIONS = 64  # sessions followed in one file; those started after are not (nothing reported)
UNROLL = 2
# Statements holding others: an exception may leave one after some of its statements ran.
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match)


class RaceKind(Enum):
    COLLECTIVE = "collective"  # a collective on the session's group
    SECOND_SESSION = "second session"  # another session started on it


@dataclass(frozen=True)
class CallSite:
    line: int
    column: int
    end_line: int
    end_column: int
    call: str  # the callee as written
    function: str  # the qualified name of the function it is in


@dataclass(frozen=True)
class SessionRace:
    kind: RaceKind
    session: CallSite  # the call that started the session still open
    racing: CallSite  # the collective, or the second session's call
    group: str  # the group as the racing call names it; "" for the default group
    what: str  # what the session is, in the catalog's words
    session_group: str  # the group as the session's call names it; "" for the default group


@dataclass(frozen=True)
class _Session:
    site: CallSite
    group: GroupKey
    group_text: str
    spec: SessionSpec


@dataclass
class _Frame:
    key: str
    function: FunctionNode
    qualname: str
    depth: int
    local: frozenset[str]
    returns: list[tuple[PathState, Value]]
    loops: list[tuple[list[PathState], list[PathState]]]


class _OutOfSteps(Exception):
    pass


def session_races(
    tree: ast.Module, imports: ImportTable, catalog: Catalog, text: str | None = None
) -> tuple[SessionRace, ...]:
    """The races of the file's functions, each once; `text`, the file's source, lets a file that
    never names a session's call be passed over without walking its tree."""
    if not catalog.sessions:
        return ()
    if text is not None and not any(name.rsplit(".", 1)[-1] in text for name in catalog.sessions):
        return ()
    if not starts_a_session(tree, imports, catalog):
        return ()
    walker = _Walker(SessionModel(tree, imports, catalog))
    for function, qualname, cls in session_roots(tree):
        if walker.spent > MAX_FILE_STEPS:
            break
        walker.run_root(function, qualname, cls)
    return tuple(walker.races.values())


class _Walker:
    def __init__(self, model: SessionModel) -> None:
        self.model = model
        self.sessions: list[_Session] = []
        self.races: dict[tuple[RaceKind, int, int, int, int], SessionRace] = {}
        self.frames = itertools.count()
        self.serials = itertools.count()
        self.steps = 0
        self.spent = 0  # statements run for the file's earlier roots
        self.stack: list[FunctionNode] = []
        self.waits_made: set[ast.Call] = set()  # the calls run as a session's wait
        self.nested: dict[FunctionNode, dict[str, FunctionNode]] = {}

    def run_root(self, function: FunctionNode, qualname: str, cls: str | None) -> None:
        self.spent += self.steps
        self.steps = 0
        state = PathState()
        bound: dict[str, Value] = {}
        params = function.args.posonlyargs + function.args.args + function.args.kwonlyargs
        for index, param in enumerate(params):
            owner_class = self.model.annotated_class(param.annotation)
            kind = self.model.kind_of(function)
            if index == 0 and cls is not None and kind == "class":
                bound[param.arg] = Value(obj=Obj(f"class {cls}", cls, exact=False))
                continue
            if index == 0 and cls is not None and kind == "instance":
                owner_class = cls
            if owner_class is not None:
                bound[param.arg] = Value(obj=Obj(param.arg, owner_class, exact=False))
        with contextlib.suppress(_OutOfSteps, RecursionError):  # what was found so far stands
            self._call(function, qualname, bound, state, 0)

    # --- frames --------------------------------------------------------------------------
    def _call(
        self, function: FunctionNode, qualname: str, bound: dict[str, Value], state: PathState, depth: int
    ) -> Value:
        stored = {
            n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        params = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
        declared = frozenset(n for s in ast.walk(function) if isinstance(s, ast.Global) for n in s.names)
        frame = _Frame(
            f"f{next(self.frames)}",
            function,
            qualname,
            depth,
            frozenset((stored | params) - declared),
            [],
            [],
        )
        for name, value in bound.items():
            state.slots[f"{frame.key}:{name}"] = value
        self.stack.append(function)
        try:
            end = self._block(function.body, state, frame)
        finally:
            self.stack.pop()
        outcomes = [end, *(s for s, _ in frame.returns)]
        joined = join_states(outcomes)
        state.open, state.slots, state.dead = joined.open, joined.slots, joined.dead
        state.assumed, state.started_under = joined.assumed, joined.started_under
        values = [v for _, v in frame.returns]
        if not values:
            return Value()
        result = values[0]
        for value in values[1:]:
            result = result if value == result else join_values(result, value, "")
        return result

    def _inline(
        self, function: FunctionNode, call: ast.Call, receiver: Value | None, state: PathState, frame: _Frame
    ) -> Value | None:
        if frame.depth >= MAX_DEPTH or function in self.stack:
            return None
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return None
        params = parameter_names(function)
        kind = self.model.kind_of(function)
        bound: dict[str, Value] = {}
        if kind in ("instance", "class") and params:
            if receiver is None:
                return None
            bound[params[0]] = receiver
            params = params[1:]
        named = set(params) | {a.arg for a in function.args.kwonlyargs}
        if len(call.args) > len(params) or any(k.arg not in named for k in call.keywords):
            return None  # checked before any argument runs: the call is then run once, as unknown code
        args = [self._expr(a, state, frame) for a in call.args]
        bound.update(zip(params, args, strict=False))
        for keyword in call.keywords:
            bound[keyword.arg or ""] = self._expr(keyword.value, state, frame)
        for name in named - set(bound):  # a default the call leaves in place (`group=None`)
            default = default_of(function, name)
            known = self.model.pure(default, None, "") if default is not None else None
            if known is not None:
                bound[name] = known
        owner = self.model.owner.get(function)
        qualname = f"{owner}.{function.name}" if owner else function.name
        return self._call(function, qualname, bound, state, frame.depth + 1)

    # --- statements ----------------------------------------------------------------------
    def _block(self, body: list[ast.stmt], state: PathState, frame: _Frame) -> PathState:
        for stmt in body:
            if state.dead:
                break
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise _OutOfSteps
            state = self._stmt(stmt, state, frame)
        return state

    def _stmt(self, stmt: ast.stmt, state: PathState, frame: _Frame) -> PathState:
        if isinstance(stmt, ast.Expr):
            self._expr(stmt.value, state, frame)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            if stmt.value is not None:
                value = self._expr(stmt.value, state, frame)
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    self._store(target, Value() if isinstance(stmt, ast.AugAssign) else value, state, frame)
        elif isinstance(stmt, ast.If):
            return self._if(stmt, state, frame)
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            return self._loop(stmt, state, frame)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            return self._with(stmt, state, frame)
        elif isinstance(stmt, ast.Try):
            return self._try(stmt, state, frame)
        elif isinstance(stmt, ast.Return):
            value = self._expr(stmt.value, state, frame) if stmt.value is not None else NONE_VALUE
            frame.returns.append((state.copy(), value))
            state.dead = True
        elif isinstance(stmt, ast.Raise):
            state.dead = True
        elif isinstance(stmt, (ast.Break, ast.Continue)) and frame.loops:
            frame.loops[-1][0 if isinstance(stmt, ast.Break) else 1].append(state.copy())
            state.dead = True
        return state

    def _with(self, stmt: ast.With | ast.AsyncWith, state: PathState, frame: _Frame) -> PathState:
        """An object of the file as a context manager runs its `__enter__` and, after the body,
        its `__exit__` (which may wait for a save its methods started)."""
        enter, leave = (
            ("__aenter__", "__aexit__") if isinstance(stmt, ast.AsyncWith) else ("__enter__", "__exit__")
        )
        managers: list[tuple[ast.withitem, Value]] = []
        for item in stmt.items:
            manager = self._expr(item.context_expr, state, frame)
            entered = self._protocol(item, manager, enter, state, frame)
            managers.append((item, manager))
            if item.optional_vars is not None:
                self._store(item.optional_vars, entered or Value(), state, frame)
        returned = len(frame.returns)
        state = self._block(stmt.body, state, frame)
        leaving = [state, *(at_return for at_return, _ in frame.returns[returned:])]  # `return` exits too
        for item, manager in reversed(managers):
            for left in leaving:
                if not left.dead:
                    self._protocol(item, manager, leave, left, frame)
        return state

    def _protocol(
        self, item: ast.withitem, manager: Value, name: str, state: PathState, frame: _Frame
    ) -> Value | None:
        """Run `manager.name()`; where it cannot be followed, what the object holds is handed to it."""
        method = self.model.method(manager.obj, name) if manager.obj is not None else None
        if method is None:
            return None
        call = ast.copy_location(ast.Call(func=item.context_expr, args=[], keywords=[]), item.context_expr)
        result = self._inline(method, call, manager, state, frame)
        if result is None:
            state.open = state.open - self._held_under(manager, state)
        return result

    def _if(self, stmt: ast.If, state: PathState, frame: _Frame) -> PathState:
        self._expr(stmt.test, state, frame)
        then, other = self._split(stmt.test, state, frame)
        return join_states([self._block(stmt.body, then, frame), self._block(stmt.orelse, other, frame)])

    def _split(self, test: ast.expr, state: PathState, frame: _Frame) -> tuple[PathState, PathState]:
        """The states where `test` holds and where it fails: `a and b` fails where `a` fails, or
        where `a` holds and `b` fails (`if async_mode and future is not None:`)."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            fails, holds = self._split(test.operand, state, frame)
            return holds, fails
        if isinstance(test, ast.BoolOp):
            every = isinstance(test.op, ast.And)  # `and`: every part holds on the `then` side
            through, exits = state, []
            for value in test.values:
                holds, fails = self._split(value, through, frame)
                through = holds if every else fails
                exits.append(fails if every else holds)
            return (through, join_states(exits)) if every else (join_states(exits), through)
        then, other = state.copy(), state.copy()
        tested = branch_test(test)
        place = self._fact_place(tested.subject, state, frame) if tested is not None else None
        if tested is not None and place is not None:  # `if async_mode: start` .. `if async_mode: wait`
            for test_text, outcome in tested.on_then:
                then.assume(place, test_text, outcome)
            for test_text, outcome in tested.on_else:
                other.assume(place, test_text, outcome)
        tested_none, none_when_true = none_test(test)
        if tested_none is not None:
            none_branch, held_branch = (then, other) if none_when_true else (other, then)
            current = self._read(tested_none, state, frame)
            if current is not None and current.present:
                none_branch.dead = True  # a lazy fill already done: `if self._group is None:`
            else:
                self._refine(tested_none, none_branch, frame)
                self._holds(tested_none, current, held_branch, frame)
        return then, other

    def _fact_place(self, node: ast.expr, state: PathState, frame: _Frame) -> str | None:
        """Where a tested value is kept, named by what holds it: `cfg.flag` of one object read
        in the caller and in the callee it was passed to is one place."""
        if isinstance(node, ast.Attribute):
            base = self._read(node.value, state, frame)
            if base is not None and base.obj is None and base.group.kind is GroupKind.PLACE:
                return f"{base.group.name}.{node.attr}"
        return self._place(node, state, frame)

    def _refine(self, tested: ast.expr, state: PathState, frame: _Frame) -> None:
        """On this branch `tested` is None: it holds no session's handle."""
        place = self._place(tested, state, frame)
        if place is None:
            return
        held = state.slots.get(place, Value()).sessions
        state.open = state.open - held
        state.slots[place] = NONE_VALUE

    def _holds(self, tested: ast.expr, current: Value | None, state: PathState, frame: _Frame) -> None:
        """On this branch `tested` is not None."""
        place = self._place(tested, state, frame)
        if place is None or current is None:
            return
        if current.group.kind is GroupKind.UNKNOWN:
            current = replace(current, group=GroupKey(GroupKind.PLACE, place))
        state.slots[place] = replace(current, present=True)

    def _loop(self, stmt: ast.For | ast.AsyncFor | ast.While, state: PathState, frame: _Frame) -> PathState:
        forever = (
            isinstance(stmt, ast.While) and isinstance(stmt.test, ast.Constant) and bool(stmt.test.value)
        )
        self._expr(stmt.test if isinstance(stmt, ast.While) else stmt.iter, state, frame)
        exits: list[PathState] = [] if forever or runs_once_at_least(stmt) else [state.copy()]
        for _ in range(UNROLL):
            if isinstance(stmt, (ast.For, ast.AsyncFor)):
                self._store(stmt.target, Value(), state, frame)
            frame.loops.append(([], []))
            state = self._block(stmt.body, state, frame)
            breaks, continues = frame.loops.pop()
            state = join_states([state, *continues])
            exits.extend(breaks)
            if not forever:
                exits.append(state.copy())
        after = join_states(exits)
        return self._block(stmt.orelse, after, frame) if stmt.orelse else after

    def _plain_wait(self, stmt: ast.stmt) -> bool:
        """`handle.result()` alone, just run as a wait: if it raises, the session is over (a
        timeout, which leaves it running, is passed as an argument)."""
        return (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and not stmt.value.args
            and not stmt.value.keywords
            and stmt.value in self.waits_made
        )

    def _try(self, stmt: ast.Try, state: PathState, frame: _Frame) -> PathState:
        before = state.copy()
        returned = len(frame.returns)
        raised: list[PathState] = []  # the states a handler may start from
        body = state
        for inner in stmt.body:
            if body.dead:
                break
            entry = body.copy()
            body = self._block([inner], body, frame)
            if not self._plain_wait(inner):  # a plain wait that raises has ended its session
                raised.append(entry)
            if isinstance(inner, _COMPOUND):  # it may raise between its own statements; a simple
                raised.append(body.copy())  # one that raised did not finish (no handle stored)
        ends = []
        for handler in stmt.handlers:
            ends.append(self._block(handler.body, join_states(raised), frame))
        body = self._block(stmt.orelse, body, frame)
        after = join_states([body, *ends])
        if stmt.finalbody:
            for index in range(returned, len(frame.returns)):  # a `return` in the body runs it first
                at_return, value = frame.returns[index]
                frame.returns[index] = (self._block(stmt.finalbody, at_return.copy(), frame), value)
            after = self._block(stmt.finalbody, after if not after.dead else before.copy(), frame)
        return after

    # --- places ---------------------------------------------------------------------------
    def _place(self, node: ast.expr, state: PathState, frame: _Frame) -> str | None:
        """Where a name or attribute chain is stored, as a path from the root's names."""
        if isinstance(node, ast.Name):
            if node.id in frame.local:
                return f"{frame.key}:{node.id}"
            return f"global {node.id}"
        if isinstance(node, ast.Attribute):
            base = self._read(node.value, state, frame)
            if base is not None and base.obj is not None:
                return f"{base.obj.path}.{node.attr}"
            place = self._place(node.value, state, frame)
            return f"{place}.{node.attr}" if place is not None else None
        return None

    def _read(self, node: ast.expr, state: PathState, frame: _Frame) -> Value | None:
        """The value of a name or attribute chain (no call runs); None for other expressions."""
        if isinstance(node, ast.Name) and node.id not in frame.local and node.id in self.model.classes:
            return Value(obj=Obj(f"class {node.id}", node.id, exact=True))
        known = self.model.default_name(node)
        if known is not None:
            return known
        if not isinstance(node, (ast.Name, ast.Attribute)):
            return None
        if isinstance(node, ast.Attribute):
            handle = self._read(node.value, state, frame)
            if handle is not None and self._leads_to_end(handle, node.attr):
                return Value(sessions=handle.sessions)  # `response.upload_completion`, waited later
        place = self._place(node, state, frame)
        if place is None:
            return None
        if place in state.slots:
            return state.slots[place]
        if isinstance(node, ast.Attribute):
            base = self._read(node.value, state, frame)
            if base is not None and self._leads_to_end(base, node.attr):
                return Value(sessions=base.sessions)  # `response.upload_completion`, waited later
            if base is not None and base.obj is not None:
                fact = self.model.attribute(base.obj, node.attr)
                if fact is not None:
                    return fact
        return Value(group=GroupKey(GroupKind.PLACE, place))

    def _leads_to_end(self, handle: Value, attribute: str) -> bool:
        return any(
            len(chain) > 1 and chain[0] == attribute
            for number in handle.sessions
            for chain in self.sessions[number].spec.ends
        )

    def _store(self, target: ast.expr, value: Value, state: PathState, frame: _Frame) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            state.open = state.open - value.sessions  # unpacked: no longer followed
            for element in target.elts:
                self._store(element, Value(), state, frame)
            return
        place = self._place(target, state, frame)
        if place is None:  # a subscript, a container: the handle is no longer followed
            state.open = state.open - value.sessions
            return
        if value.group.kind is GroupKind.UNKNOWN:
            value = Value(
                GroupKey(GroupKind.PLACE, f"{place}#{next(self.serials)}"), value.sessions, value.obj
            )
        state.slots[place] = value
        state.forget(place)
        if (held_as := self._fact_place(target, state, frame)) not in (None, place):
            state.forget(held_as)

    # --- expressions -------------------------------------------------------------------------
    def _expr(self, node: ast.expr, state: PathState, frame: _Frame) -> Value:
        if isinstance(node, ast.Call):
            return self._call_expr(node, state, frame)
        if isinstance(node, ast.Constant) and node.value is None:
            return NONE_VALUE
        if isinstance(node, ast.IfExp):
            self._expr(node.test, state, frame)
            a, b = self._expr(node.body, state, frame), self._expr(node.orelse, state, frame)
            return a if a == b else Value(sessions=a.sessions | b.sessions)
        if isinstance(node, ast.NamedExpr):  # `(handle := async_save(...))`: stored, then used
            value = self._expr(node.value, state, frame)
            self._store(node.target, value, state, frame)
            return self._read(node.target, state, frame) or value
        if isinstance(node, ast.Lambda):  # runs later: what it reads is handed away
            self._release_captured(node.body, state, frame)
            return Value()
        if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            return Value()  # runs in its own scope: not followed
        read = self._read(node, state, frame)
        if read is not None:
            return read
        held: frozenset[int] = frozenset()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                held |= self._expr(child, state, frame).sessions
        if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            state.open = state.open - held  # put in a container: no longer followed
        return Value()

    def _call_expr(self, node: ast.Call, state: PathState, frame: _Frame) -> Value:
        name = qualified_name(node.func, self.model.imports)
        if name is not None and name in self.model.catalog.sessions:
            return self._start(node, self.model.catalog.sessions[name], state, frame)
        spec = self.model.catalog.functions.get(name or "")
        if spec is not None and spec.kind == "collective":
            group = self._argument(node, spec.params, spec.group, state, frame)
            if group is not None and not (group[1] == "" and spec.default_group is not None):
                self._race(RaceKind.COLLECTIVE, node, group, state, frame)
            return Value()
        if spec is not None and spec.kind == "group_create":
            self._arguments(node, state, frame)
            key = GroupKey(GroupKind.FRESH, f"{node.lineno}:{node.col_offset}#{next(self.serials)}")
            return Value(group=key, present=True)
        known = self.model.known_call(node)
        if known is not None:
            return known
        if self._waits(node, state, frame):
            return Value()
        if frame.function not in self.nested:
            self.nested[frame.function] = nested_functions(frame.function)
        callee = node.func.id if isinstance(node.func, ast.Name) else ""
        nested = self.nested[frame.function].get(callee)
        if nested is not None:  # a closure of this function: may wait what it reads (not followed)
            self._release_captured(nested, state, frame)
            self._arguments(node, state, frame)
            return Value()
        followed = self._follow(node, state, frame)
        if followed is not None:
            return followed
        handed = self._arguments(node, state, frame)
        if isinstance(node.func, ast.Attribute):
            handed.append(self._expr(node.func.value, state, frame))
        for value in handed:  # handed to code not followed, which may wait for what it holds
            state.open = state.open - value.sessions - self._held_under(value, state)
        return Value()

    def _release_captured(self, code: ast.AST, state: PathState, frame: _Frame) -> None:
        """Code that runs later (a closure, a lambda) and reads this frame's variables: the
        sessions they hold are handed to it, and no longer followed."""
        for node in ast.walk(code):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in frame.local:
                held = state.slots.get(f"{frame.key}:{node.id}")
                if held is not None:
                    state.open = state.open - held.sessions - self._held_under(held, state)

    def _held_under(self, value: Value, state: PathState) -> frozenset[int]:
        """The sessions whose handles an object of the file keeps in its attributes."""
        if value.obj is None:
            return frozenset()
        prefix = f"{value.obj.path}."
        held: frozenset[int] = frozenset()
        for place, kept in state.slots.items():
            if kept.sessions and place.startswith(prefix):
                held |= kept.sessions
        return held

    def _arguments(self, node: ast.Call, state: PathState, frame: _Frame) -> list[Value]:
        values = [self._expr(a.value if isinstance(a, ast.Starred) else a, state, frame) for a in node.args]
        values.extend(self._expr(k.value, state, frame) for k in node.keywords)
        return values

    def _argument(
        self, node: ast.Call, params: tuple[str, ...], wanted: str | None, state: PathState, frame: _Frame
    ) -> tuple[GroupKey, str] | None:
        """The group a call names (the default group when it names none); None when unknown."""
        values = self._arguments(node, state, frame)
        if wanted is None or any(k.arg is None for k in node.keywords):
            return None
        for keyword, value in zip(node.keywords, values[len(node.args) :], strict=True):
            if keyword.arg == wanted:
                return value.group, source_text(keyword.value)
        index = params.index(wanted) if wanted in params else None
        if any(isinstance(a, ast.Starred) for a in node.args):
            return None
        if index is not None and index < len(node.args):
            return values[index].group, source_text(node.args[index])
        return DEFAULT_GROUP, ""

    def _follow(self, node: ast.Call, state: PathState, frame: _Frame) -> Value | None:
        """Run a function of the file, or a method of an object of the file."""
        func = node.func
        if isinstance(func, ast.Name) and func.id not in frame.local and func.id in self.model.functions:
            return self._inline(self.model.functions[func.id], node, None, state, frame)
        if isinstance(func, ast.Name) and func.id not in frame.local and func.id in self.model.classes:
            self._arguments(node, state, frame)
            path = f"new {node.lineno}:{node.col_offset}#{next(self.serials)}"
            return Value(obj=Obj(path, func.id, exact=True), present=True)
        if not isinstance(func, ast.Attribute):
            return None
        if self.model.is_super(func.value, frame.function):  # `super().wait()`: the base's method
            return self._follow_super(node, func.attr, state, frame)
        receiver = self._read(func.value, state, frame)
        if receiver is None or receiver.obj is None:
            return None
        method = self.model.method(receiver.obj, func.attr)
        if method is None:
            return None
        if self.model.kind_of(method) == "class" and not receiver.obj.path.startswith("class "):
            cls = receiver.obj.cls
            receiver = Value(obj=Obj(f"class {cls}", cls, exact=True))
        return self._inline(method, node, receiver, state, frame)

    def _follow_super(self, node: ast.Call, name: str, state: PathState, frame: _Frame) -> Value:
        params = parameter_names(frame.function)
        receiver = state.slots.get(f"{frame.key}:{params[0]}") if params else None
        method = self.model.base_method(frame.function, name)
        followed = self._inline(method, node, receiver, state, frame) if receiver and method else None
        for value in [] if followed else [*self._arguments(node, state, frame), receiver or Value()]:
            state.open = state.open - value.sessions - self._held_under(value, state)  # handed to it
        return followed or Value()

    # --- sessions ----------------------------------------------------------------------------
    def _site(self, node: ast.Call, frame: _Frame) -> CallSite:
        return CallSite(
            node.lineno,
            node.col_offset,
            node.end_lineno or node.lineno,
            node.end_col_offset or node.col_offset,
            source_text(node.func),
            frame.qualname,
        )

    def _start(self, node: ast.Call, spec: SessionSpec, state: PathState, frame: _Frame) -> Value:
        for keyword in node.keywords:
            for quiet, quiet_text in spec.quiet_when:
                if keyword.arg == quiet and not other_than(keyword.value, quiet_text):
                    self._arguments(node, state, frame)  # no collectives, or maybe none
                    return Value()
        group = self._argument(node, spec.params, spec.group, state, frame)
        if group is None or len(self.sessions) >= MAX_SESSIONS:
            return Value()
        self._race(RaceKind.SECOND_SESSION, node, group, state, frame)
        self.sessions.append(_Session(self._site(node, frame), group[0], group[1], spec))
        number = len(self.sessions) - 1
        state.open = state.open | {number}
        state.started_under[number] = state.assumed
        return Value(sessions=frozenset({number}), present=True)

    def _race(
        self, kind: RaceKind, node: ast.Call, group: tuple[GroupKey, str], state: PathState, frame: _Frame
    ) -> None:
        key, text = group
        if key == UNKNOWN_GROUP:
            return
        for number in sorted(state.open):
            session = self.sessions[number]
            if session.group.same(key):
                site = self._site(node, frame)
                where = (kind, session.site.line, session.site.column, site.line, site.column)
                self.races.setdefault(
                    where, SessionRace(kind, session.site, site, text, session.spec.what, session.group_text)
                )

    def _waits(self, node: ast.Call, state: PathState, frame: _Frame) -> bool:
        """`handle.result()`, `handle.upload_completion.result()`: the sessions it ends."""
        chain: list[str] = []
        target: ast.expr = node.func
        while isinstance(target, ast.Attribute):
            chain.insert(0, target.attr)
            target = target.value
            held = self._read(target, state, frame)
            if held is None or not held.sessions:
                continue
            ended = {n for n in held.sessions if tuple(chain) in self.sessions[n].spec.ends}
            if ended:
                self.waits_made.add(node)
                self._arguments(node, state, frame)
                state.open = state.open - ended
                return True
        return False
