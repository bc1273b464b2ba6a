"""A framework object's class inferred from the names used on it.

`engine = build_engine(cfg)` (a project's own factory, or one of a file the run does not follow)
leaves `engine` of unknown class; when what the function does with it (`engine.global_rank`,
`engine.backward(loss)`, `engine.save_checkpoint(d)`) fits exactly one framework class the
catalogs name as a receiver, the object is taken to be one, and a finding on it says the class was
inferred.

In: a function and a plain name in it (an untyped parameter, or a local bound once to the result
of an unknown call), and the catalog. Out: a `type:` value of the catalogued class, marked
`@inferred:` (`inferred_class` reads the mark back for messages), or None.

The member names of the classes come from the frameworks' own source, not typed by hand:
`rules/class_members.json`, made by `bench/class_members.py` (methods, properties, class-level
names, attributes the methods store on `self`, their bases' included). A class fits when every
name used on the object is one of its members; precision first, the inference is made only when
- at least `MIN_DISTINCTIVE` of the used names are distinctive, one of them a method called (a
  namespace read for `output_dir` and `local_rank` fits `TrainingArguments` too), or the object
  follows a training engine's protocol (`ENGINE_PROTOCOL`: called, and its `backward` called) in
  a file that imports the class's framework: not members of
  `torch.nn.Module` nor dunders (every module has `to`, `cuda`, `state_dict`, `eval`), and
  members of at most `MAX_SHARING` of the known classes (`world_size` and `device` are
  everywhere). The known classes include torch's common ones no catalog names as a receiver
  (`ProcessGroup`, `Tensor`, `Optimizer`): never inferred, they keep an object used as one of
  them from being taken for a framework class that shares the names;
- exactly one class fits, up to inheritance (a subclass fits wherever its base does: the base, the
  catalogued one, is taken when it fits and every other fitting class derives from it);
- the class is a receiver of some catalog method (a class only named as a value's type,
  `TrainingArguments`, is not inferred: an argparse namespace may fit it) and forwards no unknown
  attribute (`__getattr__` of its own: any use fits it);
- a file that imports a known framework (`deepspeed`; torch aside) imports the inferred class's:
  an object of a deepspeed file used for `dispatch`, `combine` and `destroy` is no vLLM
  coordinator, it is of some class no catalog knows;
- the name is bound once in the function: a parameter never rebound, or a local that is no
  parameter (`group = group or default_group()` may hold the parameter's object).
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from collcheck.catalog import Catalog, bundled_catalog_dir
from collcheck.static.names import ImportTable, nodes_under
from collcheck.static.symbolic import Atom, Expr

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef  # as loader.py spells it (which imports this)
MEMBERS_FILE = "class_members.json"
MIN_DISTINCTIVE = 3  # two (`group.rank()`, `group.scatter(...)`) fit classes of no catalog too
# A name more than this share of the known classes have (subclasses counted with their base) says
# little of which one an object is: 6 of today's 16 (`global_rank`, `backward`; not `world_size`).
MAX_SHARING = 0.4
MARK = "@inferred:"
# An object the function calls (its forward) and whose `backward` it calls too: no torch module
# nor tensor has both, a training engine does (`loss = engine(batch); engine.backward(loss)`).
# With these, fewer distinctive names than MIN_DISTINCTIVE suffice, where the file imports the
# class's framework.
ENGINE_PROTOCOL = frozenset({"__call__", "backward"})
ENGINE_BACKWARD = "backward"
MAX_MEMBERS_BYTES = 4 * 1024 * 1024


class AnalysedFile(Protocol):
    """What is asked of the analysed file (a `loader.ModuleInfo`): its catalog and imports."""

    @property
    def catalog(self) -> Catalog: ...

    @property
    def imports(self) -> ImportTable: ...

    @property
    def tree(self) -> ast.Module: ...


@dataclass(frozen=True)
class KnownClass:
    """A framework class under all its spellings, with its members and catalogued ancestors."""

    names: tuple[str, ...]
    members: frozenset[str]
    ancestors: frozenset[str]
    forwards: bool  # defines `__getattr__` (other than torch.nn.Module's): any name may be used


@dataclass(frozen=True)
class KnownClasses:
    classes: tuple[KnownClass, ...]
    generic: frozenset[str]
    sharing: dict[str, int]  # name -> how many known classes have it
    most: int  # the most classes a distinctive name may be shared by
    frameworks: frozenset[str]  # the top-level packages of the known classes, torch aside


@lru_cache(maxsize=1)
def known_classes() -> KnownClasses:
    """The bundled member lists (none when the file is missing or malformed: nothing is inferred)."""
    path = bundled_catalog_dir() / MEMBERS_FILE
    try:
        if path.stat().st_size > MAX_MEMBERS_BYTES:
            return KnownClasses((), frozenset(), {}, 0, frozenset())
        data = json.loads(path.read_text(encoding="utf-8"))
        generic = frozenset(str(name) for name in data["generic"])
        classes = []
        for entry in data["families"]:
            own = frozenset(str(name) for name in entry["members"])
            is_module = bool(entry["module"])
            classes.append(
                KnownClass(
                    tuple(str(name) for name in entry["names"]),
                    own | generic if is_module else own,
                    frozenset(str(name) for name in entry["ancestors"]),
                    "__getattr__" in own,
                )
            )
    except (OSError, ValueError, KeyError, TypeError):
        return KnownClasses((), frozenset(), {}, 0, frozenset())
    sharing: dict[str, int] = {}
    for known in classes:
        # A subclass that has the name through its base counts once, with the base.
        bases = [other for other in classes if set(other.names) & known.ancestors]
        for name in known.members:
            if not any(name in base.members for base in bases):
                sharing[name] = sharing.get(name, 0) + 1
    roots = sum(1 for c in classes if not any(set(o.names) & c.ancestors for o in classes))
    frameworks = frozenset(name.split(".")[0] for c in classes for name in c.names) - {"torch"}
    return KnownClasses(tuple(classes), generic, sharing, int(roots * MAX_SHARING), frameworks)


def inferred_value(
    module: AnalysedFile, used: frozenset[str], called: frozenset[str], held: str, where: str
) -> Atom | None:
    """The `type:` value of the one catalogued class `used` names fit (see the module's docstring)."""
    chosen = fitting_class(module.catalog, used, called, module.imports)
    return Atom(f"type:{chosen}{MARK}{held}:{where}", "shared") if chosen is not None else None


def inferred_class(value: Expr | None) -> str | None:
    """The class an inferred value was taken to be (its last name: `DeepSpeedEngine`), or None."""
    if not isinstance(value, Atom) or not value.name.startswith("type:") or MARK not in value.name:
        return None
    return value.name[5:].partition("@")[0].rpartition(".")[2]


def fitting_class(
    catalog: Catalog, used: frozenset[str], called: frozenset[str], imports: ImportTable | None = None
) -> str | None:
    """`used`: the names used on the object; `called`: those of its methods called; `imports`:
    the file's (a file that imports some known framework, `deepspeed`, has no object of another
    one, vLLM's, inferred: `self.buffer.dispatch(...)` of an expert-parallel buffer is no vLLM
    coordinator's)."""
    engine = used >= ENGINE_PROTOCOL and ENGINE_BACKWARD in called
    if (len(used) < MIN_DISTINCTIVE and not engine) or not called:
        return None  # without reading the member lists
    known = known_classes()
    distinctive = {
        name
        for name in used
        if name not in known.generic
        and not (name.startswith("__") and name.endswith("__"))
        and 0 < known.sharing.get(name, 0) <= known.most
    }
    few = len(distinctive) < MIN_DISTINCTIVE or distinctive.isdisjoint(called)
    if few and not engine:
        return None
    fitting = [c for c in known.classes if used <= c.members]
    if not fitting:
        return None
    # The one every other fitting class derives from (a subclass fits wherever its base does).
    roots = [c for c in fitting if all(o is c or set(c.names) & o.ancestors for o in fitting)]
    if len(roots) != 1 or roots[0].forwards:
        return None
    receivers = _method_receivers(catalog)
    spelled = [name for name in roots[0].names if name in receivers]
    if not spelled:
        return None
    imported = (
        {qualified.split(".")[0] for qualified in imports.names.values()} & known.frameworks
        if imports is not None
        else set()
    )
    if imported and spelled[0].split(".")[0] not in imported:
        return None
    if few and spelled[0].split(".")[0] not in imported:
        return None  # an engine by its protocol alone: only where the file imports its framework
    return spelled[0]


def _method_receivers(catalog: Catalog) -> frozenset[str]:
    found = _RECEIVERS.get(id(catalog))
    if found is None or found[0] is not catalog:
        names = {receiver for method in catalog.methods for receiver in method.receivers}
        found = _RECEIVERS[id(catalog)] = (catalog, frozenset(names))
    return found[1]


_RECEIVERS: dict[int, tuple[Catalog, frozenset[str]]] = {}


@dataclass(frozen=True)
class Uses:
    """What a function does with its plain names: per name, the attributes read, called or stored
    on it (`__call__` for a call of the object itself), the methods called on it, and how many
    times it is bound (assignments, loops, `with ... as`, imports, nested definitions), in its own
    body and the functions defined inside it (a closure uses the same object)."""

    used: dict[str, frozenset[str]]
    called: dict[str, frozenset[str]]
    bindings: dict[str, int]


_USES = "_collcheck_uses"  # kept on the function node, as names.nodes_under keeps its nodes


def uses(function: FunctionNode) -> Uses:
    found: Uses | None = function.__dict__.get(_USES)
    if found is None:
        found = _walk_uses(function)
        setattr(function, _USES, found)
    return found


def _walk_uses(function: FunctionNode) -> Uses:
    used: dict[str, set[str]] = {}
    called: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    for node in nodes_under(function):
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name):
                used.setdefault(node.value.id, set()).add(node.attr)
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                used.setdefault(func.id, set()).add("__call__")
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                called.setdefault(func.value.id, set()).add(func.attr)
        elif isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                counts[node.id] = counts.get(node.id, 0) + 1
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node is not function:
                counts[node.name] = counts.get(node.name, 0) + 1
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                counts[bound] = counts.get(bound, 0) + 1
    return Uses(
        {name: frozenset(names) for name, names in used.items()},
        {name: frozenset(names) for name, names in called.items()},
        counts,
    )


