"""The evaluator's reading of groups, wrapped objects and values of other files.

In: expression nodes and the evaluator that reads them (`ValueEvaluator`: its `pure`, its import
table, its module). Out: symbolic values — a group (`GroupVal`) however it is reached (a
parameter, `self.tp_group`, `mesh["tp"].get_group()`, a catalog accessor, `groups[per_rank_key]`
looked up from a table every rank holds), a rank's place in a
group (`dist.get_rank(g)`, `g.rank()`, `mesh.get_local_rank("dp")`, `get_process_group_ranks(g)`),
the catalogued type of an object (`type:` atoms), and module-level values of other files of the
run (`from .env import RANK`). The facts that tie these values together when two ranks are
compared are in `groups.py`.
"""

from __future__ import annotations

import ast
from typing import Protocol

from collcheck.catalog import Catalog
from collcheck.static import groups
from collcheck.static.declared_types import made_never_none
from collcheck.static.framework_types import chain_type
from collcheck.static.loader import ModuleInfo, remote_value
from collcheck.static.names import ImportTable, dotted, qualified_name, source_text
from collcheck.static.receivers import BOUND, EXACT, FUNCTION, PARTIAL
from collcheck.static.state import Frame, State
from collcheck.static.symbolic import (
    PER_RANK_KINDS,
    RANK,
    TRUE,
    WORLD,
    Atom,
    BinOp,
    Const,
    Expr,
    GroupVal,
    IfExp,
    Nullness,
    Sized,
    atoms,
    is_rank_dependent,
)


class ValueEvaluator(Protocol):
    """What these readers need of the evaluator (values.ValueEvaluator)."""

    module: ModuleInfo
    catalog: Catalog
    local_imports: ImportTable
    # The value of a per-rank lookup (`groups[key]`, by its atom's name) -> the group it is when
    # used as one (`looked_up_group`); None when its paths looked up different keys.
    held_groups: dict[str, GroupVal | None]

    def pure(
        self, node: ast.expr | None, state: State, frame: Frame, known: dict[int, Expr] | None = None
    ) -> Expr: ...

    def class_types(self, class_name: str) -> frozenset[str]: ...


# Functions that translate a given global rank into a rank inside a group.
GROUP_RANK_TRANSLATORS = frozenset(
    {"torch.distributed.get_group_rank", "torch.distributed.distributed_c10d.get_group_rank"}
)
# get_global_rank(group, i): the global rank of the member at local rank i.
GLOBAL_RANK_TRANSLATORS = frozenset(
    {"torch.distributed.get_global_rank", "torch.distributed.distributed_c10d.get_global_rank"}
)
GROUP_RANK_LISTS = frozenset(
    {
        "torch.distributed.get_process_group_ranks",
        "torch.distributed.distributed_c10d.get_process_group_ranks",
    }
)
# A group's member list and the translations between local and global ranks: per-rank values (a
# rank of another block of the same kind of group holds another list), so a helper that returns one
# (`return dist.get_process_group_ranks(self.pp_group)`) is inlined like one that reads the rank.
GROUP_PLACES = GROUP_RANK_LISTS | GROUP_RANK_TRANSLATORS | GLOBAL_RANK_TRANSLATORS
GROUP_METHODS = frozenset({"rank", "get_rank", "size", "get_world_size", "get_local_rank", "get_group"})
WORLD_NAMES = (".group.WORLD", ".GroupMember.WORLD")
# Calls that always return a tensor: `x = torch.empty(n) if not src else t; if x is not None`.
TENSOR_FACTORIES = tuple(
    f"call:torch.{name}("
    for name in (
        *("empty", "zeros", "ones", "full", "tensor", "as_tensor", "rand", "randn", "arange"),
        *("empty_like", "zeros_like", "ones_like", "full_like", "cat", "stack"),
    )
)
NOT_NONE = Const("<object>")
# Values that are no None: slices, tensors made by a factory, objects a class of the file made
# (`Store()`), functions, partials and bound methods named as values (receivers.py).
NEVER_NONE = ("slice:", *TENSOR_FACTORIES, EXACT, FUNCTION, PARTIAL, BOUND)
# Methods that cut a tensor into a sequence of tensors: an item of their result is a tensor.
TENSOR_SPLITTERS = tuple(f".{name}(" for name in ("chunk", "split", "tensor_split", "unbind"))


