"""What the statement-moving fixers share: the statement at a finding, its block, names."""

from __future__ import annotations

import ast

import libcst as cst

from collcheck.adopt.rewrite import Source

Block = cst.IndentedBlock | cst.Module


def call_statement(source: Source, line: int) -> cst.SimpleStatementLine | None:
    """The statement on `line` when it is one call used as a statement (`dist.barrier()`)."""
    statements = source.nodes_at(line, cst.SimpleStatementLine)
    if len(statements) != 1:
        return None
    statement = statements[0]
    assert isinstance(statement, cst.SimpleStatementLine)
    if len(statement.body) != 1:
        return None
    expression = statement.body[0]
    if not isinstance(expression, cst.Expr) or not isinstance(expression.value, cst.Call):
        return None
    return statement


def enclosing_block(source: Source, node: cst.CSTNode) -> Block | None:
    """The block (`IndentedBlock` or the module) that holds statement `node` in its body."""
    parent = source.parents.get(node)
    return parent if isinstance(parent, (cst.IndentedBlock, cst.Module)) else None


def with_statements(block: Block, old: cst.CSTNode, new: list[cst.BaseStatement]) -> Block:
    """`block` with statement `old` replaced by the statements `new`."""
    body: list[cst.BaseStatement] = []
    for statement in block.body:
        body.extend(new if statement is old else [statement])  # type: ignore[list-item]
    return block.with_changes(body=body)


def stored_names(statements: list[ast.stmt]) -> set[str]:
    """Names these statements bind (assignments, loop targets, `with ... as`, imports, defs)."""
    names: set[str] = set()
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def loaded_names(node: ast.AST) -> set[str]:
    return {item.id for item in ast.walk(node) if isinstance(item, ast.Name)}


def ast_statement(source: Source, line: int, kind: type[ast.stmt]) -> ast.stmt | None:
    """The stdlib-ast statement of `kind` starting on `line` (outermost when several)."""
    found = [node for node in ast.walk(source.tree) if isinstance(node, kind) and node.lineno == line]
    return min(found, key=lambda node: node.col_offset) if found else None


def used_names(source: Source) -> set[str]:
    """Every identifier of the file, so that a new variable never shadows one."""
    return {node.id for node in ast.walk(source.tree) if isinstance(node, ast.Name)} | {
        node.arg for node in ast.walk(source.tree) if isinstance(node, ast.arg)
    }


def fresh_name(source: Source, wanted: str) -> str:
    taken = used_names(source)
    name, number = wanted, 2
    while name in taken:
        name, number = f"{wanted}_{number}", number + 1
    return name


def line_of(source: Source, node: cst.CSTNode) -> int:
    return source.positions[node].start.line


def distributed_module(source: Source) -> str | None:
    """How this file names `torch.distributed` (`dist`, `torch.distributed`), or None."""
    for node in source.tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "torch.distributed":
                    return alias.asname or "torch.distributed"
        elif isinstance(node, ast.ImportFrom) and node.module == "torch" and not node.level:
            for alias in node.names:
                if alias.name == "distributed":
                    return alias.asname or "distributed"
    imports_torch = any(
        isinstance(node, ast.Import)
        and any(alias.name == "torch" and not alias.asname for alias in node.names)
        for node in source.tree.body
    )
    return "torch.distributed" if imports_torch else None


def parse_statements(source: Source, code: str) -> list[cst.BaseStatement]:
    """Statements written as code, parsed with the file's own newline and indentation."""
    parsed = cst.parse_module(code, config=source.module.config_for_parsing)
    return list(parsed.body)


def innermost_function(source: Source, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    found = [
        node
        for node in ast.walk(source.tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    return max(found, key=lambda node: node.lineno) if found else None
