"""What a group or object expression of a file is, read without running the code.

In: a module's tree, its import table and the catalog. Out: `SessionModel`, which answers for the
background-session walker (`async_sessions`): the `Value` an expression holds where it can be
told from the source alone (the default group, a group one factory always returns, a group made
at one site, an object of a class of the file), the value an object's attribute holds by every
assignment of it in its class (its constructor's parameters read at every construction of the
class in the file), and which method a call on an object of the file runs.

A group is identified by a `GroupKey`: two keys that are equal and not `UNKNOWN` name one group.
Nothing here is guessed from a variable's name: a group is the same when the same factory, the
same storage or the same default produces it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from enum import Enum

from collcheck.catalog import Catalog
from collcheck.static.names import ImportTable, qualified_name, source_text
from collcheck.static.syntax import is_attribute_of

MAX_DEPTH = 4  # construction sites followed through constructors' parameters
CACHING_DECORATORS = frozenset({"functools.cache", "functools.lru_cache"})


class GroupKind(Enum):
    DEFAULT = "default"  # the default (world) group
    NAMED = "named"  # one group however often obtained: a memoized factory, a catalogued accessor
    FRESH = "fresh"  # made by one execution of a group-creating call
    PLACE = "place"  # whatever one variable or attribute holds, read while not reassigned
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class GroupKey:
    kind: GroupKind
    name: str = ""

    def same(self, other: GroupKey) -> bool:
        """Both name one group (an unknown group is the same as nothing)."""
        return self.kind is not GroupKind.UNKNOWN and self == other


UNKNOWN_GROUP = GroupKey(GroupKind.UNKNOWN)
DEFAULT_GROUP = GroupKey(GroupKind.DEFAULT)


@dataclass(frozen=True)
class Obj:
    """An object of a class of the file: `path` says which one (where it is held), `exact` that
    its class is not a subclass."""

    path: str
    cls: str
    exact: bool


@dataclass(frozen=True)
class Value:
    group: GroupKey = UNKNOWN_GROUP  # the group it is, if used as one
    sessions: frozenset[int] = frozenset()  # the background sessions whose handle it may be
    obj: Obj | None = None
    is_none: bool = False
    present: bool = False  # known to hold an object (not None): made here, or tested so


NONE_VALUE = Value(group=DEFAULT_GROUP, is_none=True)
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def decorator_names(function: FunctionNode, imports: ImportTable) -> set[str]:
    names: set[str] = set()
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        names.add(qualified_name(target, imports) or source_text(target))
    return names


def parameter_names(function: FunctionNode) -> list[str]:
    arguments = function.args
    return [a.arg for a in (*arguments.posonlyargs, *arguments.args)]


class SessionModel:
    """The classes, functions and group factories of one file, and context-free values."""

    def __init__(self, tree: ast.Module, imports: ImportTable, catalog: Catalog) -> None:
        self.imports, self.catalog = imports, catalog
        self.functions: dict[str, FunctionNode] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.module_names: set[str] = set()
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                self.classes[stmt.name] = stmt
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                self.module_names.update(t.id for t in targets if isinstance(t, ast.Name))
        self.owner: dict[FunctionNode, str] = {}  # method -> its class
        for name, cls in self.classes.items():
            for stmt in cls.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.owner[stmt] = name
        self.factories = {name: key for name, f in self.functions.items() if (key := self._factory_key(f))}
        self.constructions: dict[str, list[tuple[ast.Call, FunctionNode | None]]] = {}
        self._index_constructions(tree)
        self._attributes: dict[tuple[str, str, str], Value | None] = {}

    # --- functions and methods -------------------------------------------------------------
    def methods(self, cls: str) -> dict[str, FunctionNode]:
        """The methods of `cls` and of its bases in the file (the class's own first)."""
        found: dict[str, FunctionNode] = {}
        for name in self._lineage(cls):
            for stmt in self.classes[name].body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.setdefault(stmt.name, stmt)
        return found

    def method(self, obj: Obj, name: str) -> FunctionNode | None:
        """The method `obj.name()` runs; None where a subclass of the file overrides it and the
        object may be one (the candidates may differ)."""
        found = self.methods(obj.cls).get(name)
        if found is None or obj.exact:
            return found
        for other in self.classes:
            if other != obj.cls and obj.cls in self._lineage(other) and name in self._own(other):
                return None
        return found

    def is_super(self, node: ast.expr, function: FunctionNode) -> bool:
        """`super()` or `super(Class, self)` in a method of the file."""
        return (
            function in self.owner
            and isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "super"
            and "super" not in self.functions
        )

    def base_method(self, method: FunctionNode, name: str) -> FunctionNode | None:
        """The method `super().name()` runs in `method`: the first base of the file along single
        inheritance that defines it; None where a class on the way has several bases."""
        cls = self.classes[self.owner[method]]
        for _ in range(16):  # a cycle of bases (not valid Python) ends too
            base = cls.bases[0] if len(cls.bases) == 1 else None
            if not (isinstance(base, ast.Name) and base.id in self.classes):
                return None
            cls = self.classes[base.id]
            own = {s.name: s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
            if name in own:
                return own[name]
        return None

    def kind_of(self, function: FunctionNode) -> str:
        """`static`, `class` or `instance` for a method; `function` otherwise."""
        if function not in self.owner:
            return "function"
        decorators = {source_text(d) for d in function.decorator_list}
        if "staticmethod" in decorators:
            return "static"
        return "class" if "classmethod" in decorators else "instance"

    def annotated_class(self, annotation: ast.expr | None) -> str | None:
        if annotation is None:
            return None
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            text = annotation.value
        else:
            text = source_text(annotation)
        for part in text.replace("|", " ").replace("[", " ").replace("]", " ").replace(",", " ").split():
            if part in self.classes:
                return part if part == text.strip() or "Optional" in text or "None" in text else None
        return None

    def _own(self, cls: str) -> set[str]:
        return {
            s.name for s in self.classes[cls].body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
        }

    def _lineage(self, cls: str) -> list[str]:
        order: list[str] = []
        todo = [cls]
        while todo and len(order) < 16:
            name = todo.pop(0)
            if name in self.classes and name not in order:
                order.append(name)
                todo.extend(b.id for b in self.classes[name].bases if isinstance(b, ast.Name))
        return order

    # --- context-free values ---------------------------------------------------------------
    def pure(self, node: ast.expr, function: FunctionNode | None, owner: str, depth: int = 0) -> Value | None:
        """The value of `node` in `function` wherever it runs, or None where the source alone
        does not tell. `owner` is the path of the object whose attribute is being read."""
        if isinstance(node, ast.Constant) and node.value is None:
            return NONE_VALUE
        known = self.known_call(node) if isinstance(node, ast.Call) else self.default_name(node)
        if known is not None:
            return known
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in self.classes:
                return Value(obj=Obj(owner, node.func.id, exact=True), present=True)
            if self._creates_group(node):
                key = GroupKey(GroupKind.FRESH, f"{node.lineno}:{node.col_offset}@{owner}")
                return Value(group=key, present=True)
            return None
        if isinstance(node, ast.Name) and function is not None and depth < MAX_DEPTH:
            return self._parameter(function, node.id, owner, depth)
        return None

    def known_call(self, node: ast.Call) -> Value | None:
        """A call that returns one group however often it is made (the catalog's accessors, a
        memoized factory of the file) or the default group."""
        name = qualified_name(node.func, self.imports)
        if name in self.catalog.default_groups:
            return Value(group=DEFAULT_GROUP, present=True)
        if name is not None and name in self.catalog.groups:
            arguments = ", ".join(source_text(a) for a in (*node.args, *node.keywords))
            return Value(
                group=GroupKey(GroupKind.NAMED, f"{self.catalog.groups[name]}({arguments})"), present=True
            )
        if isinstance(node.func, ast.Name) and node.func.id in self.factories:
            return Value(group=self.factories[node.func.id], present=True)
        return None

    def default_name(self, node: ast.expr) -> Value | None:
        if (
            isinstance(node, ast.Attribute)
            and qualified_name(node, self.imports) in self.catalog.default_groups
        ):
            return Value(group=DEFAULT_GROUP)
        return None

    def _creates_group(self, node: ast.Call) -> bool:
        spec = self.catalog.functions.get(qualified_name(node.func, self.imports) or "")
        return spec is not None and spec.kind == "group_create"

    def attribute(self, obj: Obj, name: str) -> Value | None:
        """What `obj.name` holds by every assignment of it in its class (and bases of the file),
        a `None` placeholder set aside; None when they disagree or one cannot be told."""
        key = (obj.cls, name, obj.path)
        if key not in self._attributes:
            self._attributes[key] = None  # a cycle through the constructors is unknown
            self._attributes[key] = self._attribute(obj, name)
        return self._attributes[key]

    def _attribute(self, obj: Obj, name: str) -> Value | None:
        values: list[Value | None] = []
        owner = f"{obj.path}.{name}"
        for cls in self._lineage(obj.cls):
            for stmt in self.classes[cls].body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                    if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                        values.append(self.pure(stmt.value, None, owner))
                elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    values.extend(self._stored(stmt, name, owner))
        definite = [v for v in values if v is None or not v.is_none] or values
        if not definite or any(v is None for v in definite):
            return None
        first = definite[0]
        return first if all(v == first for v in definite) else None

    def _stored(self, method: FunctionNode, name: str, owner: str) -> list[Value | None]:
        params = parameter_names(method)
        if not params or self.kind_of(method) == "static":
            return []
        receiver = params[0]
        found: list[Value | None] = []
        for node in ast.walk(method):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Tuple) and any(
                        is_attribute_of(e, receiver, name) for e in target.elts
                    ):
                        found.append(None)
                    elif is_attribute_of(target, receiver, name):
                        aug = isinstance(node, ast.AugAssign)
                        found.append(None if aug else self.pure(node.value, method, owner))
        return found

    def _parameter(self, function: FunctionNode, name: str, owner: str, depth: int) -> Value | None:
        """A constructor's parameter: what every construction of its class in the file passes."""
        cls = self.owner.get(function)
        params = parameter_names(function)
        if cls is None or function.name != "__init__" or name not in params[1:]:
            return None
        sites = self.constructions.get(cls, [])
        if not sites or len(sites) > 16:
            return None
        values = [self._passed(call, caller, function, name, owner, depth) for call, caller in sites]
        first = values[0]
        return first if first is not None and all(v == first for v in values) else None

    def _passed(
        self,
        call: ast.Call,
        caller: FunctionNode | None,
        init: FunctionNode,
        name: str,
        owner: str,
        depth: int,
    ) -> Value | None:
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return None
        position = parameter_names(init).index(name) - 1
        for keyword in call.keywords:
            if keyword.arg == name:
                return self.pure(keyword.value, caller, owner, depth + 1)
        if position < len(call.args):
            return self.pure(call.args[position], caller, owner, depth + 1)
        default = default_of(init, name)
        return self.pure(default, None, owner, depth + 1) if default is not None else None

    def _index_constructions(self, tree: ast.Module) -> None:
        callers: list[tuple[ast.AST, FunctionNode | None]] = [(tree, None)]
        callers.extend(
            (f, f) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        )
        for root, caller in callers:
            for node in _own_nodes(root):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in self.classes
                ):
                    self.constructions.setdefault(node.func.id, []).append((node, caller))

    def _factory_key(self, function: FunctionNode) -> GroupKey | None:
        """A function that returns the same group on every call: one that returns a global it
        fills (`global G; if G is None: G = new_group(); return G`), or a cached one without
        parameters."""
        if (
            not function.args.args
            and not function.args.posonlyargs
            and CACHING_DECORATORS & decorator_names(function, self.imports)
        ):
            return GroupKey(GroupKind.NAMED, f"cached {function.name}")
        declared = {n for s in ast.walk(function) if isinstance(s, ast.Global) for n in s.names}
        returns = [r for r in ast.walk(function) if isinstance(r, ast.Return)]
        values = {r.value.id if isinstance(r.value, ast.Name) else None for r in returns}
        if len(values) == 1 and (only := values.pop()) is not None and only in declared:
            return GroupKey(GroupKind.NAMED, f"global {only}")
        return None