def group_key(value: Expr, node: ast.expr) -> str:
    """One name for a group however it is reached: the group's own key, the name of the value
    (the same object read in two places), or the expression's text."""
    if isinstance(value, GroupVal):
        return value.key
    if isinstance(value, Atom):
        return value.name
    return ast.unparse(node)


def catalog_group(name: str, type_name: str) -> GroupVal:
    if name == "world":  # a coordinator over every rank (vLLM's get_world_group())
        return GroupVal("world", TRUE, type_name=type_name)
    return GroupVal(name, None, type_name=type_name)


def group_value(
    ev: ValueEvaluator, node: ast.expr | None, state: State, frame: Frame, known: dict[int, Expr]
) -> GroupVal | None:
    """The group a `group=` argument names; None for the default (world) group."""
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return None
    name = qualified_name(node, ev.local_imports)
    if name is not None and name.endswith(WORLD_NAMES):
        return None
    value = ev.pure(node, state, frame, known)
    if isinstance(value, GroupVal):
        return value
    if isinstance(value, Const) and value.value is None:
        return None
    if isinstance(node, ast.Subscript) and is_rank_dependent(value):
        if isinstance(node.slice, ast.Slice):
            return GroupVal(group_key(value, node), None, per_rank=True)
        container = ev.pure(node.value, state, frame, known)
        looked_up = looked_up_group(container, ev.pure(node.slice, state, frame, known), node)
        if looked_up is not None:
            return looked_up
    elif isinstance(value, Atom) and value.kind == "perrank":
        held = ev.held_groups.get(value.name)  # `g = groups[key]` earlier, `group=g` here
        if held is not None:
            return held
    return GroupVal(group_key(value, node), None, per_rank=is_rank_dependent(value))


def looked_up_group(container: Expr, selector: Expr, node: ast.Subscript) -> GroupVal | None:
    """`groups[f"local_{node_index}"]`: a group looked up from a container the ranks share by a
    key computed from the rank (DeepSpeed's coalesced collectives). Each rank may hold another
    group, but the ranks that meet on one hold the same key: a group of unknown membership (at
    least two members, who are its callers) whose `color` (the key, `selector`) is equal on the
    two ranks compared. None when the container itself differs between ranks or the key is a
    slice."""
    if isinstance(node.slice, ast.Slice) or is_rank_dependent(container):
        return None
    key = f"{group_key(container, node.value)}[{ast.unparse(node.slice)}]"
    return GroupVal(key, None, color=selector)


def rank_function_value(
    ev: ValueEvaluator, spec: str, node: ast.Call, state: State, frame: Frame, known: dict[int, Expr] | None
) -> Expr | None:
    """`dist.get_rank(group)` / `dist.get_world_size(group)`: the rank inside, or the size of, the
    group passed (None when no group is passed: the catalog's own value then)."""
    has_group = any(k.arg == "group" for k in node.keywords) or (node.args and spec in ("rank", "world"))
    if not has_group:
        return None
    argument = node.args[0] if node.args else next(k.value for k in node.keywords if k.arg == "group")
    if isinstance(argument, ast.Constant) and argument.value is None:
        return None
    group = group_value(ev, argument, state, frame, known or {})
    if group is None:  # the default (world) group, spelled out
        return None
    if spec == "rank":
        return groups.local_rank(group.key)
    return groups.group_size(group.key)