def names_used(function: FunctionNode) -> dict[str, frozenset[str]]:
    return uses(function).used


def _called(function: FunctionNode, name: str) -> frozenset[str]:
    return uses(function).called.get(name, frozenset())


def _bindings(function: FunctionNode) -> dict[str, int]:
    return uses(function).bindings


def infer_parameter(module: AnalysedFile, function: FunctionNode, arg: ast.arg) -> Atom | None:
    """An untyped, never rebound parameter used as exactly one framework class."""
    parameter = arg.arg
    if arg.annotation is not None or _bindings(function).get(parameter, 0):
        return None
    used = names_used(function).get(parameter)
    if not used:
        return None
    handed, handed_called = handed_uses(module, function, parameter)
    called = _called(function, parameter) | handed_called
    return inferred_value(module, used | handed, called, parameter, f"{function.lineno}")


def infer_local(module: AnalysedFile, function: FunctionNode, name: str, where: str) -> Atom | None:
    """A local bound once (here) to an unknown call's result, used as exactly one framework class."""
    parameters = function.args
    if _bindings(function).get(name, 0) != 1 or any(
        arg.arg == name for arg in [*parameters.posonlyargs, *parameters.args, *parameters.kwonlyargs]
    ):  # `group = group or default_group()`: the parameter's object, or another
        return None
    used = names_used(function).get(name)
    return inferred_value(module, used, _called(function, name), name, where) if used else None


