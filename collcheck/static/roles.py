"""Attributes that say which part a process plays in point-to-point exchanges.

A class handed a number through its constructor (`Scheduler(stage, ...)`, built in a file the run
does not see) keeps it on `self`. Whether that number is the same on every process is unknown from
its origin, but the class's own code can tell: when tests on it decide whether this process
sends and whether it receives (`if self.stage == 0: ... else: recv(src=...)` and `if self.stage <
self.stages - 1: send(dst=...)`), or when a peer is computed from it (`send(t, dst=self.stage +
1)`), it is this process's place in an ordering of processes. A point-to-point transfer pairs two
processes: a test that lets one of them send and the other receive cannot hold alike on both, and
a peer one step away from a number is a neighbour's place only when the number is one's own.

Nothing here reads what a variable or attribute is called: `rank` alone makes no process rank (a
kernel's `rank`, a tensor's rank). A number tested only around collectives (`if self.stage == 0:
barrier()`) is no evidence either: a configuration value (a ZeRO stage) is tested so too.

In: a class of the analysed file, one of its attributes, the file's imports and catalog. Out: a
verdict (`picks_p2p_role`).
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator
from weakref import WeakKeyDictionary

from collcheck.catalog import Catalog, OpSpec
from collcheck.static.names import ImportTable, nodes_under, qualified_name
from collcheck.static.syntax import is_attribute_of

ROLE_PREFIX = "role:"  # the name of such an attribute's value: `role:self.stage@Scheduler`
SEND = "p2p_send"
RECV = "p2p_recv"
Method = ast.FunctionDef | ast.AsyncFunctionDef


def picks_p2p_role(owner: ast.ClassDef, attribute: str, imports: ImportTable, catalog: Catalog) -> bool:
    """`self.<attribute>` of `owner` is this process's place among processes exchanging
    point-to-point: tests on it guard a blocking send and, elsewhere, a blocking receive (never
    both in one branch) in the class's methods, or some transfer's peer is computed from it (see
    the module's docstring)."""
    if not _transfers(owner, imports, catalog):
        return False  # neither a guarded transfer nor a peer: asked of each attribute, walked once
    guarded: set[str] = set()
    for method, first in _methods(owner):
        for node in nodes_under(method):
            if isinstance(node, ast.Call) and _peer_from(node, first, attribute, imports, catalog):
                return True
            if isinstance(node, (ast.If, ast.While)) and _tests(node.test, first, attribute):
                for branch in (node.body, node.orelse):
                    kinds = {kind for stmt in branch for kind in _transfer_kinds(stmt, imports, catalog)}
                    if not {SEND, RECV} <= kinds:
                        # A branch that both sends and receives is split by something else
                        # (`if self.enabled:` around a whole exchange): no evidence of a role.
                        guarded |= kinds
        if {SEND, RECV} <= guarded:
            return True
    return False


# class -> (the import table and catalog asked with, whether its methods call a transfer); weak
# keys: a class's entry lives as long as its tree.
_TRANSFERS: WeakKeyDictionary[ast.ClassDef, tuple[ImportTable, str, bool]] = WeakKeyDictionary()


def _transfers(owner: ast.ClassDef, imports: ImportTable, catalog: Catalog) -> bool:
    """Whether a method of the class calls a catalogued point-to-point function (a call every
    verdict of `picks_p2p_role` needs), once per class, not once per attribute asked about."""
    known = _TRANSFERS.get(owner)
    if known is not None and known[0] is imports and known[1] == catalog.fingerprint:
        return known[2]
    found = any(
        isinstance(node, ast.Call)
        and (spec := _spec(node, imports, catalog)) is not None
        and spec.kind.startswith("p2p")
        for method, _ in _methods(owner)
        for node in nodes_under(method)
    )
    _TRANSFERS[owner] = (imports, catalog.fingerprint, found)
    return found


def _methods(owner: ast.ClassDef) -> Iterator[tuple[Method, str]]:
    """Each method of the class with the name of its first parameter (the object)."""
    for method in owner.body:
        if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parameters = [*method.args.posonlyargs, *method.args.args]
            if parameters:
                yield method, parameters[0].arg


def _is_own(node: ast.AST, first: str, attribute: str) -> bool:
    return isinstance(node, ast.expr) and is_attribute_of(node, first, attribute)


def _tests(test: ast.expr, first: str, attribute: str) -> bool:
    """The test reads the attribute as a number or a flag: compared with something other than None
    (`self.stage == 0`, `self.stage < self.stages - 1`), or its truth taken (`if self.first:`)."""
    if _is_own(test, first, attribute):
        return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _tests(test.operand, first, attribute)
    if isinstance(test, ast.BoolOp):
        return any(_tests(value, first, attribute) for value in test.values)
    if isinstance(test, ast.Compare):
        operands = [test.left, *test.comparators]
        if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in test.ops):
            return False  # `self.stage is None`, `self.stage in plan`: no place among processes
        return any(_is_own(operand, first, attribute) for operand in operands)
    return False


def _spec(call: ast.Call, imports: ImportTable, catalog: Catalog) -> OpSpec | None:
    """A catalogued function the call names by its import (methods are left out: `send` of a
    socket or a queue is no transfer between ranks)."""
    name = qualified_name(call.func, imports)
    return catalog.functions.get(name) if name is not None else None


def _transfer_kinds(stmt: ast.stmt, imports: ImportTable, catalog: Catalog) -> set[str]:
    """The blocking point-to-point kinds the statement's own calls issue."""
    kinds: set[str] = set()
    for node in nodes_under(stmt):
        if isinstance(node, ast.Call):
            spec = _spec(node, imports, catalog)
            if spec is not None and spec.kind in (SEND, RECV):
                kinds.add(spec.kind)
    return kinds


def _peer_from(call: ast.Call, first: str, attribute: str, imports: ImportTable, catalog: Catalog) -> bool:
    """A transfer whose peer is a step from the attribute (`dst=self.stage + 1`, `src=self.stage -
    1`, modulo a ring's size)."""
    spec = _spec(call, imports, catalog)
    if spec is None or not spec.kind.startswith("p2p"):
        return False
    for role in (spec.peer, spec.group_peer):
        if role is None:
            continue
        passed = _argument(call, spec, role)
        if isinstance(passed, ast.BinOp) and isinstance(passed.op, ast.Mod):
            passed = passed.left  # `(self.stage + 1) % self.stages`: the ring's size is no place
        if (
            isinstance(passed, ast.BinOp)
            and isinstance(passed.op, (ast.Add, ast.Sub))
            and (_is_own(passed.left, first, attribute) or _is_own(passed.right, first, attribute))
        ):
            return True
    return False


def _argument(call: ast.Call, spec: OpSpec, name: str) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    index = spec.param_index(name)
    if (
        index is not None
        and index < len(call.args)
        and not any(isinstance(arg, ast.Starred) for arg in call.args[: index + 1])
    ):
        return call.args[index]
    return None


# class -> how many times its methods store each `self.<attribute>` (weak keys, as `_TRANSFERS`).
_STORES: WeakKeyDictionary[ast.ClassDef, Counter[str]] = WeakKeyDictionary()


def stores(owner: ast.ClassDef, attribute: str) -> int:
    """How many assignments of the class's methods store `self.<attribute>` (the class's methods
    walked once for all its attributes)."""
    counts = _STORES.get(owner)
    if counts is None:
        counts = Counter()
        for method, first in _methods(owner):
            for node in nodes_under(method):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == first
                ):
                    counts[node.attr] += 1
        _STORES[owner] = counts
    return counts[attribute]
