"""Receivers' classes: which class of the file an object is an instance of, and which method a
call on it runs.

In: a symbolic value, a call, an annotation or a function of the module model. Out: object values
and the method a call on one of them runs.

An object of a class of the analysed file is a shared `Atom` named after its class and where it
was made: `object:<path>::<Class>@<where>` when the class is exact (`Syncer()` built here), and
`instance:<path>::<Class>@<where>` when it may be a subclass (an annotated parameter `s: Syncer`,
a factory's declared return type, an object handed to a constructor). Such values travel like any
other (assignments, arguments of inlined helpers, `self.x = ...` in `__init__`), so a receiver's
class is the class of the value it holds where the call is made. The path in the name keeps an
object of one file from being read as a class of the same name in another file: only classes of
the file whose runner reads the value are dispatched to (classes of other files are not
followed).

Dispatch: the method (or, for an attribute read, the `@property` getter: `ClassInfo.properties`)
is looked up in the class and its bases of the file (`model.inherited`).
When the object may be a subclass and a subclass of the file overrides the method, the call is
not followed: the candidates may issue different collectives, and following one would report a
divergence the other override may not have (precision first; the call stays unknown code).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from functools import lru_cache
from weakref import WeakKeyDictionary

from collcheck.static.loader import ClassInfo, FunctionNode, ModuleInfo, inherited
from collcheck.static.names import ImportTable, child_nodes, nodes_under
from collcheck.static.symbolic import Atom, Expr, Maker

EXACT = "object:"
SUBCLASS = "instance:"
FUNCTION = "function:"  # a function of the file named as a value (`apply(sync, t)` hands `sync`)
PARTIAL = "partial:"  # `functools.partial(sync, t)`: the function and arguments bound (`Partial`)
BOUND = "bound:"  # `saver.save` read as a value: a method of a class of the file and its object
# Methods of Python's containers (list, dict, set, deque) that change the container in place.
CONTAINER_MUTATORS = frozenset(
    {
        *("append", "extend", "insert", "remove", "pop", "clear"),
        *("add", "discard", "update", "setdefault", "popitem"),
        *("appendleft", "extendleft", "popleft"),
    }
)
MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})


@dataclass(frozen=True, slots=True)
class ObjectClass:
    """The class of the file an object belongs to; `exact`: not a subclass of it."""

    name: str
    exact: bool


def object_value(module: ModuleInfo, class_name: str, where: str, exact: bool) -> Atom:
    prefix = EXACT if exact else SUBCLASS
    return Atom(f"{prefix}{module.path}::{class_name}@{where}", "shared")


def object_class(module: ModuleInfo, value: Expr | None) -> ObjectClass | None:
    """The class of `module` that `value` is an object of, if it is one."""
    if not isinstance(value, Atom):
        return None
    name = value.name
    if name.startswith(EXACT):
        exact, rest = True, name[len(EXACT) :]
    elif name.startswith(SUBCLASS):
        exact, rest = False, name[len(SUBCLASS) :]
    else:
        return None
    held = rest.rpartition("@")[0]
    path, _, class_name = held.rpartition("::")
    if path != module.path or class_name not in module.classes:
        return None
    return ObjectClass(class_name, exact)


def function_value(module: ModuleInfo, name: str) -> Atom:
    return Atom(f"{FUNCTION}{module.path}::{name}", "shared")


def function_of(module: ModuleInfo, value: Expr | None) -> FunctionNode | None:
    """The function of `module` that `value` names, if it names one."""
    if not isinstance(value, Atom) or not value.name.startswith(FUNCTION):
        return None
    path, _, name = value.name[len(FUNCTION) :].rpartition("::")
    return module.functions.get(name) if path == module.path else None


def kept_function(module: ModuleInfo, class_name: str, attribute: str) -> FunctionNode | None:
    """The function of `module` that the class keeps in `self.<attribute>` (module_values.py:
    stored there, or its constructor parameter's default) when it has no method of that name:
    what `self.gather_fn(x)` runs."""
    if inherited(module, class_name, attribute, lambda info: info.methods) is not None:
        return None
    return function_of(module, inherited(module, class_name, attribute, lambda info: info.attributes))


def bound_method_value(module: ModuleInfo, value: Expr, name: str) -> Atom | None:
    """`saver.save` read without a call, when `saver` is an object of a class of `module` whose
    method `name` is known: the method and the object, to be called later by whoever receives
    it (`run_main_only(saver.save)`). None otherwise."""
    owner = object_class(module, value)
    if owner is None or not isinstance(value, Atom) or method_of(module, owner, name) is None:
        return None
    return Atom(f"{BOUND}{value.name}::{name}", "shared")


def held_function(module: ModuleInfo, value: Expr | None) -> tuple[FunctionNode, str | None] | None:
    """The function of `module` a value names and, for a bound method, the class of its object
    (None for a plain function)."""
    function = function_of(module, value)
    if function is not None:
        return function, None
    if not isinstance(value, Atom) or not value.name.startswith(BOUND):
        return None
    holder, _, name = value.name[len(BOUND) :].rpartition("::")
    owner = object_class(module, Atom(holder, "shared"))
    method = method_of(module, owner, name) if owner is not None else None
    return (method, owner.name) if method is not None and owner is not None else None


@dataclass(frozen=True, eq=False)
class Partial:
    """`functools.partial(f, a, k=b)`: the function, and placeholder argument nodes whose values
    (`values`, by the placeholder's id) are those `a` and `b` had where the partial was made."""

    function: FunctionNode
    args: tuple[ast.expr, ...]
    keywords: tuple[ast.keyword, ...]
    values: dict[int, Expr]

    def call(self, call: ast.Call) -> ast.Call:
        """`p(x)` as the call of the function it binds: `f(a, x, k=b)` (at the place of `p(x)`)."""
        bound = ast.Call(
            ast.Name(self.function.name, ast.Load()),
            [*self.args, *call.args],
            [*self.keywords, *call.keywords],
        )
        return ast.copy_location(bound, call)


MAX_PARTIALS_PER_PLACE = 16  # partials made at one place with different arguments (a loop)


def make_partial(
    module: ModuleInfo, node: ast.Call, args: list[Expr], keywords: list[Expr], partials: dict[str, Partial]
) -> Atom | None:
    """`functools.partial(f, a, k=b)` of a function of the file (`args`, `keywords`: the values of
    its arguments here): a value that a later call runs as `f(a, ..., k=b)`, kept in `partials`
    under its name."""
    function = function_of(module, args[0])
    if function is None or any(isinstance(a, ast.Starred) for a in node.args):
        return None
    values: dict[int, Expr] = {}
    placeholders: list[ast.expr] = []
    for argument, value in zip(node.args[1:], args[1:], strict=True):
        placeholder = ast.copy_location(ast.Constant(None), argument)
        values[id(placeholder)] = value
        placeholders.append(placeholder)
    bound_keywords: list[ast.keyword] = []
    for keyword, value in zip(node.keywords, keywords, strict=True):
        if keyword.arg is None:
            return None
        placeholder = ast.copy_location(ast.Constant(None), keyword.value)
        values[id(placeholder)] = value
        bound_keywords.append(ast.keyword(keyword.arg, placeholder))
    prefix = f"{PARTIAL}{module.path}::{function.name}@{node.lineno}:{node.col_offset}"
    bound = [*values.values()]
    for index in range(MAX_PARTIALS_PER_PLACE):  # the same place, other values: another partial
        name = f"{prefix}#{index}"
        if name not in partials:
            partials[name] = Partial(function, tuple(placeholders), tuple(bound_keywords), values)
            return Atom(name, "shared")
        if list(partials[name].values.values()) == bound:
            return Atom(name, "shared")
    return None


def made_object(
    module: ModuleInfo, imports: ImportTable, node: ast.Call, factories: dict[FunctionNode, str | None]
) -> Atom | None:
    """`Syncer(...)` (an object of that exact class) or `make_syncer()` of a factory of the file
    (an object of its class or a subclass); `factories` keeps what each function was found to make."""
    func = node.func
    if not isinstance(func, ast.Name):
        return None
    where = f"{node.lineno}:{node.col_offset}"
    class_name = class_named(module, imports, func)
    if class_name is not None:
        return object_value(module, class_name, where, exact=True)
    function = module.functions.get(func.id)
    if function is None or imports.lookup(func.id) is not None:
        return None
    if function not in factories:
        factories[function] = factory_class(module, module.imports, function)
    made = factories[function]
    if made is None:
        return None
    # A factory may also return None: what it declares it returns decides (declared_types.py).
    return replace(object_value(module, made, where, exact=False), maker=Maker(func.id, module.path))


def class_named(module: ModuleInfo, imports: ImportTable, node: ast.expr) -> str | None:
    """The class of the file `node` names (not shadowed by an import)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # `s: "Syncer"`
        return node.value if node.value in module.classes and imports.lookup(node.value) is None else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # `Syncer | None`
        sides = [class_named(module, imports, side) for side in (node.left, node.right)]
        named = [side for side in sides if side is not None]
        others = [s for s in (node.left, node.right) if not _is_none(s)]
        return named[0] if len(named) == 1 and len(others) == 1 else None
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Optional":
        return class_named(module, imports, node.slice)
    if isinstance(node, ast.Name) and node.id in module.classes and imports.lookup(node.id) is None:
        return node.id
    return None


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def factory_class(module: ModuleInfo, imports: ImportTable, function: FunctionNode) -> str | None:
    """The class a function of the file returns an instance of: its declared return type, or the
    one class every `return` of its own body constructs (`return Syncer(...)`)."""
    if function.returns is not None:
        return class_named(module, imports, function.returns)
    found: set[str | None] = set()
    for node in _own_nodes(function):
        if isinstance(node, ast.Return):
            value = node.value
            built = class_named(module, imports, value.func) if isinstance(value, ast.Call) else None
            found.add(built)
        elif isinstance(node, (ast.Yield, ast.YieldFrom)):
            return None
    return next(iter(found)) if len(found) == 1 else None


def _own_nodes(function: FunctionNode) -> list[ast.AST]:
    """The nodes of `function`'s body, not of the functions and classes defined inside it."""
    nodes: list[ast.AST] = []
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        nodes.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(child_nodes(node))
    return nodes


def method_of(module: ModuleInfo, owner: ObjectClass, name: str, getter: bool = False) -> FunctionNode | None:
    """The method `name` a call on an object of `owner` runs (`getter`: the `@property` getter a
    read of the attribute runs), or None (not defined in the file, or overridden by a subclass the
    object may be)."""

    def table(info: ClassInfo) -> dict[str, FunctionNode]:
        return info.properties if getter else info.methods

    found: FunctionNode | None = inherited(module, owner.name, name, table)
    if found is None or owner.exact:
        return found
    for other, info in module.classes.items():
        overridden = name in info.methods or name in info.properties
        if other != owner.name and overridden and _derives_from(module, other, owner.name):
            return None
    return found


def call_method(module: ModuleInfo, owner: ObjectClass, module_bases: frozenset[str]) -> FunctionNode | None:
    """What calling the object itself runs (`model(x)`): its `__call__`, or the `forward` of a
    torch module (`module_bases`: the framework classes the class derives from)."""
    found = method_of(module, owner, "__call__")
    if found is not None:
        return found
    if module_bases & MODULE_BASES:
        return method_of(module, owner, "forward")
    return None


def _derives_from(module: ModuleInfo, class_name: str, base: str, depth: int = 0) -> bool:
    info = module.classes.get(class_name)
    if info is None or depth > 16:
        return False
    return base in info.bases or any(_derives_from(module, b, base, depth + 1) for b in info.bases)


def filled_by_the_object(module: ModuleInfo, class_name: str) -> frozenset[str]:
    """The attributes of the class's objects that its methods (and those of its bases of the file)
    store only where they take no argument but the receiver (`__init__` aside, which a summary
    never runs): a getter's lazy fill (`if self._group is None: self._group = WORLD`) comes from
    the object and the module, never from a call's arguments. An attribute a method with
    parameters stores (`if group is not None: self._group = group`) may hold the caller's group
    after the call: not one the object keeps."""
    stored: set[str] = set()
    from_arguments: set[str] = set()
    seen: set[str] = set()
    pending = [class_name]
    while pending:
        info = module.classes.get(pending.pop())
        if info is None or info.node.name in seen:
            continue
        seen.add(info.node.name)
        pending.extend(info.bases)
        for method in (*info.methods.values(), *info.properties.values()):
            if method.name == "__init__":
                continue
            attributes = _stored_on_receiver(method)
            stored |= attributes
            if _takes_arguments(method):
                from_arguments |= attributes
    return frozenset(stored - from_arguments)


def _stored_on_receiver(method: FunctionNode) -> set[str]:
    """`X` of every `self.X = ...` (`+=`, annotated) in the method, its first parameter `self`."""
    positional = [*method.args.posonlyargs, *method.args.args]
    if not positional:
        return set()
    receiver = positional[0].arg
    return {
        node.attr
        for node in ast.walk(method)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == receiver
    }


def _takes_arguments(method: FunctionNode) -> bool:
    """Anything besides the receiver (`self`; a `staticmethod`'s every parameter counts)."""
    args = method.args
    positional = len(args.posonlyargs) + len(args.args)
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in method.decorator_list)
    return positional > (0 if static else 1) or bool(args.kwonlyargs or args.vararg or args.kwarg)


@lru_cache(maxsize=4096)
def writes_own_state(function: FunctionNode) -> bool:
    """The method stores an attribute of its first parameter (`self.seen = True`, `self.n += 1`)."""
    args = [*function.args.posonlyargs, *function.args.args]
    if not args:
        return False
    first = args[0].arg
    for node in _own_nodes(function):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            stored = node.value
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            stored = node.value.value if isinstance(node.value, ast.Attribute) else node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            # `self.pending.append(x)` (a container in an attribute changed in place)
            holder = node.func.value
            stored = holder.value if isinstance(holder, ast.Attribute) else holder
            if not isinstance(holder, ast.Attribute) or node.func.attr not in CONTAINER_MUTATORS:
                continue
        else:
            continue
        if isinstance(stored, ast.Name) and stored.id == first:
            return True
    return False


def own_attributes_read(function: FunctionNode) -> frozenset[str]:
    """The attributes of its first parameter the method reads (`self.pp_rank`)."""
    return _first_parameter_attributes(function, ast.Load)


# ----------------------------------------------------------------------------- calls of the file

MAX_SITES = 16  # calls of one class or function looked at; more: not followed (a library's API)
CallSite = tuple[ast.Call, "FunctionNode | None"]  # a call, and the function it is made in
_CALL_SITES: WeakKeyDictionary[ModuleInfo, dict[str, list[CallSite]]] = WeakKeyDictionary()


def call_sites(module: ModuleInfo) -> dict[str, list[CallSite]]:
    """The calls of the file's own classes and functions by their plain name (`Stage(...)`,
    `finish(saver, t)`), with the function each is made in; found once per module model."""
    found = _CALL_SITES.get(module)
    if found is None:
        found = _CALL_SITES[module] = {}
        scopes: list[tuple[ast.AST, FunctionNode | None]] = []
        for node in module.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                scopes.append((node, node))
            elif isinstance(node, ast.ClassDef) and node.name in module.classes:
                scopes.extend((m, m) for m in module.classes[node.name].methods.values())
            else:
                scopes.append((node, None))
        for scope, function in scopes:
            for call in nodes_under(scope):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Name)
                    and (call.func.id in module.classes or call.func.id in module.functions)
                ):
                    found.setdefault(call.func.id, []).append((call, function))
    return found