def inferred_result(
    module: AnalysedFile, stmt: ast.Assign, value: Expr, stack: tuple[FunctionNode, ...]
) -> Expr:
    """`engine = build_engine(cfg)` in a function: the inferred object for an unknown call's
    result (`value`), else `value` unchanged."""
    if not (
        stack
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and isinstance(stmt.value, ast.Call)
        and isinstance(value, Atom)
        and value.name.startswith("call:")
        and value.kind == "shared"
    ):
        return value
    where = f"{stmt.lineno}:{stmt.col_offset}"
    return infer_local(module, stack[-1], stmt.targets[0].id, where) or value


def inferred_receiver(
    module: AnalysedFile,
    function: FunctionNode,
    call: ast.Call,
    receivers: tuple[str, ...],
    owner: ast.ClassDef | None = None,
) -> bool:
    """`engine.save_checkpoint(d)` in `function`: `engine` (a plain name, bound at most once, or
    `self.engine` of `owner`, the class `function` is a method of) is used as exactly one
    framework class, one of `receivers`. For the loader's cheap test of which functions may
    communicate, where the file imports none of the receivers' packages."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    held = func.value
    if isinstance(held, ast.Name) and _bindings(function).get(held.id, 0) <= 1:
        used = names_used(function).get(held.id)
        called = _called(function, held.id)
        if used and held.id in parameter_names(function):
            handed, handed_called = handed_uses(module, function, held.id)
            used, called = used | handed, called | handed_called
        chosen = fitting_class(module.catalog, used, called, module.imports) if used else None
    elif owner is not None and _on_first_parameter(function, held):
        assert isinstance(held, ast.Attribute)
        chosen = _attribute_class(module, owner, held.attr)
    else:
        return False
    return chosen is not None and chosen in receivers


def _on_first_parameter(function: FunctionNode, node: ast.expr) -> bool:
    """`self.engine` in a method whose first parameter is `self`."""
    first = [*function.args.posonlyargs, *function.args.args][:1]
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and bool(first)
        and node.value.id == first[0].arg
    )


AttributeUses = dict[str, tuple[frozenset[str], frozenset[str], int]]
_ATTRIBUTE_USES = "_collcheck_attribute_uses"


def attribute_uses(owner: ast.ClassDef) -> AttributeUses:
    """Per attribute of the class's objects (`self.engine`, in any method, the first parameter
    being the object): the names used on it, the methods called on it, and how many times the
    class's methods assign it. Kept on the class node."""
    found: AttributeUses | None = owner.__dict__.get(_ATTRIBUTE_USES)
    if found is None:
        found = _walk_attribute_uses(owner)
        setattr(owner, _ATTRIBUTE_USES, found)
    return found


