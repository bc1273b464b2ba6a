"""Positions in lists: a rank tested against an entry of a list at a computed position is a test
of that position.

In: a subscript read (`self.ranks[src]`: its node, the values of its list and of its index, the
atom the evaluator made of it), later a comparison of two values. Out: nothing for the read (the
evaluator's atom stays its value; where it sits is remembered in the evaluator's
`listed_positions`), and for the comparison the equivalent test of the position, or None.

Why: an object that serves a group keeps the group's global ranks and its own place among them,
and code that sends from one member finds the sender in two spellings, often in two methods: by
global rank against the list (`self.rank == self.ranks[src]`) and by its place
(`self.rank_in_group == src`). They hold on the same rank, but an entry read at a computed
position is an unknown value, so the two tests looked independent and a rank could be taken to be
the sender in one method and a receiver in the other.

The list is known when one method stores `self.A = L` and `self.B = L.index(E)` (E read from the
object or from a module, not from that method's locals): then `self.A[self.B] == E`, and a list
the code looks its own rank up in is a list of distinct ranks, so `E == self.A[i]` exactly when
`self.B == i`. Each attribute must have that one store in the class (or `None`), and `self.B`
must read back as a per-rank value when E is one (a rank in a group, `rank_in_group`): an
attribute read back as one value on every rank would turn a test that splits the ranks into one
that does not. (With the group's own list, `get_process_group_ranks(g)[i]`, the entry is a
per-rank unknown among the group's members already; a constant `i` is tied to the local rank by
`groups.local_rank_bounds`.)
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Protocol
from weakref import WeakKeyDictionary

from collcheck.static.groups import MemberAt, local_rank
from collcheck.static.loader import FunctionNode, ModuleInfo
from collcheck.static.names import nodes_under
from collcheck.static.state import Frame, State
from collcheck.static.symbolic import RANK, Atom, Compare, Const, Expr, is_rank_dependent
from collcheck.static.syntax import is_attribute_of


class ValueEvaluator(Protocol):
    module: ModuleInfo
    # The atom of an entry read at a computed position -> (the position of the element, the index
    # read, the element): `(self.rank_in_group, src, self.rank)` for `self.ranks[src]`.
    listed_positions: dict[str, tuple[Expr, Expr, Expr]]

    def pure(
        self, node: ast.expr | None, state: State, frame: Frame, known: dict[int, Expr] | None = None
    ) -> Expr: ...


# (class, list attribute) -> (position attribute, element expression), found once per module model
_STORED: WeakKeyDictionary[ModuleInfo, dict[tuple[str, str], tuple[str, ast.expr] | None]] = (
    WeakKeyDictionary()
)


def note_entry(
    ev: ValueEvaluator,
    node: ast.Subscript,
    index: Expr,
    value: Atom,
    state: State,
    frame: Frame,
    known: dict[int, Expr] | None,
) -> Atom:
    """The entry `value` read by `node`, and where it sits remembered if its list is one of those
    known. Such an entry is named after its index too: the same read in a helper reached with
    another index (`src` of another caller) is another entry, not the one remembered."""
    if isinstance(index, Const):
        return value
    holder = node.value
    if not (isinstance(holder, ast.Attribute) and isinstance(holder.value, ast.Name)) or not frame.class_name:
        return value
    function = frame.stack[-1] if frame.stack else None
    if holder.value.id != _own_name(function) or frame.class_name not in ev.module.classes:
        return value
    stored = _stored_position(ev.module, frame.class_name, holder.attr)
    if stored is None:
        return value
    position_attribute, element = stored
    position_node = ast.Attribute(value=holder.value, attr=position_attribute, ctx=ast.Load())
    ast.copy_location(position_node, holder)
    position, found = ev.pure(position_node, state, frame, known), ev.pure(element, state, frame, known)
    if is_rank_dependent(found) and not is_rank_dependent(position):
        return value  # the place is read back as one value on every rank: the test would lose the rank
    entry = replace(value, name=f"{value.name}[{index}]")
    ev.listed_positions[entry.name] = (position, index, found)
    return entry


def position_test(ev: ValueEvaluator, op: str, left: Expr, right: Expr) -> Expr | None:
    """`element == entry` (or `!=`) as the test of the entry's position, when `entry` is one whose
    place `note_entry` remembered and `element` is the element that position locates."""
    if op not in ("==", "!="):
        return None
    for element, entry in ((left, right), (right, left)):
        located = ev.listed_positions.get(entry.name) if isinstance(entry, Atom) else None
        if located is not None and located[2] == element:
            return Compare(op, located[0], located[1])
        if isinstance(entry, MemberAt) and element == RANK:
            # The group's own list at a computed place (`self.rank == coordinator.ranks[src]`):
            # its members are distinct ranks, so this rank is the entry exactly where it sits.
            return Compare(op, local_rank(entry.key), entry.index)
    return None


def _stored_position(module: ModuleInfo, class_name: str, attribute: str) -> tuple[str, ast.expr] | None:
    table = _STORED.setdefault(module, {})
    if (class_name, attribute) not in table:
        table[(class_name, attribute)] = _find_stored_position(module, class_name, attribute)
    return table[(class_name, attribute)]


def _find_stored_position(module: ModuleInfo, class_name: str, attribute: str) -> tuple[str, ast.expr] | None:
    """(B, E) when the class's one store of `self.<attribute>` is `self.<attribute> = L` and the
    same method stores `self.B = L.index(E)`, B's one store, with E free of that method's locals."""
    stores: dict[str, list[tuple[FunctionNode, ast.expr]]] = {}
    for method in module.classes[class_name].methods.values():
        positional = [*method.args.posonlyargs, *method.args.args]
        if not positional:
            continue
        own = positional[0].arg
        for node in nodes_under(method):
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and is_attribute_of(target, own, target.attr):
                    stores.setdefault(target.attr, []).append((method, node.value))
    listed = _only_store(stores.get(attribute, []))
    if listed is None or not isinstance(listed[1], ast.Name):
        return None
    storing, name = listed[0], listed[1].id
    for position_attribute, found in stores.items():
        position = _only_store(found)
        if position is None or position[0] is not storing:
            continue
        call = position[1]
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "index"
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == name
            and len(call.args) == 1
            and not call.keywords
            and _free_of_locals(call.args[0], storing)
        ):
            return position_attribute, call.args[0]
    return None


def _own_name(function: ast.AST | None) -> str | None:
    """The name a method calls its object by (its first parameter)."""
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    positional = [*function.args.posonlyargs, *function.args.args]
    return positional[0].arg if positional else None


def _only_store(found: list[tuple[FunctionNode, ast.expr]]) -> tuple[FunctionNode, ast.expr] | None:
    kept = [
        (method, value)
        for method, value in found
        if not (isinstance(value, ast.Constant) and value.value is None)
    ]
    return kept[0] if len(kept) == 1 else None


def _free_of_locals(expression: ast.expr, method: FunctionNode) -> bool:
    """`expression` reads only the method's object (its first parameter) and names the method does
    not bind, so it means the same in another method of the class."""
    positional = [*method.args.posonlyargs, *method.args.args]
    own = positional[0].arg if positional else None
    bound = {a.arg for a in [*positional, *method.args.kwonlyargs]} - {own}
    bound |= {n.id for n in nodes_under(method) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return not any(isinstance(n, ast.Name) and n.id in bound for n in nodes_under(expression))