def passed_argument(call: ast.Call, params: list[str], parameter: str) -> ast.expr | None:
    """The argument a call passes for `parameter` (None: not passed, or not known: `*args`)."""
    for keyword in call.keywords:
        if keyword.arg == parameter:
            return keyword.value
        if keyword.arg is None:
            return None
    for index, argument in enumerate(call.args):
        if isinstance(argument, ast.Starred):
            return None
        if index < len(params) and params[index] == parameter:
            return argument
    return None


def bound_once(function: FunctionNode | None, name: str) -> ast.expr | None:
    """The value of the one plain assignment `name = value` in `function`, if there is one."""
    if function is None:
        return None
    bound = [
        n.value
        for n in nodes_under(function)
        if isinstance(n, ast.Assign)
        and len(n.targets) == 1
        and isinstance(n.targets[0], ast.Name)
        and n.targets[0].id == name
    ]
    return bound[0] if len(bound) == 1 else None


def passed_object(module: ModuleInfo, function: FunctionNode, parameter: str) -> Atom | None:
    """An object of the class every caller in the file passes for `parameter` (`passed_class`)."""
    owner = passed_class(module, module.imports, function, parameter)
    return object_value(module, owner, f"param:{parameter}", exact=False) if owner else None


def passed_class(
    module: ModuleInfo, imports: ImportTable, function: FunctionNode, parameter: str
) -> str | None:
    """The class of the file every call of `function` in the file passes an object of for
    `parameter` (`finish(Saver(), t)`, or a name bound once to `Saver(...)` where it is called);
    None when the function is not called by name in the file, or its callers disagree. Asked only
    for a parameter the function calls a method of (or calls)."""
    if module.functions.get(function.name) is not function or parameter not in _receivers(function):
        return None
    params = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    sites = call_sites(module).get(function.name, [])
    if not sites or len(sites) > MAX_SITES:
        return None
    found: set[str | None] = set()
    for call, caller in sites:
        argument = passed_argument(call, params, parameter)
        if isinstance(argument, ast.Name):
            argument = bound_once(caller, argument.id)
        built = argument.func if isinstance(argument, ast.Call) else None
        found.add(class_named(module, imports, built) if built is not None else None)
    return next(iter(found)) if len(found) == 1 else None


