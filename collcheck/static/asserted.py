"""Assertions on a group's structure: what an `assert` states about a group holds after it.

In: an `assert` statement (or an `if` that opens a method), the interpreter's state and frame
(through the evaluator's `eval` and `pure`). Out: the states that go on past the statement: under
the asserted test when it is a fact about a group's structure (its size, its list of ranks), else
as any statement with calls (its test evaluated for their effects); for the `if`, the state under
the facts a check made once established (below).

Why: code that needs a group to span the world says so before relying on it
(`assert group.size() == dist.get_world_size()`), and then hands the group's rank list to
`new_group`, which every rank must call with the same list. The list of a group of unknown
membership differs between two groups of the same name; a group as large as the world is the
world's one group, and its list is the same on every rank (`groups.spanning_facts`). Without the
assertion on the path the list stays a per-rank value.

A check made once: a method that opens with `if <own flag>: return`, then asserts such a fact
about what it was handed and sets the flag (`cls._checked = True`) further down, checks on the
first call and skips the check on every later one, relying on it. The flag is the object's record
that the assertion held; the code states that later calls hand it the same group. So the facts
hold on the early return as well (`checked_once`), as the object's invariant: the flag must be
stored nowhere else in the file but as `False`/`None` (through any object, class or `setattr`),
the asserted test must read no name the method rebinds, and nothing between the test and the
assertion may leave the method. What this takes on trust: a later call that hands the method
another group (`ex.run(world); ex.run(tp)`) is not checked again, and neither are stores of the
flag in other files.

An assertion inside a `try` whose handler takes an `AssertionError` (or any `Exception`) and
does not raise again states nothing: the code goes on when it fails. (One in a helper that a
caller's `try` guards is still taken: the caller's handler is not looked for.)

Which assertions are kept: only those whose test reads a group's size or its rank list and no
other per-rank value. Such a test says the same on every rank that reaches it (the size and the
list are alike on a group's members), so the path that goes on is the one every rank takes when
the program runs as its author states; a failing assertion on every rank is a crash, not a hang.
An assertion on the rank itself (`assert rank in ranks`, `assert get_rank(g) == 0`) is left out:
it fails on some ranks only, and taking it as true would hide the ranks it leaves behind.
"""

from __future__ import annotations

import ast
from typing import Protocol

from collcheck.static.conditions import ConditionSources, source_of
from collcheck.static.groups import GLOBAL_OF_PREFIX, RANKS_PREFIX, SIZE_PREFIX, listed_key
from collcheck.static.loader import ModuleInfo
from collcheck.static.program import CommEvent, Element, LoopEvent
from collcheck.static.state import Frame, State
from collcheck.static.symbolic import PER_RANK_KINDS, Atom, Expr, atoms, constant_truth

_STRUCTURE = (SIZE_PREFIX, RANKS_PREFIX, GLOBAL_OF_PREFIX)  # atoms of a group's structure
_SHARED_BY_MEMBERS = (RANKS_PREFIX, GLOBAL_OF_PREFIX)  # per-rank between groups, alike on members


class AssertingInterpreter(Protocol):
    module: ModuleInfo
    conditions: ConditionSources

    def eval(self, node: ast.expr | None, state: State, frame: Frame) -> list[tuple[State, Expr]]: ...

    def pure(
        self, node: ast.expr | None, state: State, frame: Frame, known: dict[int, Expr] | None = None
    ) -> Expr: ...


def states_after_assert(
    interpreter: AssertingInterpreter, stmt: ast.Assert, state: State, frame: Frame
) -> list[State]:
    """The states past `assert <test>`: each under the test when it is a group-structure fact."""
    results = []
    for current, test in interpreter.eval(stmt.test, state, frame):
        if holds_from_here(test, current) and not _caught_around(stmt, frame, interpreter.module.tree):
            interpreter.conditions.note(test, source_of(stmt.test, interpreter.module.path))
            current = current.fork(test)
        results.append(current)
    return results


_CATCHES_ASSERTIONS = frozenset({"AssertionError", "Exception", "BaseException"})


def _caught_around(stmt: ast.Assert, frame: Frame, tree: ast.Module) -> bool:
    """The assertion sits in a `try` whose handler takes its failure (`except AssertionError`,
    `except Exception`, a bare `except`): the code goes on when it fails, so it states nothing."""
    scope: ast.AST = frame.stack[-1] if frame.stack else tree
    for node in ast.walk(scope):
        if (
            isinstance(node, ast.Try)
            and any(_catches(handler.type) and not _raises(handler.body) for handler in node.handlers)
            and any(inner is stmt for body in node.body for inner in ast.walk(body))
        ):
            return True
    return False


def _raises(body: list[ast.stmt]) -> bool:
    """The handler ends by raising (`raise`, `raise ValueError(...) from e`): the code stops."""
    return bool(body) and isinstance(body[-1], ast.Raise)


def _catches(kind: ast.expr | None) -> bool:
    if kind is None:
        return True
    if isinstance(kind, ast.Tuple):
        return any(_catches(element) for element in kind.elts)
    name = kind.id if isinstance(kind, ast.Name) else kind.attr if isinstance(kind, ast.Attribute) else None
    return name in _CATCHES_ASSERTIONS


