"""What the code's declarations say of a value: that it is never None.

The code is taken at its word where it declares a type, as a type checker holds it to:
- a parameter annotated `Store` (not `Optional[Store]`, no `None` default) is not None unless a
  caller passes None (`declared_entry`; `Nullness`: a value its caller declared Optional stays
  maybe-None when handed on to a parameter declared without None);
- a loop over a container declared of elements that exclude None binds no None
  (`declared_element`): a parameter annotated `Sequence[Store]`, a local annotated
  `list[Store]`, a list made from one (`xs = list(stores)`: what is appended to it later is
  checked by the type checker against the element type it was made with), a display of such
  values, `self.stores` where the class (or a base of the file) declares `stores: list[Store]`
  in its body or as `self.stores: list[Store] = ...` in a method;
- a black box's result is not None where its maker (`Atom.maker`) is a class of the run (of the
  file, or of another file, through a package's re-exports) or a function of the run declared to
  return a type that excludes None (`made_never_none`, asked only at an `is None` test).
A value tested with `is None` against such a fact takes only its non-None branch
(`group_values.none_or_not`).

What does not exclude None: `Optional[T]`, `T | None`, `Union[.., None]`, `Any`, `object`, a
type variable of the file (`T = TypeVar("T")`), an alias of the file for one of these
(`MaybeStore = Optional[Store]`), a parameter whose default is `None`. Names imported from
elsewhere are taken for the classes they almost always are (an imported alias of an Optional
type is missed: a finding lost, never one made).

In: an annotation; a function, its parameters' values and the module's tree; an iterated
expression with the frame and module model; a black box's result with the module model. Out:
booleans, and atoms marked with their `Nullness`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import replace
from functools import lru_cache
from typing import TypeGuard
from weakref import WeakKeyDictionary

from collcheck.static.loader import ClassInfo, FunctionNode, ModuleInfo, inherited
from collcheck.static.reexports import MAX_REEXPORTS
from collcheck.static.state import Frame
from collcheck.static.symbolic import LOCAL_WORLD, MEMBER, Atom, Expr, Nullness

# Annotations that admit None whatever they hold.
ADMIT_NONE = frozenset({"Any", "object", "Optional", "NoneType", "None"})
# Generic containers whose iteration yields their first type argument (a mapping yields its keys).
ITERABLES = frozenset(
    {
        "list", "List", "Sequence", "MutableSequence", "Iterable", "Iterator", "Collection",
        "set", "Set", "AbstractSet", "MutableSet", "frozenset", "FrozenSet", "deque", "Deque",
        "Generator", "Reversible", "KeysView", "ValuesView",
        "dict", "Dict", "Mapping", "MutableMapping", "OrderedDict", "defaultdict", "DefaultDict",
    }
)  # fmt: skip
TUPLES = frozenset({"tuple", "Tuple"})
UNIONS = frozenset({"Union"})
WRAPPERS = frozenset({"Annotated", "Final", "ClassVar", "Required", "NotRequired", "ReadOnly"})
# Builtins that make a container of the same elements (`list(stores)`, `sorted(stores)`).
SAME_ELEMENTS = frozenset({"list", "tuple", "sorted", "reversed", "set", "frozenset"})
MAX_DEPTH = 8  # aliases of aliases, names bound from names: bounded, cycles included
MAX_TEXT = 400  # a string annotation longer than this is not parsed


def _last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


# Per-tree and per-function memos held weakly: an lru_cache(256) keyed on trees kept other
# files' trees alive after the loader dropped them (`loader.forget_loaded`). Measured
# 2026-12-05, torch/distributed -j 2 with the whole torch tree as the project, cold: largest
# process 773 MB with it, 335 MB weakly (the base without this stage: 333 MB), and user CPU
# back from +29% to within noise (full collections no longer walk the dead trees).
_MODULE_BINDINGS: WeakKeyDictionary[ast.Module, dict[str, ast.expr | None]] = WeakKeyDictionary()
_PARAMETERS: WeakKeyDictionary[FunctionNode, dict[str, ast.arg]] = WeakKeyDictionary()
_FUNCTION_BINDINGS: WeakKeyDictionary[FunctionNode, dict[str, list[ast.expr | ast.AnnAssign | None]]] = (
    WeakKeyDictionary()
)


def _module_bindings(tree: ast.Module) -> dict[str, ast.expr | None]:
    """Names the module binds at its top level: the value of a plain one-name assignment, None
    for any other binding (a class, a function, an import, a tuple target)."""
    found = _MODULE_BINDINGS.get(tree)
    if found is None:
        found = _MODULE_BINDINGS[tree] = _bindings_of_module(tree)
    return found


def _bindings_of_module(tree: ast.Module) -> dict[str, ast.expr | None]:
    bound: dict[str, ast.expr | None] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            bound[name] = stmt.value if name not in bound else None
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            bound[stmt.target.id] = stmt.value if stmt.target.id not in bound else None
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound[stmt.name] = None
    return bound


def annotation_excludes_none(annotation: ast.expr | None, tree: ast.Module, depth: int = 0) -> bool:
    """The annotation declares a type None is no value of."""
    if annotation is None or depth > MAX_DEPTH:
        return False
    if isinstance(annotation, ast.Constant):
        if isinstance(annotation.value, str) and len(annotation.value) <= MAX_TEXT:
            parsed = _parsed_annotation(annotation.value)
            return parsed is not None and annotation_excludes_none(parsed, tree, depth + 1)
        return False  # `None` itself, or an odd constant
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return annotation_excludes_none(annotation.left, tree, depth + 1) and annotation_excludes_none(
            annotation.right, tree, depth + 1
        )
    if isinstance(annotation, ast.Subscript):
        base = _last_name(annotation.value)
        members = _type_arguments(annotation)
        if base is None or base in ADMIT_NONE:
            return False
        if base in UNIONS:
            return all(annotation_excludes_none(member, tree, depth + 1) for member in members)
        if base in WRAPPERS:
            return bool(members) and annotation_excludes_none(members[0], tree, depth + 1)
        if base == "Literal":
            return all(not (isinstance(m, ast.Constant) and m.value is None) for m in members)
        return True  # `list[T]`, `Callable[..., T]`: the container, the callable, is no None
    name = _last_name(annotation)
    if name is None or name in ADMIT_NONE:
        return False
    if isinstance(annotation, ast.Name):
        bindings = _module_bindings(tree)
        if annotation.id in bindings:
            value = bindings[annotation.id]
            if value is None:  # a class or function of the file (or bound in some other way)
                return True
            if isinstance(value, ast.Call):  # `T = TypeVar("T")`, `UserId = NewType(...)`
                return _last_name(value.func) == "NewType"
            return annotation_excludes_none(value, tree, depth + 1)  # an alias: what it names
    return True


def element_annotation(
    annotation: ast.expr | None, tree: ast.Module, depth: int = 0
) -> list[ast.expr] | None:
    """The types iterating a value of the annotated type yields (`Sequence[A]`: [A]; a
    `tuple[A, B]`: [A, B]; `Optional[list[A]]`: [A], since iterating None fails before it binds
    anything), or None when the annotation names no container collcheck knows."""
    if annotation is None or depth > MAX_DEPTH:
        return None
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        parsed = _parsed_annotation(annotation.value) if len(annotation.value) <= MAX_TEXT else None
        return element_annotation(parsed, tree, depth + 1)
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _union_elements([annotation.left, annotation.right], tree, depth)
    if isinstance(annotation, ast.Name):
        bound = _module_bindings(tree).get(annotation.id)
        return element_annotation(bound, tree, depth + 1) if bound is not None else None
    if not isinstance(annotation, ast.Subscript):
        return None
    base = _last_name(annotation.value)
    members = _type_arguments(annotation)
    if base in ("Optional", *UNIONS):
        return _union_elements(members, tree, depth)
    if base in WRAPPERS:
        return element_annotation(members[0], tree, depth + 1) if members else None
    if base in TUPLES:
        if len(members) == 2 and isinstance(members[1], ast.Constant) and members[1].value is Ellipsis:
            return [members[0]]
        return members or None
    if base in ITERABLES and members:
        return [members[0]]
    return None


def _union_elements(members: list[ast.expr], tree: ast.Module, depth: int) -> list[ast.expr] | None:
    found: list[ast.expr] = []
    for member in members:
        if isinstance(member, ast.Constant) and member.value is None:
            continue  # iterating None raises: no element comes from it
        elements = element_annotation(member, tree, depth + 1)
        if elements is None:
            return None
        found.extend(elements)
    return found or None


def _type_arguments(annotation: ast.Subscript) -> list[ast.expr]:
    index = annotation.slice
    return list(index.elts) if isinstance(index, ast.Tuple) else [index]


@lru_cache(maxsize=1024)
def _parsed_annotation(text: str) -> ast.expr | None:
    try:
        return ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None


def parameter_never_none(arg: ast.arg, default: ast.expr | None, tree: ast.Module) -> bool:
    """A parameter whose annotation excludes None and whose default is not None."""
    if isinstance(default, ast.Constant) and default.value is None:
        return False  # `store: Store = None`: the implicit Optional of older code
    return annotation_excludes_none(arg.annotation, tree)


def declared_entry(function: FunctionNode, env: dict[str, Expr], tree: ast.Module) -> dict[str, Expr]:
    """The parameters' values at entry (`env`: what callers pass, or what nothing passes), each
    unknown one (an `Atom` of undeclared nullness) marked by its declaration: `NEVER` where it
    excludes None, `MAYBE` where it admits it. A caller that passes None itself (a `Const`)
    keeps its None; a value the caller declared `MAYBE` stays so (handing an Optional value to a
    parameter declared without None is what a type checker rejects, not a fact to build on)."""
    defaults = parameter_defaults(function)
    marked = dict(env)
    for name, arg in _parameters(function).items():
        value = env.get(name)
        if not _markable(value):
            continue
        never = parameter_never_none(arg, defaults[name], tree)
        if never or arg.annotation is not None or defaults[name] is not None:
            marked[name] = replace(value, nullness=Nullness.NEVER if never else Nullness.MAYBE)
    return marked


def declared_element(element: Expr, iterated: ast.expr, frame: Frame, module: ModuleInfo) -> Expr:
    """What one iteration of a loop over `iterated` binds (`element`, in the function on top of
    the frame's stack), marked never None where the declarations say so (`for store in stores`
    with `stores: Sequence[Store]`; `for store in self.stores` with the class's `stores:
    list[Store]`)."""
    if not _markable(element) or not frame.stack:
        return element
    function = frame.stack[-1]
    declared = _declared_attribute(iterated, function, frame.class_name, module)
    if declared is not None:
        never = _all_exclude_none(element_annotation(declared, module.tree), module.tree)
    else:
        never = elements_never_none(iterated, function, module.tree)
    return replace(element, nullness=Nullness.NEVER) if never else element


def _declared_attribute(
    node: ast.expr, function: FunctionNode, class_name: str | None, module: ModuleInfo
) -> ast.expr | None:
    """The annotation the class (or a base of the file) declares for `self.name` read in one of
    its methods: `name: T` in the class body, or `self.name: T = ...` in a method."""
    positional = [*function.args.posonlyargs, *function.args.args]
    if (
        class_name is None
        or not positional
        or not isinstance(node, ast.Attribute)
        or not isinstance(node.value, ast.Name)
        or node.value.id != positional[0].arg
        or node.value.id in _function_bindings(function)
    ):
        return None
    return inherited(module, class_name, node.attr, _attribute_annotations)


def _attribute_annotations(info: ClassInfo) -> dict[str, ast.expr]:
    found: dict[str, ast.expr] = {}
    for stmt in info.node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            found.setdefault(stmt.target.id, stmt.annotation)
    for method in info.methods.values():
        positional = [*method.args.posonlyargs, *method.args.args]
        if not positional:
            continue
        for node in _own_scope(method):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Attribute)
                and isinstance(node.target.value, ast.Name)
                and node.target.value.id == positional[0].arg
            ):
                found.setdefault(node.target.attr, node.annotation)
    return found


def _all_exclude_none(elements: list[ast.expr] | None, tree: ast.Module) -> bool:
    return elements is not None and all(annotation_excludes_none(e, tree) for e in elements)


def made_never_none(value: Atom, module: ModuleInfo) -> bool:
    """The black-box call that made `value` (`Atom.maker`) never makes None: it makes an object
    of a class of the run (of the file, or of another file the run holds, through re-exports), or
    calls a function of the run declared to return a type that excludes None. Asked only where a
    test needs it (`module`: the file the test is in; its loader opens the maker's files)."""
    maker = value.maker  # what made it decides, whatever a parameter it was handed to declares
    if maker is None:
        return False
    origin: ModuleInfo | None = module
    if module.path != maker.importer:
        origin = module.loader.load(maker.importer) if module.loader is not None else None
    if origin is None:
        return False
    name = maker.qualified
    if "." not in name and (name in origin.classes or name in origin.functions):
        return _makes_no_none(origin, name)
    return _remote_makes_no_none(origin, name)


def _remote_makes_no_none(module: ModuleInfo, qualified: str, depth: int = 0) -> bool:
    """`qualified` (imported into `module`) is a class of another file of the run, or a function
    there declared to return no None; a name a package re-exports is followed to its file."""
    loader = module.loader
    if loader is None or depth > MAX_REEXPORTS:
        return False
    found = loader.project.lookup(qualified, module.path)
    if found is None or "." in found[1]:
        return False
    other = loader.load(found[0])
    if other is None:
        return False
    name = found[1]
    if name in other.classes or name in other.functions:
        return _makes_no_none(other, name)
    reexported = other.imports.lookup(name)
    if reexported is None or other is module:
        return False
    return _remote_makes_no_none(other, reexported, depth + 1)


def _makes_no_none(module: ModuleInfo, name: str) -> bool:
    if name in module.classes:
        return True  # calling a class makes one of its objects
    function = module.functions[name]
    return function.returns is not None and annotation_excludes_none(function.returns, module.tree)


def _markable(value: Expr | None) -> TypeGuard[Atom]:
    """An unknown value of undeclared nullness, not one of the atoms the analysis knows by
    identity: the rank, the world size and their like (a parameter `rank: int` bound to the
    rank), a value with known bounds."""
    return (
        isinstance(value, Atom)
        and value.nullness is Nullness.UNDECLARED
        and value.kind in ("shared", "perrank", "nondet")
        and value.lower is None
        and not value.below_world
        and value not in (LOCAL_WORLD, MEMBER)
    )


def parameter_defaults(function: FunctionNode) -> dict[str, ast.expr | None]:
    """Each parameter's default expression (None: it has none)."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults: dict[str, ast.expr | None] = {arg.arg: None for arg in positional}
    for arg, default in zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True):
        defaults[arg.arg] = default
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        defaults[arg.arg] = kw_default
    return defaults


def elements_never_none(iterated: ast.expr, function: FunctionNode, tree: ast.Module, depth: int = 0) -> bool:
    """Iterating `iterated` (an expression of `function`) binds no None, by the declarations: a
    parameter or local annotated with a container of a type that excludes None, a container
    made from one by `list`/`tuple`/`sorted`/..., a list display of such values."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(iterated, ast.Call):
        func = iterated.func
        if (
            isinstance(func, ast.Name)
            and func.id in SAME_ELEMENTS
            and func.id not in _function_bindings(function)
            and func.id not in _module_bindings(tree)
            and len(iterated.args) == 1
            and not isinstance(iterated.args[0], ast.Starred)
        ):
            return elements_never_none(iterated.args[0], function, tree, depth + 1)
        return False
    if isinstance(iterated, (ast.List, ast.Tuple, ast.Set)):
        return bool(iterated.elts) and all(
            elements_never_none(element.value, function, tree, depth + 1)
            if isinstance(element, ast.Starred)
            else _value_never_none(element, function, tree)
            for element in iterated.elts
        )
    if not isinstance(iterated, ast.Name):
        return False
    bindings = _function_bindings(function).get(iterated.id)
    parameter = _parameters(function).get(iterated.id)
    if parameter is None and not bindings:
        return False  # a global or a closure's name: bound where this function cannot see
    if parameter is not None and not _all_exclude_none(element_annotation(parameter.annotation, tree), tree):
        return False
    for binding in bindings or ():
        if isinstance(binding, ast.AnnAssign):
            if not _all_exclude_none(element_annotation(binding.annotation, tree), tree):
                return False
        elif binding is None or not elements_never_none(binding, function, tree, depth + 1):
            return False
    return True


def _value_never_none(value: ast.expr, function: FunctionNode, tree: ast.Module) -> bool:
    """An entry of a list display that is never None by what the code says: a literal other than
    None, or a parameter declared so and never rebound."""
    if isinstance(value, ast.Constant):
        return value.value is not None
    if isinstance(value, ast.Name):
        parameter = _parameters(function).get(value.id)
        if parameter is None or value.id in _function_bindings(function):
            return False
        return parameter_never_none(parameter, parameter_defaults(function).get(value.id), tree)
    return False


def _parameters(function: FunctionNode) -> dict[str, ast.arg]:
    found = _PARAMETERS.get(function)
    if found is None:
        args = function.args
        found = {arg.arg: arg for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        _PARAMETERS[function] = found
    return found


def _function_bindings(function: FunctionNode) -> dict[str, list[ast.expr | ast.AnnAssign | None]]:
    found = _FUNCTION_BINDINGS.get(function)
    if found is None:
        found = _FUNCTION_BINDINGS[function] = _bindings_of_function(function)
    return found


def _bindings_of_function(function: FunctionNode) -> dict[str, list[ast.expr | ast.AnnAssign | None]]:
    """Every binding of each name in the function's own scope: the value of a one-name
    assignment, the `AnnAssign` of an annotated one, None for any other (a loop or `with`
    target, an augmented assignment, an import, a `global` declaration, a tuple target)."""
    bindings: dict[str, list[ast.expr | ast.AnnAssign | None]] = {}
    for node in _own_scope(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                single = isinstance(target, ast.Name)
                for name in _target_names(target):
                    bindings.setdefault(name, []).append(node.value if single else None)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            bindings.setdefault(node.target.id, []).append(node)
        elif isinstance(node, (ast.AugAssign, ast.For, ast.AsyncFor)):
            for name in _target_names(node.target):
                bindings.setdefault(name, []).append(None)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            for name in _target_names(node.optional_vars):
                bindings.setdefault(name, []).append(None)
        elif isinstance(node, ast.NamedExpr):
            bindings.setdefault(node.target.id, []).append(node.value)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                bindings.setdefault(name, []).append(None)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bindings.setdefault((alias.asname or alias.name).split(".")[0], []).append(None)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bindings.setdefault(node.name, []).append(None)
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                for name in _target_names(target):
                    bindings.setdefault(name, []).append(None)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bindings.setdefault(node.name, []).append(None)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bindings.setdefault(node.rest, []).append(None)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bindings.setdefault(node.name, []).append(None)
    return bindings


def _target_names(target: ast.expr) -> Iterator[str]:
    for node in ast.walk(target):
        if isinstance(node, ast.Name):
            yield node.id


def _own_scope(function: FunctionNode) -> Iterator[ast.AST]:
    """The nodes of the function's body outside nested functions, classes and lambdas (their
    definitions themselves included: they bind their name here)."""
    stack: list[ast.AST] = list(reversed(function.body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue  # their targets are their own scope (a walrus inside binds outside: rare)
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