_CLASS_NAMES: WeakKeyDictionary[ModuleInfo, dict[str, tuple[frozenset[str], frozenset[str]]]] = (
    WeakKeyDictionary()
)
MIN_USED_ATTRIBUTES = 2  # a parameter read for one attribute only says too little of its class


def _fitting_classes(module: ModuleInfo, called: frozenset[str], used: frozenset[str]) -> list[str]:
    """The classes of the file that have every method `called` and every attribute `used`."""
    known = _CLASS_NAMES.get(module)
    if known is None:
        known = _CLASS_NAMES[module] = {
            name: (_class_methods(module, name), _class_names(module, name)) for name in module.classes
        }
    return [name for name, (methods, names) in known.items() if called <= methods and used <= names]


def used_object(module: ModuleInfo, function: FunctionNode, parameter: str) -> Atom | None:
    """An object of the one class of the file that has every attribute `function` uses of its
    untyped `parameter` (`def finish(saver, t): saver.flush(t); saver.close()`), inferred from
    use: at least two attributes, one of them a method it calls; None when no class or several fit."""
    used, called = _attributes_used(function).get(parameter, (frozenset(), frozenset()))
    if len(used) < MIN_USED_ATTRIBUTES or not called:
        return None
    fitting = _fitting_classes(module, called, used)
    if len(fitting) != 1:
        return None
    return object_value(module, fitting[0], f"used:{parameter}", exact=False)


