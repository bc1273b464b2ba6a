"""Slicing a function's body to the statements that can matter for its collectives.

In: a function's node and the names of the module's `@property` getters (attribute reads the
interpreter runs as code). Out: `sliced_statements`, the statements of the body the interpreter
may step over without running them, each with the calls it holds: interpret.exec_block steps over
one where no call of it needs running on any live path (`has_effect`: a collective, a helper of
the run, an exit), and each run of statements stepped over costs one step a path, whatever its
length.

Why: a trainer's main loop is much bookkeeping (counters, running means, logging, docstrings)
between the statements that reach a collective. Every statement ran on every live path and was
counted against `max_steps`, so long loops with a few paths went over the budget and ran in the
reduced mode (over_budget.py), which keeps only the divergences a function decides in its own
lines. A statement is a candidate when it:

* is simple (an assignment, an expression, `pass`, `assert`, `del`) with targets that store
  without running code (names, their attributes and items), and is no `assert` whose test calls
  something other than a builtin (it may state a group's structure: asserted.py), or an `if`,
  `for` or `while` whose header qualifies and whose every statement is a candidate, with no
  call at all in it (a call is judged in the state it runs in, which the statements before it
  in the body would change);
* holds no property read, `yield`, `await`, assignment expression, lambda or comprehension; it
  cannot exit (`return`, `raise`, `break`, `continue` are never candidates; a call to `sys.exit()`
  needs running);

and is sliced away when it writes nothing relevant: the names the kept statements read (nested
functions included), the parameters (what a method stores on `self` outlives the call), the names
declared `global`/`nonlocal`, what every candidate with a call reads (it runs wherever a call of
it needs running, and must then see the values the full analysis has), and, to a fixpoint, what
the candidates that write relevant names read. A method call that changes its receiver in the
interpreter's model (`xs.append(v)`, `self.pending.append(x)`), or any method of a parameter,
writes that receiver.

What is stepped over therefore changes no value a kept statement reads, no path and no event: the
regions, and so the findings, are those of running it (tests/test_slicing.py compares both). The
judgement is syntactic and flow-insensitive (a name read anywhere by a kept statement is relevant
everywhere), so it only ever keeps too much. A function that reads its namespace by name
(`locals()`, `vars()`, `eval`, `exec`, `globals()`) is not sliced at all, nor is a module body.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from collcheck.static.loader import FunctionNode
from collcheck.static.names import nodes_under
from collcheck.static.receivers import CONTAINER_MUTATORS
from collcheck.static.syntax import MUTATING_METHODS

# Statements without control flow of their own (as fallback.SIMPLE_STATEMENTS), and the compound
# ones that qualify when everything in them does.
_SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Pass, ast.Assert, ast.Delete)
_COMPOUND = (ast.If, ast.For, ast.While)
# Expressions the interpreter evaluates with rules of their own (a call is checked where it runs).
_RUNS_CODE = (
    ast.Yield,
    ast.YieldFrom,
    ast.Await,
    ast.NamedExpr,
    ast.Lambda,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)
_MUTATORS = CONTAINER_MUTATORS | MUTATING_METHODS
# Names through which code reads a namespace without naming the variable.
_NAMESPACE_READERS = frozenset({"locals", "vars", "eval", "exec", "globals"})
_BUILTINS = frozenset(dir(builtins))
NOTHING_SLICED: dict[ast.stmt, tuple[ast.Call, ...]] = {}  # a module body's: every statement runs


def sliced_statements(
    function: FunctionNode, properties: frozenset[str]
) -> dict[ast.stmt, tuple[ast.Call, ...]]:
    """The statements of `function`'s body (at any depth, outside nested definitions) that may be
    stepped over (module doc), each with the calls in it: the interpreter steps over it only where
    none of them needs running (`has_effect`), else it runs it as any other."""
    candidates: dict[ast.stmt, Candidate] = {}
    kept_reads: set[str] = set()
    # The function's nodes are walked once and kept (names.nodes_under: the interpreter asks too).
    every_node = nodes_under(function)
    if any(isinstance(node, ast.Name) and node.id in _NAMESPACE_READERS for node in every_node):
        return {}
    parameters = frozenset(_parameters(function))
    _classify(function.body, _Scanner(properties), candidates, kept_reads, parameters)
    if not candidates:
        return {}
    # A statement with calls may run after all (what a call does is known only where it runs):
    # what it reads must then be what the full analysis has there.
    relevant = kept_reads | parameters | _declared(every_node)
    for candidate in candidates.values():
        if candidate.calls:
            relevant |= candidate.reads
    sliced = dict(candidates)
    changed = True
    while changed:  # a candidate that writes a relevant name is kept, and what it reads is relevant
        changed = False
        for stmt, candidate in list(sliced.items()):
            if candidate.writes & relevant:
                del sliced[stmt]
                relevant |= candidate.reads
                changed = True
    return {stmt: candidate.calls for stmt, candidate in sliced.items()}


@dataclass(frozen=True)
class Candidate:
    """A statement that issues nothing of its own: the variables it stores into (or into an
    attribute or item of, or calls a method of), those it reads, and its calls."""

    writes: frozenset[str]
    reads: frozenset[str]
    calls: tuple[ast.Call, ...]


@dataclass(frozen=True)
class _Parts:
    """What one walk of a statement or expression finds: the variables it reads, its calls (in
    `ast.walk` order for a simple statement; for an `if`/`for`/`while`, its header's then its
    statements', only ever asked whether there are any, as such a statement is a candidate only
    without calls), and whether it is quiet: no property read, `yield`, `await` or code of its
    own (a lambda, a comprehension, an assignment expression) anywhere in it."""

    names: frozenset[str]
    calls: tuple[ast.Call, ...]
    quiet: bool


class _Scanner:
    """`_Parts` of the statements and expressions of one function, each walked once: the
    classification asks of a statement whether it is quiet, what it reads and what it calls, and
    of a compound one the same of everything in it. Lives as long as one `sliced_statements`."""

    def __init__(self, properties: frozenset[str]) -> None:
        self.properties = properties
        self.known: dict[ast.AST, _Parts] = {}

    def parts(self, node: ast.AST) -> _Parts:
        found = self.known.get(node)
        if found is None:
            found = self._compose(node) if isinstance(node, _COMPOUND) else self._walk(node)
            self.known[node] = found
        return found

    def _walk(self, node: ast.AST) -> _Parts:
        names: set[str] = set()
        calls: list[ast.Call] = []
        quiet = True
        properties = self.properties
        for part in nodes_under(node):  # `ast.walk`'s order; kept on the node, asked again per function
            if isinstance(part, ast.Name):
                names.add(part.id)
            elif isinstance(part, ast.Call):
                calls.append(part)
                continue
            elif isinstance(part, ast.Attribute):
                if part.attr in properties:
                    quiet = False
                continue
            if isinstance(part, _RUNS_CODE):
                quiet = False
        return _Parts(frozenset(names), tuple(calls), quiet)

    def _compose(self, stmt: ast.If | ast.For | ast.While) -> _Parts:
        """From its header's and its statements' parts (asked of them anyway): the header and
        the two blocks are everything an `if`, `for` or `while` holds."""
        pieces = [self.parts(part) for part in (*_header(stmt), *stmt.body, *stmt.orelse)]
        return _Parts(
            frozenset().union(*(piece.names for piece in pieces)),
            tuple(call for piece in pieces for call in piece.calls),
            all(piece.quiet for piece in pieces),
        )


def _candidate(stmt: ast.stmt, parameters: frozenset[str], scanner: _Scanner) -> Candidate:
    found = scanner.parts(stmt)
    calls = found.calls
    writes = _writes(stmt)
    for call in calls:
        # `xs.append(v)`, `self.pending.append(x)`: the interpreter gives the container a new
        # value (interpret._stmt_Expr, object_values.record_container_change); and a method of
        # an object the function was handed (`self.meter.reset()`) may change what it holds.
        if isinstance(call.func, ast.Attribute):
            root = _root(call.func.value)
            if root is not None and (root in parameters or call.func.attr in _MUTATORS):
                writes.add(root)
    return Candidate(frozenset(writes), found.names, calls)


def _classify(
    body: Sequence[ast.stmt],
    scanner: _Scanner,
    candidates: dict[ast.stmt, Candidate],
    kept_reads: set[str],
    parameters: frozenset[str],
) -> bool:
    """Record the candidates of `body` (and of what it holds); the names the others read go to
    `kept_reads`. True when every statement of `body` is a candidate."""
    every = True
    for stmt in body:
        if _is_candidate(stmt, scanner, candidates, kept_reads, parameters):
            candidates[stmt] = _candidate(stmt, parameters, scanner)
        else:
            every = False
    return every


def _is_candidate(
    stmt: ast.stmt,
    scanner: _Scanner,
    candidates: dict[ast.stmt, Candidate],
    kept_reads: set[str],
    parameters: frozenset[str],
) -> bool:
    if isinstance(stmt, _SIMPLE):
        found = scanner.parts(stmt)
        plain = all(_plain_target(t) for t in _targets(stmt))
        if found.quiet and plain and not _may_state_a_fact(stmt, found):
            return True
        kept_reads.update(found.names)
        return False
    if isinstance(stmt, _COMPOUND):
        header = _header(stmt)
        # A test or a loop header with a call is kept: the branch it forks is the full analysis's.
        # Calls are judged where they run, with the state they run in: a statement that holds
        # others (whose state the body changes) is stepped over only when it calls nothing.
        quiet_header = all(scanner.parts(part).quiet for part in header) and all(
            _plain_target(t) for t in _targets(stmt)
        )
        inner = [
            _classify(block, scanner, candidates, kept_reads, parameters)
            for block in (stmt.body, stmt.orelse)
        ]
        if quiet_header and all(inner) and not scanner.parts(stmt).calls:
            return True
        for part in header:
            kept_reads.update(scanner.parts(part).names)
        return False
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        for item in stmt.items:
            kept_reads.update(scanner.parts(item).names)
        _classify(stmt.body, scanner, candidates, kept_reads, parameters)
        return False
    if isinstance(stmt, ast.Try):
        for part in ast.iter_child_nodes(stmt):
            if not isinstance(part, ast.stmt):
                kept_reads.update(scanner.parts(part).names)
        for block in (stmt.body, stmt.orelse, stmt.finalbody):
            _classify(block, scanner, candidates, kept_reads, parameters)
        for handler in stmt.handlers:
            _classify(handler.body, scanner, candidates, kept_reads, parameters)
        return False
    # Definitions, returns, raises, imports, `match`, async loops: kept, with all they read
    # (a nested function's body reads the enclosing variables when it runs).
    kept_reads.update(scanner.parts(stmt).names)
    return False


def _may_state_a_fact(stmt: ast.stmt, found: _Parts) -> bool:
    """An `assert` whose test calls something other than a builtin (`group.size()`,
    `dist.get_world_size()`): it may state a fact about a group that holds after it (asserted.py),
    so it runs; `assert isinstance(x, T)` and other tests on plain values are stepped over."""
    if not isinstance(stmt, ast.Assert) or not found.calls:
        return False
    calls = [node for node in ast.walk(stmt.test) if isinstance(node, ast.Call)]  # not its message's
    return any(not (isinstance(call.func, ast.Name) and call.func.id in _BUILTINS) for call in calls)


def _header(stmt: ast.If | ast.For | ast.While) -> list[ast.AST]:
    if isinstance(stmt, ast.For):
        return [stmt.target, stmt.iter]
    return [stmt.test]


def _targets(stmt: ast.stmt) -> list[ast.expr]:
    if isinstance(stmt, ast.Assign):
        return list(stmt.targets)
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign, ast.For)):
        return [stmt.target]
    if isinstance(stmt, ast.Delete):
        return list(stmt.targets)
    return []


def _plain_target(target: ast.expr) -> bool:
    """A name, or an attribute or item of one, or a tuple of those: nothing runs to store it."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_plain_target(element) for element in target.elts)
    if isinstance(target, ast.Starred):
        return _plain_target(target.value)
    return _root(target) is not None


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _writes(stmt: ast.stmt) -> set[str]:
    """The variables `stmt` (and what it holds) stores into, or into an attribute or item of."""
    written: set[str] = set()
    for inner in _statements(stmt):
        for target in _targets(inner):
            for part in ast.walk(target):
                if isinstance(part, (ast.Name, ast.Attribute, ast.Subscript)) and isinstance(
                    part.ctx, (ast.Store, ast.Del)
                ):
                    root = _root(part)
                    if root is not None:
                        written.add(root)
    return written


def _statements(stmt: ast.stmt) -> Iterator[ast.stmt]:
    yield stmt
    if isinstance(stmt, _COMPOUND):
        for inner in (*stmt.body, *stmt.orelse):
            yield from _statements(inner)


def _parameters(function: FunctionNode) -> set[str]:
    args = function.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return {arg.arg for arg in every if arg is not None}


def _declared(every_node: Sequence[ast.AST]) -> set[str]:
    names: set[str] = set()
    for node in every_node:
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
    return names
