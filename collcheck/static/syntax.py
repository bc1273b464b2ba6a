"""Facts read off the syntax tree alone, with no symbolic state.

In: `ast` nodes. Out: booleans and name sets the interpreter uses to decide how to treat a
statement — names a loop body assigns or reads, calls in evaluation order, set expressions, the
lazy-initialisation and memo idioms, handlers that catch per-rank data errors.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from collcheck.static.loader import FunctionNode
from collcheck.static.names import child_nodes, dotted, nodes_under

SET_METHODS = frozenset({"union", "intersection", "difference", "symmetric_difference"})


def is_set_expr(node: ast.expr, set_names: frozenset[str] | set[str] = frozenset()) -> bool:
    """A set built here: literal, comprehension, set()/frozenset(), set operators and methods."""
    if isinstance(node, (ast.Set, ast.SetComp)):
        return True
    if isinstance(node, ast.Name):
        return node.id in set_names
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitOr, ast.BitAnd, ast.Sub, ast.BitXor)):
        return is_set_expr(node.left, set_names) or is_set_expr(node.right, set_names)
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Name):
        return node.func.id in ("set", "frozenset")
    return (
        isinstance(node.func, ast.Attribute)
        and node.func.attr in SET_METHODS
        and is_set_expr(node.func.value, set_names)
    )


def assigned_names(nodes: Iterable[ast.AST]) -> set[str]:
    """Names and dotted attributes stored anywhere under `nodes` (a new set each call)."""
    names: set[str] = set()
    for root in nodes:
        names |= _assigned_under(root)
    return names


@lru_cache(maxsize=65536)
def _assigned_under(root: ast.AST) -> frozenset[str]:
    # Once per node: a loop body is asked again each time the loop runs (helpers run many times).
    names: set[str] = set()
    for node in nodes_under(root):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            parts = dotted(node)
            if parts:
                names.add(".".join(parts))
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        else:
            grown = mutated_name(node)
            if grown is not None:
                names.add(grown)
    return frozenset(names)


# Methods that change a container in place: `items.append(x)` in a loop body changes `items`.
MUTATING_METHODS = frozenset(
    {"append", "extend", "insert", "pop", "remove", "clear", "update", "add", "discard", "setdefault"}
)


def mutated_names(nodes: Iterable[ast.AST]) -> set[str]:
    """Names and dotted attributes whose container some call under `nodes` changes in place."""
    names: set[str] = set()
    for root in nodes:
        names |= _mutated_under(root)
    return names


@lru_cache(maxsize=65536)
def _mutated_under(root: ast.AST) -> frozenset[str]:
    names: set[str] = set()
    for node in nodes_under(root):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            parts = dotted(node.func.value) if node.func.attr in MUTATING_METHODS else None
            if parts:
                names.add(".".join(parts))
    return frozenset(names)


def mutated_name(node: ast.AST) -> str | None:
    """The variable a statement-level `xs.append(v)` (or another in-place method) changes."""
    if not isinstance(node, ast.Expr) or not isinstance(node.value, ast.Call):
        return None
    func = node.value.func
    if not isinstance(func, ast.Attribute) or func.attr not in MUTATING_METHODS:
        return None
    return func.value.id if isinstance(func.value, ast.Name) else None


@lru_cache(maxsize=256)
def called_names(tree: ast.Module) -> frozenset[str]:
    """The names a module calls (`f(...)`, `obj.f(...)`): walked once per module."""
    return frozenset(
        node.func.id if isinstance(node.func, ast.Name) else node.func.attr
        for node in nodes_under(tree)  # the module's walk, often made already by an earlier stage
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))
    )


# `multiprocessing.Process(target=f)`, `ctx.Process(target=f)` of a context, torch.multiprocessing's:
# the constructor of a process object, whose target runs in the child process.
def receiving_parameters(call: ast.Call, callee: FunctionNode, name: str) -> list[str]:
    """The parameters of `callee` that `call` binds to the plain name `name` (by position or by
    keyword; `*args` and `**kwargs` are not followed)."""
    positional = [*callee.args.posonlyargs, *callee.args.args]
    found = [
        positional[index].arg
        for index, argument in enumerate(call.args)
        if index < len(positional) and isinstance(argument, ast.Name) and argument.id == name
    ]
    keywords = {arg.arg for arg in [*positional, *callee.args.kwonlyargs]}
    found += [
        keyword.arg
        for keyword in call.keywords
        if keyword.arg in keywords and isinstance(keyword.value, ast.Name) and keyword.value.id == name
    ]
    return found


@lru_cache(maxsize=4096)
def free_names(function: FunctionNode) -> frozenset[str]:
    """Plain names `function` reads but does not bind itself (its parameters, what it assigns other
    than through `nonlocal`): what a nested function reads of the function around it."""
    args = function.args
    rest = [arg for arg in (args.vararg, args.kwarg) if arg is not None]
    parameters = {arg.arg for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, *rest]}
    shared = {name for node in nodes_under(function) if isinstance(node, ast.Nonlocal) for name in node.names}
    bound = (assigned_names(function.body) - shared) | parameters
    return frozenset(name for name in read_names(function) if "." not in name and name not in bound)


@lru_cache(maxsize=4096)
def global_names(function: FunctionNode) -> frozenset[str]:
    return frozenset(
        name for node in nodes_under(function) if isinstance(node, ast.Global) for name in node.names
    )


# Expressions whose inner calls do not run where they stand (they run when called or iterated).
_DEFERRED = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@lru_cache(maxsize=65536)
def calls_in_order(node: ast.expr) -> tuple[ast.Call, ...]:
    """Calls in evaluation order (arguments before the call), skipping lambdas and comprehensions."""
    return tuple(effect for effect in effects_in_order(node, frozenset()) if isinstance(effect, ast.Call))


@lru_cache(maxsize=65536)
def effects_in_order(node: ast.expr, properties: frozenset[str]) -> tuple[ast.Call | ast.Attribute, ...]:
    """`calls_in_order`, with the attribute reads named in `properties` (a getter may run there)
    in their place: the object before the attribute, then the read. A method called
    (`obj.name(...)`) is not a read. Cached: the interpreter asks on every path through an
    expression, and the answer is a function of the tree. Walked with a stack of its own (post
    order), so that deeply nested expressions do not exhaust Python's recursion."""
    order: list[ast.Call | ast.Attribute] = []
    # (node, whether its parts were visited): a node is emitted after its parts.
    stack: list[tuple[ast.AST, bool]] = [(node, False)]
    while stack:
        current, visited = stack.pop()
        if visited:
            order.append(current)  # type: ignore[arg-type]
            continue
        if isinstance(current, _DEFERRED):
            continue
        if isinstance(current, ast.Call) and isinstance(current.func, ast.Attribute):
            parts: list[ast.AST] = [current.func.value, *current.args, *current.keywords]
            stack.append((current, True))
        else:
            parts = child_nodes(current)
            if isinstance(current, ast.Call) or (
                isinstance(current, ast.Attribute)
                and current.attr in properties
                and isinstance(current.ctx, ast.Load)
            ):
                stack.append((current, True))
        stack.extend((part, False) for part in reversed(parts))
    return tuple(order)