def used_attribute_object(module: ModuleInfo, owner: str, attribute: str) -> Atom | None:
    """An object of the one class of the file that has every attribute the methods of `owner` use
    of `self.<attribute>` (`used_object`'s rule, for an object handed to a constructor the file
    never calls). One method called alone is enough when one class of the file has it, it is no
    dunder, and every call of it on the attribute passes what its signature takes
    (`self.saver.save(epoch, self.model)` of `def save(self, epoch, model)`)."""
    info = module.classes.get(owner)
    if info is None:
        return None
    uses = _attribute_calls(info.node, attribute)
    if uses is None:
        return None
    used, calls = uses
    called = frozenset(call.func.attr for call in calls if isinstance(call.func, ast.Attribute))
    if not called or (len(used) < MIN_USED_ATTRIBUTES and any(n.startswith("__") for n in called)):
        return None
    fitting = _fitting_classes(module, called, used)
    if len(fitting) != 1:
        return None
    if len(used) < MIN_USED_ATTRIBUTES:
        method = inherited(module, fitting[0], next(iter(called)), lambda info: info.methods)
        if method is None or not all(_fits_signature(call, method) for call in calls):
            return None
    return object_value(module, fitting[0], f"used:self.{attribute}", exact=False)


def _attribute_calls(owner: ast.ClassDef, attribute: str) -> tuple[frozenset[str], list[ast.Call]] | None:
    """The names the class's methods use on `self.<attribute>` and their calls of its methods;
    None when the attribute is read whole anywhere but as a receiver or in a test against None
    (handed on, called, stored elsewhere: more than these uses say what it is)."""
    used: set[str] = set()
    calls: list[ast.Call] = []
    for method in owner.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        arguments = [*method.args.posonlyargs, *method.args.args]
        if not arguments:
            continue
        first = arguments[0].arg
        reads = [
            node
            for node in nodes_under(method)
            if isinstance(node, ast.Attribute)
            and node.attr == attribute
            and isinstance(node.value, ast.Name)
            and node.value.id == first
            and isinstance(node.ctx, ast.Load)
        ]
        if not reads:
            continue  # most methods never read it: their parents are not needed
        parents = _parents(method)
        for node in reads:
            parent = parents.get(node)
            if isinstance(parent, ast.Attribute):
                used.add(parent.attr)
                call = parents.get(parent)
                if isinstance(call, ast.Call) and call.func is parent:
                    calls.append(call)
            elif not (isinstance(parent, ast.Compare) and _against_none(parent)):
                return None
    return frozenset(used), calls