def holds_from_here(test: Expr, state: State) -> bool:
    """A group-structure fact that may join the path's conditions here. A path's conditions hold
    over all its events, so a fact about a group whose list a collective of the path already read
    (`new_group(ranks)` before `assert g.size() == world`) is left out: it came too late for it."""
    if constant_truth(test) is not None or not is_structure_fact(test):
        return False
    keys = {key for atom in atoms(test) for key in [group_of_structure(atom)] if key is not None}
    return not any(
        group_of_structure(atom) in keys
        for event in state.events
        for term in _terms(event)
        for atom in atoms(term)
    )


def group_of_structure(atom: Atom) -> str | None:
    """The group whose size or rank list (or a member read from it) `atom` is."""
    if atom.name.startswith(SIZE_PREFIX):
        return atom.name[len(SIZE_PREFIX) :]
    return listed_key(atom)


def _terms(event: Element) -> list[Expr]:
    """The values a collective of the path was handed (its rank list, root, peer, group)."""
    found = event.first if isinstance(event, LoopEvent) else event
    if not isinstance(found, CommEvent):
        return []
    terms = (found.root, found.peer, found.ranks_arg, found.group_term)
    return [term for term in terms if term is not None]


def is_structure_fact(test: Expr) -> bool:
    """The test reads a group's size or rank list, and no other per-rank value (module doc)."""
    found = list(atoms(test))
    if not any(atom.name.startswith(_STRUCTURE) for atom in found):
        return False
    return all(atom.kind not in PER_RANK_KINDS or atom.name.startswith(_SHARED_BY_MEMBERS) for atom in found)


def checked_once(interpreter: AssertingInterpreter, stmt: ast.If, state: State, frame: Frame) -> State:
    """`state` at `if <own flag>: return`, the method's first test, under the group-structure
    facts the method asserts before it sets the flag (module doc); else `state` itself."""
    if not (
        len(stmt.body) == 1
        and isinstance(stmt.body[0], ast.Return)
        and stmt.body[0].value is None
        and not stmt.orelse
        and isinstance(stmt.test, ast.Attribute)
        and isinstance(stmt.test.value, ast.Name)
    ):
        return state  # the cheap test first: most `if` statements end here
    function = frame.stack[-1] if frame.stack else None
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or frame.class_name is None:
        return state
    info = interpreter.module.classes.get(frame.class_name)
    if (
        info is None
        or _own_name(function) != stmt.test.value.id
        or not _statements(function)
        or _statements(function)[0] is not stmt
    ):
        return state
    flag = stmt.test.attr
    asserted = _asserted_before_flag(function, flag)
    if asserted is None or not _flag_stored_once(interpreter.module.tree, flag, function):
        return state
    for test in asserted:
        value = interpreter.pure(test, state, frame)
        if holds_from_here(value, state):
            state = state.fork(value)
    return state


def _statements(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    """The method's statements after its docstring."""
    body = function.body
    first = body[0] if body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return body[1:]
    return body


def _own_name(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    positional = [*function.args.posonlyargs, *function.args.args]
    return positional[0].arg if positional else None


def _asserted_before_flag(
    function: ast.FunctionDef | ast.AsyncFunctionDef, flag: str
) -> list[ast.expr] | None:
    """The tests of the top-level assertions between the method's first statement and its store
    of `True` to the flag (None: no such store, a way out before it, or a test on a rebound name)."""
    own = _own_name(function)
    rebound = {
        node.id
        for node in ast.walk(function)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    }
    tests: list[ast.expr] = []
    for stmt in _statements(function)[1:]:
        if _stores_flag(stmt, own, flag, True):
            return tests
        if any(
            isinstance(node, (ast.Return, ast.Raise, ast.Yield, ast.YieldFrom)) for node in ast.walk(stmt)
        ):
            return None
        if isinstance(stmt, ast.Assert):
            if any(isinstance(node, ast.Name) and node.id in rebound for node in ast.walk(stmt.test)):
                return None
            tests.append(stmt.test)
    return None


def _stores_flag(stmt: ast.stmt, own: str | None, flag: str, value: object) -> bool:
    return (
        isinstance(stmt, ast.Assign)
        and isinstance(stmt.value, ast.Constant)
        and stmt.value.value is value
        and any(
            isinstance(t, ast.Attribute)
            and t.attr == flag
            and isinstance(t.value, ast.Name)
            and t.value.id == own
            for t in stmt.targets
        )
    )


def _flag_stored_once(tree: ast.Module, flag: str, checker: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Every store of the flag in the file is `False` or `None`, but the checker's one store of
    `True`: the store may be through any object or class (a subclass's, a function outside the
    class), and `setattr(obj, "flag", value)` counts as a store of an unknown value. Stores in
    other files are not seen: the flag is taken to be the class's own record."""
    in_checker = {id(node) for node in ast.walk(checker)}
    trues = 0
    for node in ast.walk(tree):
        if _sets_flag_by_name(node, flag):
            return False
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AugAssign, ast.AnnAssign))
            else []
        )
        for target in targets:
            if not (isinstance(target, ast.Attribute) and target.attr == flag):
                continue
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if not isinstance(value, ast.Constant) or value.value not in (False, None, True):
                return False
            if value.value is True:
                trues += 1
                if id(node) not in in_checker:
                    return False
    return trues == 1


def _sets_flag_by_name(node: ast.AST, flag: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "setattr"
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and node.args[1].value == flag
    )