def group_call_value(
    ev: ValueEvaluator,
    name: str,
    node: ast.Call,
    args: list[Expr],
    state: State,
    frame: Frame,
    known: dict[int, Expr] | None,
) -> Expr | None:
    """Calls about groups that are not rank functions: get_group_rank(g, rank), get_global_rank(g,
    i), a catalog group accessor, get_process_group_ranks(g)."""
    if name in GROUP_RANK_TRANSLATORS and len(node.args) == 2 and args[1] == RANK:
        value = group_value(ev, node.args[0], state, frame, known or {})
        return RANK if value is None else groups.local_rank(value.key)
    if name in GLOBAL_RANK_TRANSLATORS and len(node.args) == 2 and _local_index(args[1]):
        value = group_value(ev, node.args[0], state, frame, known or {})
        return args[1] if value is None else groups.member_at(value.key, args[1])
    if name in ev.catalog.groups:
        return catalog_group(ev.catalog.groups[name], ev.catalog.types.get(name, ""))
    if name in GROUP_RANK_LISTS and len(node.args) == 1:
        value = group_value(ev, node.args[0], state, frame, known or {})
        return groups.member_ranks("world" if value is None else value.key)
    return None


def coordinator_value(
    ev: ValueEvaluator, node: ast.Attribute, state: State, frame: Frame, known: dict[int, Expr] | None
) -> Expr | None:
    """`coordinator.world_size` / `coordinator.ranks` (catalog `[coordinator]`): the size or the
    member list of the group the object coordinates, keyed like its `rank_in_group`. An object is
    a coordinator when it is a group value (a catalog accessor's result) or when the file reads
    its `group_rank` attribute somewhere (the same receiver, spelled the same way); the same
    attribute names on other objects (`args.world_size`) are left alone (None)."""
    meaning = ev.catalog.coordinator_attributes.get(node.attr)
    if meaning is None:
        return None
    owner = ev.pure(node.value, state, frame, known)
    if not isinstance(owner, GroupVal) and source_text(node.value) not in _coordinators(ev.module):
        return None
    key = group_key(owner, node.value)
    return groups.group_size(key) if meaning == "group_world" else groups.member_ranks(key)


# The receivers each file reads a `group_rank` attribute from, by the file's tree (kept with it,
# so that a tree freed and another made at its address is not taken for it).
_COORDINATORS: dict[int, tuple[ast.Module, frozenset[str]]] = {}


def _coordinators(module: ModuleInfo) -> frozenset[str]:
    """The spellings of the receivers the file reads a `group_rank` attribute from, and of the
    names one of them is assigned to or from (`self.link = link`, then `link.rank_in_group`)."""
    hit = _COORDINATORS.get(id(module.tree))
    if hit is None or hit[0] is not module.tree:
        attributes = {name for name, spec in module.catalog.rank_attributes.items() if spec == "group_rank"}
        found: set[str] = set()
        aliases: list[tuple[str, str]] = []
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Attribute) and node.attr in attributes:
                found.add(source_text(node.value))
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.value, (ast.Name, ast.Attribute))
            ):
                aliases.append((source_text(node.targets[0]), source_text(node.value)))
        found |= {target for target, value in aliases if value in found}
        found |= {value for target, value in aliases if target in found}
        if len(_COORDINATORS) > 256:
            _COORDINATORS.clear()
        hit = _COORDINATORS[id(module.tree)] = (module.tree, frozenset(found))
    return hit[1]


def group_method_value(
    ev: ValueEvaluator, node: ast.Call, state: State, frame: Frame, known: dict[int, Expr] | None
) -> Expr | None:
    """`group.rank()`, `group.size()`, `mesh.get_local_rank("tp")`, `mesh["tp"].get_group()`:
    a rank's place in a group, the group's size, or a device-mesh dimension's group, all keyed by
    the group so that a condition on them is tied to collectives on that group."""
    assert isinstance(node.func, ast.Attribute)
    method = node.func.attr
    if method not in GROUP_METHODS or _names_module(ev, node.func.value):
        return None
    receiver = ev.pure(node.func.value, state, frame, known)
    if isinstance(receiver, Atom) and receiver.name.startswith("type:"):
        return None  # a catalogued object (an Accelerator, a Trainer): its own rank methods
    key = group_key(receiver, node.func.value)
    if method in ("rank", "get_rank", "size", "get_world_size"):
        if node.args or node.keywords:
            return None
        return groups.local_rank(key) if method in ("rank", "get_rank") else groups.group_size(key)
    named, dimension = _mesh_dimension(node)
    if not named:
        return None
    mesh_key = groups.mesh_dimension_key(key, dimension)
    return groups.unknown_group(mesh_key) if method == "get_group" else groups.local_rank(mesh_key)