def _parents(function: FunctionNode) -> dict[ast.AST, ast.AST]:
    """Each node under `function` (but itself) -> the node that holds it."""
    parents: dict[ast.AST, ast.AST] = {}
    for node in nodes_under(function):
        for child in child_nodes(node):
            parents[child] = node
    return parents


def _against_none(compare: ast.Compare) -> bool:
    return all(isinstance(op, (ast.Is, ast.IsNot)) for op in compare.ops) and any(
        isinstance(side, ast.Constant) and side.value is None for side in compare.comparators
    )


def _fits_signature(call: ast.Call, method: FunctionNode) -> bool:
    """The call passes what the method takes (its object aside): enough positional arguments for
    the parameters without defaults, no more than it has, and keywords it names."""
    arguments = method.args
    positional = [a.arg for a in [*arguments.posonlyargs, *arguments.args]][1:]
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return False
    keywords = {k.arg for k in call.keywords}
    if len(call.args) > len(positional) and arguments.vararg is None:
        return False
    named = set(positional[len(call.args) :]) | {a.arg for a in arguments.kwonlyargs}
    if not keywords <= named and arguments.kwarg is None:
        return False
    required = positional[: len(positional) - len(arguments.defaults)]
    return all(index < len(call.args) or name in keywords for index, name in enumerate(required))