def default_of(function: FunctionNode, name: str) -> ast.expr | None:
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    offset = len(positional) - len(arguments.defaults)
    for index, argument in enumerate(positional):
        if argument.arg == name:
            return arguments.defaults[index - offset] if index >= offset else None
    for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True):
        if argument.arg == name:
            return default
    return None


def _own_nodes(root: ast.AST) -> list[ast.AST]:
    """The nodes of `root` outside the functions nested in it."""
    found: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(root))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        found.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return found


@dataclass(frozen=True)
class BranchTest:
    """A branch's test of one variable or attribute, `subject`: what holds of it on each side, as
    (how it is tested: `""` for truth, `"== X"` against a constant or dotted name `X`, whether
    that holds)."""

    subject: ast.expr
    on_then: tuple[tuple[str, bool], ...]
    on_else: tuple[tuple[str, bool], ...]


def branch_test(test: ast.expr) -> BranchTest | None:
    """`x`, `x == X`, `x is not X`, `x in (X, Y)`: what each side of the branch knows of `x`."""
    if isinstance(test, (ast.Name, ast.Attribute)):
        return BranchTest(test, (("", True),), (("", False),))
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    operator, compared, subject = test.ops[0], test.comparators[0], test.left
    if not isinstance(subject, (ast.Name, ast.Attribute)):
        return None
    named = (ast.Constant, ast.Attribute, ast.Name)
    if isinstance(operator, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)) and isinstance(compared, named):
        holds = isinstance(operator, (ast.Eq, ast.Is))
        key = f"== {source_text(compared)}"
        return BranchTest(subject, ((key, holds),), ((key, not holds),))
    choices = compared.elts if isinstance(compared, (ast.Tuple, ast.List, ast.Set)) else []
    if (
        not isinstance(operator, (ast.In, ast.NotIn))
        or not choices
        or not all(isinstance(c, named) for c in choices)
    ):
        return None
    members = [f"== {source_text(c)}" for c in choices]
    inside = ((members[0], True),) if len(members) == 1 else ()  # one of them: which, if only one
    outside = tuple((m, False) for m in members)  # none of them
    if isinstance(operator, ast.In):
        return BranchTest(subject, inside, outside)
    return BranchTest(subject, outside, inside)