# Errors that come from a rank's own data or files, and so can happen on some ranks only. Control
# flow exceptions (StopIteration), bare `except:` and `Exception` are not taken as such: they mostly
# guard code that behaves the same everywhere, and reporting them would bury real findings.
DATA_ERRORS = frozenset(
    {
        "OSError",
        "IOError",
        "FileNotFoundError",
        "PermissionError",
        "EOFError",
        "UnicodeDecodeError",
        "JSONDecodeError",
        "ValueError",
        "KeyError",
        "IndexError",
        "UnidentifiedImageError",
        "DecompressionBombError",
        "ConnectionError",
        "TimeoutError",
        "CorruptedDataError",
        # Memory runs out on one rank first: a longer sequence, a fuller cache, another process.
        "OutOfMemoryError",
        "MemoryError",
    }
)
# The text a handler checks to single out an out-of-memory RuntimeError (`"out of memory" in str(e)`).
OUT_OF_MEMORY_TEXT = re.compile(r"out\s*of\s*memory|\boom\b", re.IGNORECASE)


def catches_data_errors(handler: ast.ExceptHandler, bases: Mapping[str, Sequence[str]] = {}) -> bool:
    """The handler catches an error one rank can hit alone: a data or I/O error (or a class of the
    module derived from one: `bases` maps the module's class names to their bases' names), running
    out of memory, or a RuntimeError whose text it checks for "out of memory"."""
    if handler.type is None:
        return False
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    for item in types:
        parts = dotted(item)
        if not parts:
            continue
        if _is_data_error(parts[-1], bases, depth=0):
            return True
        if parts[-1] == "RuntimeError" and _checks_out_of_memory(handler):
            return True
    return False