def _walk_attribute_uses(owner: ast.ClassDef) -> AttributeUses:
    used: dict[str, set[str]] = {}
    called: dict[str, set[str]] = {}
    stored: dict[str, int] = {}

    def own(node: ast.expr, first: str) -> str | None:
        """`attr` of `self.attr` (`first`: the method's first parameter), else None."""
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == first:
            return node.attr
        return None

    for method in owner.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        parameters = [*method.args.posonlyargs, *method.args.args]
        if not parameters:
            continue
        first = parameters[0].arg
        for node in nodes_under(method):
            if isinstance(node, ast.Attribute):
                if isinstance(node.ctx, ast.Store) and own(node, first) is not None:
                    stored[node.attr] = stored.get(node.attr, 0) + 1
                held = own(node.value, first)
                if held is not None:
                    used.setdefault(held, set()).add(node.attr)
            elif isinstance(node, ast.Call):
                held = own(node.func, first)
                if held is not None:  # `self.engine(batch)`
                    used.setdefault(held, set()).add("__call__")
                elif isinstance(node.func, ast.Attribute):
                    held = own(node.func.value, first)
                    if held is not None:
                        called.setdefault(held, set()).add(node.func.attr)
    return {
        name: (frozenset(names), frozenset(called.get(name, ())), stored.get(name, 0))
        for name, names in used.items()
    }


def _attribute_class(module: AnalysedFile, owner: ast.ClassDef, attribute: str) -> str | None:
    """The class `self.<attribute>` is used as, when the class assigns it once."""
    used, called, stored = attribute_uses(owner).get(attribute, (frozenset(), frozenset(), 0))
    return fitting_class(module.catalog, used, called, module.imports) if stored == 1 else None