def _names_module(ev: ValueEvaluator, node: ast.expr) -> bool:
    """`dist.get_rank()` spelled through a module: a function, not a method on a group."""
    parts = dotted(node)
    return parts is not None and ev.local_imports.lookup(parts[0]) is not None


def _mesh_dimension(node: ast.Call) -> tuple[bool, str | None]:
    """The mesh dimension named by `get_group(dim)` / `get_local_rank(mesh_dim=dim)`: (True, its
    name), (True, None) when none is given (a one-dimensional mesh, or a group), (False, None) when
    it is computed or not a name."""
    arguments = [*node.args, *(k.value for k in node.keywords if k.arg == "mesh_dim")]
    if len(arguments) != len(node.args) + len(node.keywords) or len(arguments) > 1:
        return False, None
    if not arguments:
        return True, None
    argument = arguments[0]
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return True, argument.value
    return False, None


def subscript_value(base: Expr, index: Expr) -> Expr | None:
    """`get_process_group_ranks(g)[0]` (the member whose local rank is 0), `ranks[(me + 1) % n]`
    (the member at a computed local rank; on the world, that rank itself) and `mesh["tp"]`."""
    listed = isinstance(base, Atom) and base.name.startswith(groups.RANKS_PREFIX)
    if listed and isinstance(base, Atom) and _local_index(index):
        key = base.name[len(groups.RANKS_PREFIX) :]
        if key == "world" and not isinstance(index, Const):
            return index
        return groups.member_at(key, index)
    if isinstance(base, GroupVal) and isinstance(index, Const) and isinstance(index.value, str):
        return groups.unknown_group(groups.mesh_dimension_key(base.key, index.value))
    return None


def member_count(value: Expr) -> Expr | None:
    """`len(get_process_group_ranks(g))`: the size of `g` (the world's size for the world)."""
    if not groups.is_member_list(value):
        return None
    assert isinstance(value, Atom)
    key = value.name[len(groups.RANKS_PREFIX) :]
    return WORLD if key == "world" else groups.group_size(key)


def _local_index(index: Expr) -> bool:
    """A value that may be a local rank: an int, or arithmetic and atoms (not text, a tuple, a
    slice or a group)."""
    if isinstance(index, Const):
        return type(index.value) is int
    return isinstance(index, (Atom, BinOp, IfExp)) and not isinstance(index, GroupVal)


def imported_value(ev: ValueEvaluator, qualified: str, cache: dict[str, Expr | None]) -> Expr | None:
    """A module-level value of another file of the run (`from .env import RANK`, `env.RANK`)
    when it depends on the rank or the process; None otherwise (the name then stays opaque)."""
    if qualified in cache:
        return cache[qualified]
    cache[qualified] = None  # a cycle of imports sees "unknown"
    found = remote_value(ev.module, qualified) if ev.module.loader is not None else None
    value = found if found is not None and any(a.kind in PER_RANK_KINDS for a in atoms(found)) else None
    cache[qualified] = value
    return value


def type_of(
    ev: ValueEvaluator, node: ast.expr, state: State | None, class_name: str | None = None
) -> str | None:
    """The catalogued type of the object an expression holds (`accelerator`, `self.model`,
    `self.accelerator` of a Trainer subclass, `self.trainer.strategy`), or None. `class_name`: the
    class whose method is running (what `self` is)."""
    if state is not None:
        parts = dotted(node)
        if parts:
            value = state.env.get(".".join(parts))
            if value is None and parts[0] == "self" and len(parts) == 2:
                value = _class_attribute(ev, parts[1])
            if isinstance(value, Atom) and value.name.startswith("type:"):
                type_name, _, where = value.name[5:].partition("@")
                # `model.module` of a typed `model` is another object (the unwrapped module).
                return None if "." in where else type_name
            if isinstance(value, GroupVal) and value.type_name:
                return value.type_name
            if value is None and parts[-1] in ev.catalog.typed_attributes and len(parts) > 1:
                return _chained_type(ev, parts, state, class_name)
    if isinstance(node, ast.Call):
        name = qualified_name(node.func, ev.local_imports)
        if name is not None and name in ev.catalog.types:
            return ev.catalog.types[name] or name
    return None