@lru_cache(maxsize=4096)
def _attributes_used(function: FunctionNode) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Per plain name of the function: the attributes read or called on it, and those called."""
    used: dict[str, set[str]] = {}
    called: dict[str, set[str]] = {}
    for node in _own_nodes(function):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            used.setdefault(node.value.id, set()).add(node.attr)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            holder = node.func.value
            if isinstance(holder, ast.Name):
                called.setdefault(holder.id, set()).add(node.func.attr)
    return {name: (frozenset(attrs), frozenset(called.get(name, ()))) for name, attrs in used.items()}


def _class_methods(module: ModuleInfo, class_name: str, depth: int = 0) -> frozenset[str]:
    info = module.classes.get(class_name)
    if info is None or depth > 16:
        return frozenset()
    inherited_names = (_class_methods(module, base, depth + 1) for base in info.bases)
    return frozenset(info.methods).union(*inherited_names)


def _class_names(module: ModuleInfo, class_name: str, depth: int = 0) -> frozenset[str]:
    """Everything an object of the class has by the file's text: methods, getters, class-level
    names and the attributes its methods store on `self`, its bases of the file included."""
    info = module.classes.get(class_name)
    if info is None or depth > 16:
        return frozenset()
    names = set(info.methods) | set(info.properties) | set(info.attributes)
    for item in info.node.body:
        targets = (
            item.targets
            if isinstance(item, ast.Assign)
            else [item.target]
            if isinstance(item, ast.AnnAssign)
            else []
        )
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    for method in info.methods.values():
        names.update(_stored_on_first(method))
    inherited_names = (_class_names(module, base, depth + 1) for base in info.bases)
    return frozenset(names).union(*inherited_names)


def _stored_on_first(function: FunctionNode) -> frozenset[str]:
    return _first_parameter_attributes(function, ast.Store)


@lru_cache(maxsize=8192)
def _first_parameter_attributes(function: FunctionNode, context: type[ast.expr_context]) -> frozenset[str]:
    """The attributes of the function's first parameter (`self.x`) it reads (`ast.Load`) or
    stores (`ast.Store`), in its own body."""
    args = [*function.args.posonlyargs, *function.args.args]
    if not args:
        return frozenset()
    first = args[0].arg
    return frozenset(
        node.attr
        for node in _own_nodes(function)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, context)
        and isinstance(node.value, ast.Name)
        and node.value.id == first
    )


@lru_cache(maxsize=4096)
def _receivers(function: FunctionNode) -> frozenset[str]:
    """Names the function calls methods of, or calls (`s.push(t)`, `fn(t)`)."""
    names: set[str] = set()
    for node in nodes_under(function):
        if isinstance(node, ast.Call):
            func = node.func.value if isinstance(node.func, ast.Attribute) else node.func
            if isinstance(func, ast.Name):
                names.add(func.id)
    return frozenset(names)