def infer_attribute(module: AnalysedFile, owner: ast.ClassDef, attribute: str, value: Expr) -> Expr:
    """`self.engine = build_engine(cfg)` (`value`: the unknown call's result, as the class's
    methods see the attribute): the inferred object when the class's use of it fits one class."""
    if not (isinstance(value, Atom) and value.name.startswith("call:") and value.kind == "shared"):
        return value
    chosen = _attribute_class(module, owner, attribute)
    return Atom(f"type:{chosen}{MARK}self:{attribute}", "shared") if chosen is not None else value


MAX_HANDED_SITES = 8  # calls of a function whose arguments' uses are joined to its parameter's
Site = tuple[ast.Call, FunctionNode, ast.ClassDef | None]
_SITES = "_collcheck_call_sites"  # kept on the module's tree


def parameter_names(function: FunctionNode) -> list[str]:
    arguments = function.args
    return [a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]]


def handed_uses(
    module: AnalysedFile, function: FunctionNode, parameter: str
) -> tuple[frozenset[str], frozenset[str]]:
    """What the file's callers do with the objects they hand `function` for `parameter`: the same
    object is used on both sides of the call (`checkpointer.save(self.engine)`, where the caller
    runs `self.engine.backward(loss)` and the callee `engine.save_checkpoint(d)`). Per call of the
    function by its name (`save(...)`, or `x.save(...)` for a method, whichever object `x` is; at
    most `MAX_HANDED_SITES`, else none), the argument's uses where it is a plain name bound once in
    its function, or `self.attr` its class stores once. Returns (used names, called methods)."""
    positional = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    sites = _call_sites(module.tree).get(function.name, [])
    if not sites or len(sites) > MAX_HANDED_SITES:
        return frozenset(), frozenset()
    used: set[str] = set()
    called: set[str] = set()
    # A method called on an object (`x.save(a)`) is handed `a` for its second parameter; a
    # function of the module (`utils.save(a)` too) or a static method for its first.
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in function.decorator_list)
    method = function not in module.tree.body and not static
    for call, caller, owner in sites:
        offset = 1 if method and isinstance(call.func, ast.Attribute) and positional[:1] != [parameter] else 0
        argument = _passed(call, positional[offset:], parameter)
        if argument is None:
            continue
        found = _argument_uses(argument, caller, owner)
        used |= found[0]
        called |= found[1]
    return frozenset(used), frozenset(called)


def _passed(call: ast.Call, positional: list[str], parameter: str) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == parameter:
            return keyword.value
    if parameter in positional:
        index = positional.index(parameter)
        before = call.args[: index + 1]
        if index < len(call.args) and not any(isinstance(arg, ast.Starred) for arg in before):
            return call.args[index]
    return None


def _argument_uses(
    argument: ast.expr, caller: FunctionNode, owner: ast.ClassDef | None
) -> tuple[frozenset[str], frozenset[str]]:
    if isinstance(argument, ast.Name) and _bindings(caller).get(argument.id, 0) <= 1:
        return names_used(caller).get(argument.id, frozenset()), _called(caller, argument.id)
    if owner is not None and _on_first_parameter(caller, argument):
        assert isinstance(argument, ast.Attribute)
        used, called, stored = attribute_uses(owner).get(argument.attr, (frozenset(), frozenset(), 0))
        if stored <= 1:
            return used, called
    return frozenset(), frozenset()


def _call_sites(tree: ast.Module) -> dict[str, list[Site]]:
    """The calls of the file by the name they call (`f(...)`, `x.f(...)`), each with the function
    it is made in and that function's class (top-level functions and methods only)."""
    found: dict[str, list[Site]] | None = tree.__dict__.get(_SITES)
    if found is not None:
        return found
    found = {}
    scopes: list[tuple[FunctionNode, ast.ClassDef | None]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scopes.append((node, None))
        elif isinstance(node, ast.ClassDef):
            scopes.extend(
                (item, node)
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            )
    for function, owner in scopes:
        for call in nodes_under(function):
            if not isinstance(call, ast.Call):
                continue
            func = call.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else None
            )
            if name is not None:
                found.setdefault(name, []).append((call, function, owner))
    setattr(tree, _SITES, found)
    return found