def _is_data_error(name: str, bases: Mapping[str, Sequence[str]], depth: int) -> bool:
    if name in DATA_ERRORS:
        return True
    if name not in bases or depth > 8:
        return False
    return any(_is_data_error(base.rsplit(".", 1)[-1], bases, depth + 1) for base in bases[name])


def _checks_out_of_memory(handler: ast.ExceptHandler) -> bool:
    texts = (node.value for node in nodes_under(handler) if isinstance(node, ast.Constant))
    return any(isinstance(text, str) and OUT_OF_MEMORY_TEXT.search(text) for text in texts)


def class_pattern_reads(stmt: ast.Match) -> list[ast.expr]:
    """The subject's attributes the class patterns of `match` test (`case Config(rank=0):` reads
    `subject.rank`), as expressions placed at their patterns."""
    return [
        ast.copy_location(ast.Attribute(stmt.subject, attr, ast.Load()), case.pattern)
        for case in stmt.cases
        if isinstance(case.pattern, ast.MatchClass)
        for attr in case.pattern.kwd_attrs
    ]


def irrefutable(case: ast.match_case) -> bool:
    """`case _:` or `case name:` without a guard: it matches whatever no earlier case did."""
    pattern = case.pattern
    return case.guard is None and isinstance(pattern, ast.MatchAs) and pattern.pattern is None


def may_leave(body: Sequence[ast.stmt]) -> bool:
    for stmt in body:
        for node in nodes_under(stmt):
            if isinstance(node, (ast.Continue, ast.Break, ast.Return)):
                return True
    return False


def loop_variant_names(stmt: ast.For | ast.AsyncFor | ast.While) -> set[str]:
    """Names whose value may change from one iteration to the next: the loop targets and what the
    body assigns, except a name assigned once, unconditionally, from loop-invariant names and not
    read before that assignment (`buf = torch.zeros(n)`)."""
    variant = set(assigned_names([stmt.target])) if isinstance(stmt, (ast.For, ast.AsyncFor)) else set()
    stores: dict[str, int] = {}
    for part in stmt.body:
        for node in nodes_under(part):
            for name in _stored_names(node):
                stores[name] = stores.get(name, 0) + 1
    read: set[str] = set()
    for part in stmt.body:
        target = part.targets[0] if isinstance(part, ast.Assign) and len(part.targets) == 1 else None
        if isinstance(part, ast.Assign) and isinstance(target, ast.Name):
            carried = target.id in read or target.id in read_names(part.value)  # `x = x + 1`
            once = stores.get(target.id) == 1 and not carried
            if not once or mentions(part.value, variant):
                variant.add(target.id)
        else:
            variant.update(name for node in nodes_under(part) for name in _stored_names(node))
        read.update(read_names(part))
    return variant


def _stored_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return [node.id]
    if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
        parts = dotted(node) if isinstance(node, ast.Attribute) else dotted(node.value)
        return [".".join(parts)] if parts else []
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        # Dotted like an attribute: state that a helper called from the body could read.
        return [*node.names, *(f"<global>.{name}" for name in node.names)]
    return []


def read_names(node: ast.AST) -> set[str]:
    names: set[str] = set()
    for child in nodes_under(node):
        if isinstance(child, ast.Name):
            names.add(child.id)
        elif isinstance(child, ast.Attribute):
            parts = dotted(child)
            if parts:
                names.add(".".join(parts))
    return names


