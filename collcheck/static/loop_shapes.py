"""Loops whose iterations issue the same collectives: what lets a first call that fills a cache be
followed on its cached path from the second iteration on (interpret._cached_after_first_call).

Comes in: a loop statement, the states its body ended in, the frame. Goes out: a verdict.
"""

from __future__ import annotations

import ast

from collcheck.static.names import nodes_under
from collcheck.static.program import CommEvent, EventKind
from collcheck.static.state import Frame, State
from collcheck.static.symbolic import Const
from collcheck.static.syntax import loop_variant_names, mentions


def iterations_alike(stmt: ast.For | ast.AsyncFor | ast.While, body: list[State], frame: Frame) -> bool:
    """Every iteration that communicates issues the same collectives with the same arguments: one
    sequence of plain collectives, whose calls in the loop body mention neither the loop variable
    nor anything the body reassigns (a `src=peer`, a `chunks[i]`, a counter carried over)."""
    sequences = [state.events for state in body if state.events]
    if not sequences or any(events != sequences[0] for events in sequences):
        return False
    variant = loop_variant_names(stmt)
    calls = {
        (n.lineno, n.col_offset): n
        for part in stmt.body
        for n in nodes_under(part)
        if isinstance(n, ast.Call)
    }
    depth = len(frame.chain)
    for event in sequences[0]:
        if not isinstance(event, CommEvent) or event.kind is not EventKind.COLLECTIVE:
            return False
        if event.chain[:depth] != frame.chain:
            return False
        direct = len(event.chain) == depth
        line, column = (
            (event.line, event.column) if direct else (event.chain[depth].line, event.chain[depth].column)
        )
        call = calls.get((line, column))
        if call is None or mentions(call, variant):
            return False
        if not direct and not fixed_arguments(event, variant):
            return False
    return True


def fixed_arguments(event: CommEvent, variant: set[str]) -> bool:
    """A collective issued by a helper: its root, op and group are literals or groups created
    somewhere, and the loop changes no attribute the helper could read."""
    if any("." in name for name in variant):
        return False
    terms = (event.root, event.reduce_op, event.peer, event.ranks_arg, event.group_term)
    if not all(term is None or isinstance(term, Const) for term in terms):
        return False
    return event.group is None or event.group.created
