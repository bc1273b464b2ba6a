"""CC007, a per-process decision (time, filesystem, random numbers): decide it on rank 0 and
broadcast it, so that every rank takes the same branch (unsafe).

    if time.time() - last > every:       decision = [time.time() - last > every]
        dist.barrier()             ->    dist.broadcast_object_list(decision, src=0)
                                         if decision[0]:
                                             dist.barrier()

Only for the simple shape: the finding is shown at the test of an `if` statement, or lies in its
body (or `else`) (not an `elif`, not a `while`) whose test calls something, in a file that
imports torch.distributed.
Unsafe: every rank now evaluates the test but uses rank 0's answer (rank 0's clock, its view of
the filesystem), and each pass through the `if` costs a broadcast.
"""

from __future__ import annotations

import ast

import libcst as cst

from collcheck.adopt.blocks import (
    distributed_module,
    enclosing_block,
    fresh_name,
    parse_statements,
    with_statements,
)
from collcheck.adopt.rewrite import Rewrite, Source
from collcheck.checks import cc007_per_process_value_guard as cc007
from collcheck.findings import Applicability, Finding

RULE = cc007.CODE
VARIANTS = frozenset({cc007.Variant.GUARD, cc007.Variant.EXIT})


def _guard_line(source: Source, line: int) -> int | None:
    """The line of the `if` whose test starts at `line` (where CC007 is shown), or else of the
    innermost `if` whose branches (not its test) contain `line`."""
    guards = [node for node in ast.walk(source.tree) if isinstance(node, ast.If) and node.test.lineno == line]
    guards = guards or [
        node
        for node in ast.walk(source.tree)
        if isinstance(node, ast.If)
        and (node.test.end_lineno or node.lineno) < line <= (node.end_lineno or node.lineno)
    ]
    if not guards:
        return None
    guard = max(guards, key=lambda node: node.lineno)
    has_call = any(isinstance(node, ast.Call) for node in ast.walk(guard.test))
    return guard.lineno if has_call else None


def fix(source: Source, finding: Finding) -> Rewrite | None:
    line = _guard_line(source, finding.location.line)
    dist = distributed_module(source)
    if line is None or dist is None:
        return None
    guards = [node for node in source.nodes_at(line, cst.If) if enclosing_block(source, node) is not None]
    if len(guards) != 1:
        return None
    guard = guards[0]
    assert isinstance(guard, cst.If)
    block = enclosing_block(source, guard)
    assert block is not None
    name = fresh_name(source, "decision")
    test = source.code(guard.test).strip()
    decide = parse_statements(source, f"{name} = [{test}]\n{dist}.broadcast_object_list({name}, src=0)\n")
    decide[0] = decide[0].with_changes(leading_lines=guard.leading_lines)
    shared = guard.with_changes(
        leading_lines=[],
        test=cst.parse_expression(f"{name}[0]"),
        whitespace_before_test=cst.SimpleWhitespace(" "),
    )
    text = source.replaced(block, with_statements(block, guard, [*decide, shared]))
    return Rewrite(text, Applicability.UNSAFE, "decide on rank 0 and broadcast the decision to every rank")