def none_test(test: ast.expr) -> tuple[ast.expr | None, bool]:
    """(the expression tested against None, whether it is None when the test holds)."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and is_none(test.comparators[0]):
        left = test.left.target if isinstance(test.left, ast.NamedExpr) else test.left
        if isinstance(test.ops[0], ast.Is):
            return left, True
        if isinstance(test.ops[0], ast.IsNot):
            return left, False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner, when = none_test(test.operand)
        return (inner, not when) if inner is not None else (test.operand, True)
    if isinstance(test, (ast.Name, ast.Attribute)):
        return test, False
    if isinstance(test, ast.NamedExpr):  # `if (handle := ...):` tests the target
        return test.target, False
    return None, False


def is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def nested_functions(function: FunctionNode) -> dict[str, FunctionNode]:
    """The functions defined inside `function` (at any depth), by name; the first one wins."""
    found: dict[str, FunctionNode] = {}
    for node in ast.walk(function):
        if node is not function and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.setdefault(node.name, node)
    return found


def other_than(value: ast.expr, quiet_text: str) -> bool:
    """`value` is written as a value other than `quiet_text`: another constant, or another member
    of the same enumeration (`Kind.THREAD` for `Kind.PROCESS`). A variable may hold either."""
    text = source_text(value)
    if text == quiet_text or text.endswith(f".{quiet_text}"):
        return False
    if isinstance(value, ast.Constant):
        return True
    owner = quiet_text.rpartition(".")[0]
    return bool(owner) and isinstance(value, ast.Attribute) and source_text(value.value).endswith(owner)


def runs_once_at_least(loop: ast.For | ast.AsyncFor | ast.While) -> bool:
    """A `for` over `range` of constants that is not empty, or over a literal list or tuple with
    elements: its body runs before the loop can end (`for attempt in range(3):`)."""
    if not isinstance(loop, ast.For):
        return False
    if isinstance(loop.iter, (ast.List, ast.Tuple)):
        return bool(loop.iter.elts) and not any(isinstance(e, ast.Starred) for e in loop.iter.elts)
    call = loop.iter
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "range"):
        return False
    bounds = [a.value for a in call.args if isinstance(a, ast.Constant) and type(a.value) is int]
    if call.keywords or len(bounds) != len(call.args) or len(bounds) not in (1, 2):
        return False
    return bounds[-1] > (bounds[0] if len(bounds) == 2 else 0)


def starts_a_session(tree: ast.Module, imports: ImportTable, catalog: Catalog) -> bool:
    """The file calls a call that starts a session (the walk is not worth it otherwise)."""
    return any(
        isinstance(node, ast.Call) and qualified_name(node.func, imports) in catalog.sessions
        for node in ast.walk(tree)
    )


def session_roots(tree: ast.Module) -> list[tuple[FunctionNode, str, str | None]]:
    """The file's functions and methods, each with its qualified name and its class."""
    found: list[tuple[FunctionNode, str, str | None]] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append((stmt, stmt.name, None))
        elif isinstance(stmt, ast.ClassDef):
            found.extend(
                (item, f"{stmt.name}.{item.name}", stmt.name)
                for item in stmt.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            )
    return found
