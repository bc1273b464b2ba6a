"""CC001, a collective alone inside a rank guard: issue it on every rank, after the guard (unsafe).

    if rank == 0:                          if rank == 0:
        torch.save(state, path)     ->         torch.save(state, path)
        dist.barrier()                     dist.barrier()

Only when the collective is the last statement of the guard's body (work after it could use
its result) and its arguments use no name the guarded work binds (other ranks would not have
it). A guard left with nothing to do is removed; one with an `else` keeps `pass`. Unsafe: every
rank now takes part, which is the point, but it changes what runs on the other ranks.
"""

from __future__ import annotations

import ast

import libcst as cst

from collcheck.adopt.blocks import (
    ast_statement,
    call_statement,
    enclosing_block,
    line_of,
    loaded_names,
    stored_names,
    with_statements,
)
from collcheck.adopt.rewrite import Rewrite, Source
from collcheck.checks import cc001_mismatched_collective_sequence as cc001
from collcheck.findings import Applicability, Finding

RULE = cc001.CODE
VARIANTS = frozenset({cc001.Variant.MISSING})


def fix(source: Source, finding: Finding) -> Rewrite | None:
    statement = call_statement(source, finding.location.line)
    if statement is None:
        return None
    body = source.parents.get(statement)
    guard = source.parents.get(body) if body is not None else None
    if not isinstance(body, cst.IndentedBlock) or not isinstance(guard, cst.If) or guard.body is not body:
        return None
    if body.body[-1] is not statement:
        return None
    outer = enclosing_block(source, guard)  # None for an `elif` (an If inside another's orelse)
    if outer is None or not _arguments_exist_everywhere(source, guard, statement):
        return None
    rest = list(body.body[:-1])
    if rest:
        kept: list[cst.BaseStatement] = [guard.with_changes(body=body.with_changes(body=rest))]
    elif guard.orelse is not None:
        kept = [guard.with_changes(body=body.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])]))]
    else:
        kept = []
    if not kept and any(line.comment is not None for line in body.footer):
        return None  # comments after the guarded call would have nowhere to go
    moved = statement if kept else statement.with_changes(leading_lines=_kept_comments(guard, statement))
    text = source.replaced(outer, with_statements(outer, guard, [*kept, moved]))
    return Rewrite(text, Applicability.UNSAFE, "issue the collective on every rank, after the rank guard")


def _arguments_exist_everywhere(source: Source, guard: cst.If, statement: cst.SimpleStatementLine) -> bool:
    tree_guard = ast_statement(source, line_of(source, guard), ast.If)
    tree_call = ast_statement(source, line_of(source, statement), ast.Expr)
    if not isinstance(tree_guard, ast.If) or tree_call is None:
        return False
    return not (loaded_names(tree_call) & stored_names(tree_guard.body[:-1]))


def _kept_comments(guard: cst.If, statement: cst.SimpleStatementLine) -> list[cst.EmptyLine]:
    """When the guard goes, the lines above it and the comment on its `if` line go above the call."""
    header = guard.body.header if isinstance(guard.body, cst.IndentedBlock) else None
    own = [cst.EmptyLine(comment=header.comment)] if header is not None and header.comment else []
    return [*guard.leading_lines, *own, *statement.leading_lines]