def mentions(node: ast.AST, names: set[str]) -> bool:
    """`node` reads one of `names`, or an attribute of one (`x` covers `x.grad`)."""
    for read in read_names(node):
        parts = read.split(".")
        if any(".".join(parts[: i + 1]) in names for i in range(len(parts))):
            return True
    return False


def lazy_initialisation(stmt: ast.If, mutable_globals: set[str]) -> str | None:
    """`if X is None:` (or `if not X:`) whose body assigns X, X a module global that functions
    rebind or an attribute of `self`: a value created on first use and cached. Its name, X."""
    test = stmt.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is):
        target = test.left if _is_none(test.comparators[0]) else None
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        target = test.operand
    else:
        target = None
    wanted = _cache_name(target, mutable_globals)
    return wanted if wanted is not None and _assigns(stmt.body, wanted) else None


def cached_return(stmt: ast.stmt, rest: Sequence[ast.stmt], mutable_globals: set[str]) -> bool:
    """`if X is not None: return X[key]` (or `if X:`) whose body ends in a `return`, before a `rest`
    of the function that assigns X, X a module global that functions rebind or an attribute of
    `self`: a value computed on the first call and returned from the cache afterwards."""
    if not isinstance(stmt, ast.If):
        return False
    test = stmt.test
    target: ast.expr | None = test
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot):
        target = test.left if _is_none(test.comparators[0]) else None
    if stmt.orelse or not stmt.body or not isinstance(stmt.body[-1], ast.Return):
        return False
    wanted = _cache_name(target, mutable_globals)
    return wanted is not None and _assigns(rest, wanted)


FILLED = "@filled"


def filled_key(name: str) -> str:
    """The path-state key that says the cache `name` (`self.x`, a global X) was filled on this path."""
    return name + FILLED


def is_filled_key(key: str) -> bool:
    return key.endswith(FILLED)


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _cache_name(target: ast.expr | None, mutable_globals: set[str]) -> str | None:
    wanted = _cached_name(target) if target is not None else None
    if wanted is None or (not wanted.startswith("self.") and wanted not in mutable_globals):
        return None
    return wanted


def _assigns(body: Sequence[ast.stmt], wanted: str) -> bool:
    return any(
        isinstance(node, ast.Assign) and any(_cached_name(t) == wanted for t in node.targets)
        for statement in body
        for node in nodes_under(statement)
    )


def _cached_name(node: ast.expr) -> str | None:
    """`X` or `self.x`: where a lazily created value is kept."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return f"self.{node.attr}"
    return None


def memo_lookup(stmt: ast.If) -> bool:
    """`if key in cache: return cache[key]` or `if key not in cache: cache[key] = ...` (also as
    the last part of an `and`: `if cache is not None and key in cache:`)."""
    test = stmt.test
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        test = test.values[-1]
    if not (
        isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.In, ast.NotIn))
    ):
        return False
    cache = test.comparators[0]
    if not isinstance(cache, (ast.Name, ast.Attribute)) or not stmt.body:
        return False
    entry = f"{ast.unparse(cache)}[{ast.unparse(test.left)}]"
    if isinstance(test.ops[0], ast.In):
        last = stmt.body[-1]
        return isinstance(last, ast.Return) and last.value is not None and ast.unparse(last.value) == entry
    return any(
        isinstance(node, ast.Assign) and any(ast.unparse(target) == entry for target in node.targets)
        for node in stmt.body
    )


def range_loop_call(stmt: ast.For | ast.AsyncFor) -> ast.Call | None:
    """The `range(...)` call of `for name in range(a[, b[, c]])` with plain positional arguments;
    None for any other loop header (the name `range` may still be rebound: the caller asks)."""
    node = stmt.iter
    if (
        isinstance(stmt, ast.For)
        and isinstance(stmt.target, ast.Name)
        and isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "range"
        and not node.keywords
        and 1 <= len(node.args) <= 3
        and not any(isinstance(a, ast.Starred) for a in node.args)
    ):
        return node
    return None


def is_attribute_of(node: ast.expr, holder: str, attribute: str) -> bool:
    """`node` is `holder.attribute`, `holder` a plain name (`self.pg`, `ws.rank`)."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attribute
        and isinstance(node.value, ast.Name)
        and node.value.id == holder
    )