def _class_attribute(ev: ValueEvaluator, name: str) -> Expr | None:
    """`self.name` as some class of the module sets it."""
    return next((c.attributes[name] for c in ev.module.classes.values() if name in c.attributes), None)


def _held_value(ev: ValueEvaluator, parts: list[str], state: State) -> Expr | None:
    """The value a dotted name holds on this path, or (`self.x`) as an attribute of some class."""
    value = state.env.get(".".join(parts))
    if value is None and parts[0] == "self" and len(parts) == 2:
        value = _class_attribute(ev, parts[1])
    return value


def _chained_type(ev: ValueEvaluator, parts: list[str], state: State, class_name: str | None) -> str | None:
    """`self.trainer.strategy`, `trainer.strategy`: the longest prefix whose type is known (`self`:
    the framework classes of the running class), then the catalogued attribute types after it."""
    for cut in range(len(parts) - 1, 0, -1):
        owners: tuple[str, ...] | frozenset[str] = ()
        if cut == 1 and parts[0] == "self" and class_name:
            owners = ev.class_types(class_name)
        else:
            value = _held_value(ev, parts[:cut], state)
            if isinstance(value, Atom) and value.name.startswith("type:"):
                type_name, _, where = value.name[5:].partition("@")
                owners = () if "." in where else (type_name,)
        if owners:
            return chain_type(ev.catalog, owners, parts[cut:])
    return None


def none_or_not(value: Expr, module: ModuleInfo | None = None) -> Expr:
    """A value compared with `is None`: a tensor made by a factory, a slice (`full[lo:hi]`, even
    with bounds computed from the rank), a piece of a split tensor (`full.chunk(n)[rank]`) and a
    value declared of a type that excludes None (`Nullness.NEVER`) and, given the `module` the
    test is in, a black box's result its maker never makes None (an object of a class of the
    run, a function declared to return no None) are never None (keep None itself, and unknowns,
    as they are)."""
    tensor = isinstance(value, Atom) and (
        value.nullness is Nullness.NEVER
        or value.name.startswith(NEVER_NONE)
        or _piece_of_split(value.name)
        or (module is not None and made_never_none(value, module))
    )
    if tensor or isinstance(value, Sized):
        return NOT_NONE
    if isinstance(value, Sized) and value.name.startswith("tensor:"):  # tensor_shapes.factory_tensor
        return NOT_NONE
    if isinstance(value, IfExp):
        then, orelse = none_or_not(value.then, module), none_or_not(value.orelse, module)
        return value if (then, orelse) == (value.then, value.orelse) else IfExp(value.test, then, orelse)
    return value


def parameters_with_literal_defaults(args: ast.arguments) -> set[str]:
    """`def broadcast(obj, *, rank: int = 0)`: parameters whose default is an int literal."""
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True))
    keyword_only = zip(args.kwonlyargs, args.kw_defaults, strict=True)
    pairs += [(arg, default) for arg, default in keyword_only if default is not None]
    return {
        arg.arg for arg, default in pairs if isinstance(default, ast.Constant) and type(default.value) is int
    }


def _piece_of_split(name: str) -> bool:
    """`item:<text>[index]@where` of an item read from the result of a tensor-splitting method."""
    if not name.startswith("item:"):
        return False
    text = name[len("item:") :].rpartition("@")[0]
    base = text.rpartition("[")[0]
    return base.endswith(")") and any(splitter in base for splitter in TENSOR_SPLITTERS)
