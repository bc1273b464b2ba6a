"""Injected bugs reached through objects, for bench/inject_bugs.py.

The plain kinds put the rank-dependent code right around a collective statement. These put an
object between them, as real code does (a syncer, a checkpointer, a stage that keeps its rank):

  object_method         the call moves into a method of an injected class; the statement calls it
                        on a local object, under `if get_rank() == 0:`
                            _cc_relay = _CcRelay()
                            if torch.distributed.get_rank() == 0:
                                y = _cc_relay.run(x, group)
  object_parameter      the same method, called by an injected helper on its annotated parameter
                            if torch.distributed.get_rank() == 0:
                                y = _cc_through(_CcRelay(), x, group)
  init_attribute_guard  the guard reads an attribute an injected class's `__init__` stores from
                        its argument, given the rank where the object is built
                            _cc_gate = _CcGate(torch.distributed.get_rank())
                            if _cc_gate.stage == 0:
                                <the statement, unchanged>

The injected classes and helper are appended at the end of the module (so the mutated function's
lines only grow by the lines added at the statement). The moved call takes as parameters the
names it reads that are not the module's imports, builtins or module-level names; a call that
reads `self`, `cls` or `super`, awaits or yields is not moved (its meaning would change), and
the mutation is not made there.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterable

RELAY = "_CcRelay"
THROUGH = "_cc_through"
GATE = "_CcGate"
BUILTIN_NAMES = frozenset(dir(builtins))
UNMOVABLE = frozenset({"self", "cls", "super", "__class__"})


def statement_at(tree: ast.Module, line: int) -> ast.stmt | None:
    """The expression statement or plain assignment starting at `line` whose value is a call."""
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.Expr, ast.Assign))
            and node.lineno == line
            and isinstance(node.value, ast.Call)
        ):
            return node
    return None


def module_names(tree: ast.Module) -> frozenset[str]:
    """Names bound at module level (imports, definitions, assignments)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return frozenset(names)


def free_names(call: ast.Call, module_level: Iterable[str]) -> list[str] | None:
    """The local names `call` reads, in order of appearance; None when it cannot be moved."""
    stored = {n.id for n in ast.walk(call) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    outside = set(module_level) | BUILTIN_NAMES | stored
    names: list[str] = []
    for node in ast.walk(call):
        if isinstance(node, (ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr, ast.Lambda)):
            return None
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in UNMOVABLE:
                return None
            if node.id not in outside and node.id not in names:
                names.append(node.id)
    return names


def object_edit(
    kind: str, statement_lines: list[str], indent: str, rank: str, text: str, line: int
) -> tuple[list[str], list[str]] | None:
    """The lines that replace the statement and the lines appended to the module, or None where
    the mutation cannot be made."""
    body = [f"{indent}    " + part[len(indent) :] if part.strip() else part for part in statement_lines]
    if kind == "init_attribute_guard":
        guard = [f"{indent}_cc_gate = {GATE}({rank})", f"{indent}if _cc_gate.stage == 0:", *body]
        gate = [
            "",
            "",
            f"class {GATE}:  # injected",
            "    def __init__(self, stage):",
            "        self.stage = stage",
        ]
        return guard, gate
    tree = ast.parse(text)
    statement = statement_at(tree, line)
    if statement is None:
        return None
    call = statement.value
    assert isinstance(call, ast.Call)
    names = free_names(call, module_names(tree))
    if names is None:
        return None
    arguments = ", ".join(names)
    relay = [
        "",
        "",
        f"class {RELAY}:  # injected",
        f"    def run(_cc_self{', ' if names else ''}{arguments}):",
        "        return " + ast.unparse(call),
    ]
    if kind == "object_method":
        replaced = f"_cc_relay.run({arguments})"
        prelude = [f"{indent}_cc_relay = {RELAY}()"]
    elif kind == "object_parameter":
        replaced = f"{THROUGH}({RELAY}(){', ' if names else ''}{arguments})"
        prelude = []
        relay += [
            "",
            "",
            f"def {THROUGH}(relay: {RELAY}{', ' if names else ''}{arguments}):  # injected",
            f"    return relay.run({arguments})",
        ]
    else:
        return None
    targets = ""
    if isinstance(statement, ast.Assign):
        targets = " = ".join(ast.unparse(target) for target in statement.targets) + " = "
    return [*prelude, f"{indent}if {rank} == 0:", f"{indent}    {targets}{replaced}"], relay
