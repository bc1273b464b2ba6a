"""Declarative catalogs: which callables communicate, where ranks come from.

The catalogs live in `rules/*.toml` (shipped inside the wheel as `collcheck/rules`). Code never
hard-codes an API name: the analyzer only asks the catalog.
"""

from __future__ import annotations

import ast
import hashlib
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from collcheck.config import Settings
from collcheck.source import MAX_CONFIG_BYTES, FileRefused, read_regular_file

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# Methods every torch module has: typed receivers only, never a reason to read a file on their own.
MODULE_METHODS = frozenset({"__call__", "forward", "state_dict", "backward", "step"})
# Run by `with` / `async with`: the text shows the manager's class (`with Gathered(ps):`), not them.
CONTEXT_METHODS = frozenset({"__enter__", "__exit__", "__aenter__", "__aexit__"})
IMPLICIT_METHODS = MODULE_METHODS | CONTEXT_METHODS
OP_KINDS = ("collective", "group_create", "p2p_send", "p2p_recv", "p2p_nonblocking")
# What a `[coordinator]` attribute holds: the group's size, or its global ranks in local-rank order.
COORDINATOR_VALUES = frozenset({"group_world", "group_ranks"})


Documents = Iterable[tuple[str, str]]  # (name, catalog-format TOML text) of summarised packages
Summaries = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]  # summary files, documents


class CatalogError(ValueError):
    """A catalog file that cannot be used; the CLI turns it into exit code 2."""


@dataclass(frozen=True)
class OpSpec:
    """One communicating callable and the role of each of its arguments."""

    op: str
    kind: str = "collective"
    params: tuple[str, ...] = ()
    group: str | None = None
    root: str | None = None
    group_root: str | None = None
    peer: str | None = None
    group_peer: str | None = None  # the peer as a rank inside `group` (`group_dst=`)
    reduce_op: str | None = None
    ranks: str | None = None
    operands: tuple[str, ...] = ()
    uniform_after: tuple[str, ...] = ()
    root_only_after: tuple[str, ...] = ()  # hold the result on the root only (`reduce`'s tensor)
    default_group: str | None = None  # the group used when none is passed (None: the world)
    # A conditional summary: it communicates when this Python expression over `params` and
    # `self.ATTRIBUTE` holds (docs/summaries.md); `when_defaults`: literal defaults it reads.
    when: str | None = None
    when_defaults: tuple[tuple[str, bool | int | float | str], ...] = ()
    # For methods: how many leading positional arguments the receiver already consumed (bound methods: 0).
    source: str = ""

    def param_index(self, name: str | None) -> int | None:
        if name is None or name not in self.params:
            return None
        return self.params.index(name)


@dataclass(frozen=True)
class MethodSpec:
    method: str
    spec: OpSpec
    receivers: tuple[str, ...] = ()
    any_receiver: bool = False


@dataclass(frozen=True)
class SessionSpec:
    """A call that goes on issuing collectives on its group from a background thread after it
    returns (an asynchronous checkpoint save), until the handle it returns is waited on."""

    what: str  # what the session is, for messages
    params: tuple[str, ...] = ()  # the positional parameter order
    group: str | None = None  # the parameter naming its group (not passed: the default group)
    # attribute chains called on the returned handle that wait for the session (`result`,
    # `upload_completion.result`)
    ends: tuple[tuple[str, ...], ...] = ()
    # keyword -> the source text of a value with which the call issues no collective on that group
    quiet_when: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class GradientSync:
    """Backward through a value computed by a module of one of `wrappers` communicates: DDP's
    backward all-reduces gradient buckets, FSDP's reduce-scatters them (`[[gradient_sync]]`).
    `spec`: the event's op; `group`: the wrapper constructor's keyword naming the group (not
    passed: the world); `paused_by`: methods whose `with` block suspends it (`model.no_sync()`,
    `accelerator.no_sync(model)`), called on such a module or handed one."""

    spec: OpSpec
    wrappers: tuple[str, ...]
    group: str | None = None
    paused_by: tuple[str, ...] = ()
    # how backward is started: a method of the value (`loss.backward()`), or a function or typed
    # method handed it first (`torch.autograd.backward(loss)`, `accelerate.Accelerator.backward`)
    methods: tuple[str, ...] = ("backward",)
    functions: tuple[str, ...] = ()
    # Assumed rather than seen (`assumed = "DDP or FSDP"`, the wrapping named in messages): a
    # backward of a value whose model's wrapping the file does not show, in a file that imports a
    # module under one of `evidence` (it trains under torch.distributed). Its op begins with
    # ASSUMED_OP_PREFIX, so that a finding on it can say what it rests on.
    assumed: str | None = None
    evidence: tuple[str, ...] = ()
    # Framework hooks (`Class.method`) whose value, returned by a method of that name of a subclass,
    # the framework runs backward on unless it is None (Lightning's `training_step`), and an
    # attribute the subclass sets when it runs backward itself (`automatic_optimization`).
    returned_by: tuple[str, ...] = ()
    manual_flag: str | None = None


# The op of a `[[gradient_sync]]` entry that is assumed, not seen, begins with this (checked at load).
ASSUMED_OP_PREFIX = "assumed_"


def is_assumed_op(op: str) -> bool:
    """An event of a gradient reduction the analysis assumed (`GradientSync.assumed`)."""
    return op.startswith(ASSUMED_OP_PREFIX)


@dataclass(frozen=True)
class Catalog:
    functions: dict[str, OpSpec] = field(default_factory=dict)
    methods: tuple[MethodSpec, ...] = ()
    rank_functions: dict[str, str] = field(default_factory=dict)  # qualified name -> value expression
    rank_methods: dict[str, str] = field(default_factory=dict)  # method name -> value expression
    rank_env: dict[str, str] = field(default_factory=dict)
    rank_parameters: dict[str, str] = field(default_factory=dict)
    rank_attributes: dict[str, str] = field(default_factory=dict)
    # attribute -> `group_world` / `group_ranks`: the size or member list of a group coordinator,
    # an object whose `group_rank` attribute (`rank_in_group`) the code reads (`[coordinator]`)
    coordinator_attributes: dict[str, str] = field(default_factory=dict)
    nondeterministic: dict[str, str] = field(default_factory=dict)  # qualified name -> what varies
    rank_decorators: dict[str, str] = field(default_factory=dict)  # qualified name -> condition
    # constructor -> "KEYWORD:ATTRIBUTE": built with a true KEYWORD, the object's ATTRIBUTE stays 0
    disabled_counters: dict[str, str] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)  # factory qualified name -> type name
    # functions that turn their first argument into that type in place (`fully_shard(model)`)
    types_in_place: dict[str, str] = field(default_factory=dict)
    # type name -> "a,b": constructor keywords its `__init__` keeps as the attributes of the same
    # names (`Gathered(ps, enabled=False)` makes `.enabled` false, for a `when` on `self.enabled`)
    kept_arguments: dict[str, str] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)  # function returning a group -> group name
    # group name -> condition every member satisfies (over `group_rank[g]`, `group_world[g]`, `rank`)
    group_members: dict[str, str] = field(default_factory=dict)
    # sets of orthogonal groups: two members of one of them hold the same position in the others
    group_grids: tuple[tuple[str, ...], ...] = ()
    # functions that run a callable they are handed on another process (RPC) -> what they do
    remote_calls: dict[str, str] = field(default_factory=dict)
    # "Type.attribute" -> the type of the object a catalogued class keeps in that attribute
    # (`transformers.Trainer.accelerator` -> `accelerate.Accelerator`), for `self.accelerator` in a
    # subclass whose base class is not part of the run
    attribute_types: dict[str, str] = field(default_factory=dict)
    # functions that start processes running the callable they are handed (`mp.spawn`) -> the value
    # the callable's first parameter holds (`local_rank`: the process index)
    launchers: dict[str, str] = field(default_factory=dict)
    # calls that start a background collective session -> what it is (`[[async_session]]`)
    sessions: dict[str, SessionSpec] = field(default_factory=dict)
    # qualified names of the default group (`torch.distributed.group.WORLD`; `[default_group]`)
    default_groups: frozenset[str] = frozenset()
    gradient_syncs: tuple[GradientSync, ...] = ()  # `[[gradient_sync]]`
    names: tuple[str, ...] = ()
    fingerprint: str = ""

    @property
    def trigger_words(self) -> frozenset[str]:
        """Identifiers whose presence in a file's text means it may communicate (the prefilter)."""
        return self.communication_words | self.assumed_trigger_words

    @cached_property
    def communication_words(self) -> frozenset[str]:
        """The trigger words of what communicates whatever is assumed: catalogued functions,
        methods, wrapper factories, sessions."""
        words: set[str] = set()
        for qualified in self.functions:
            words.add(qualified.rsplit(".", 1)[-1])
        for method in self.methods:
            if method.method not in IMPLICIT_METHODS:
                words.add(method.method)
        # A module wrapped by a catalogued factory communicates when called (`model(x)`), a context
        # manager when entered: the factory's (the class's) name is what the text shows.
        wrapped_types = {
            receiver
            for method in self.methods
            if method.method in IMPLICIT_METHODS
            for receiver in method.receivers
        }
        for factory, type_name in self.types.items():
            if (type_name or factory) in wrapped_types:
                words.add(factory.rsplit(".", 1)[-1])
        words.update(name.rsplit(".", 1)[-1] for name in self.types_in_place)
        words.update(name.rsplit(".", 1)[-1] for name in self.sessions)
        return frozenset(words)

    @cached_property
    def assumed_trigger_words(self) -> frozenset[str]:
        """Trigger words that mean communication only under an assumed gradient reduction: a
        backward (`loss.backward()`: a plain word, counted only in a text that names a distributed
        library) and a hook whose returned loss the framework runs backward on (`training_step`).
        A file that says one is analysed, but the project's index does not count them as what
        makes a function worth following from another file (loader.py, `assumed_only`)."""
        return frozenset(self.assumed_backward_words | set(self.backward_hooks))

    @cached_property
    def typed_attributes(self) -> frozenset[str]:
        """The attribute names of `attribute_types` (a cheap test before any lookup)."""
        return frozenset(key.rsplit(".", 1)[1] for key in self.attribute_types)

    def receiver_packages(self, receivers: tuple[str, ...]) -> frozenset[str]:
        """Top-level packages whose import may put an object of one of `receivers` in reach: the
        types' own packages, and those of catalogued types that hold one in an attribute
        (a module that subclasses `transformers.Trainer` reaches `self.accelerator.gather`)."""
        found = self._receiver_packages.get(receivers)
        if found is None:
            types = set(receivers)
            changed = True
            while changed:  # owners of owners: `LightningModule.trainer` -> `Trainer.strategy`
                owners = {
                    key.rsplit(".", 1)[0] for key, held in self.attribute_types.items() if held in types
                }
                changed = not owners <= types
                types |= owners
            # ... and every spelling of those types (`trl.GRPOTrainer` is a `transformers.Trainer`)
            types |= {name for name, type_name in self.types.items() if type_name in types}
            found = self._receiver_packages[receivers] = frozenset(t.split(".", 1)[0] for t in types)
        return found

    @cached_property
    def _receiver_packages(self) -> dict[tuple[str, ...], frozenset[str]]:
        return {}

    @cached_property
    def assumed_syncs(self) -> tuple[GradientSync, ...]:
        """The `[[gradient_sync]]` entries assumed rather than seen (`GradientSync.assumed`)."""
        return tuple(sync for sync in self.gradient_syncs if sync.assumed)

    @cached_property
    def backward_hooks(self) -> dict[str, tuple[GradientSync, ...]]:
        """Hook method name -> the assumed reductions a returned value of it starts
        (`GradientSync.returned_by`)."""
        hooks: dict[str, tuple[GradientSync, ...]] = {}
        for sync in self.assumed_syncs:
            for method in dict.fromkeys(hook.rsplit(".", 1)[-1] for hook in sync.returned_by):
                hooks[method] = (*hooks.get(method, ()), sync)
        return hooks

    @cached_property
    def assumed_backward_words(self) -> frozenset[str]:
        """The last names of what starts a backward that may run an assumed reduction."""
        words = {m for sync in self.assumed_syncs for m in sync.methods}
        words.update(f.rsplit(".", 1)[-1] for sync in self.assumed_syncs for f in sync.functions)
        return frozenset(words)

    @cached_property
    def backward_words(self) -> frozenset[str]:
        """The last names of what starts a backward that may communicate (a cheap test per call)."""
        words = {m for sync in self.gradient_syncs for m in sync.methods}
        words.update(f.rsplit(".", 1)[-1] for sync in self.gradient_syncs for f in sync.functions)
        return frozenset(words)

    def method_specs(self, name: str) -> tuple[MethodSpec, ...]:
        """The entries for a method name, in catalog order (asked for every call evaluated)."""
        return self._methods_by_name.get(name, ())

    @cached_property
    def _methods_by_name(self) -> dict[str, tuple[MethodSpec, ...]]:
        # Built on first use (a frozen dataclass may still fill its own __dict__); a linear scan
        # of every catalogued method per evaluated call was 1-2 % of a cold run.
        by_name: dict[str, list[MethodSpec]] = {}
        for method in self.methods:
            by_name.setdefault(method.method, []).append(method)
        return {name: tuple(entries) for name, entries in by_name.items()}


def bundled_catalog_dir() -> Path:
    """`collcheck/rules` inside a wheel, `rules/` beside the package in a source checkout (the same name)."""
    package_dir = Path(__file__).resolve().parent
    installed = package_dir / "rules"
    if installed.is_dir():
        return installed
    return package_dir.parent / "rules"


def bundled_catalog_paths() -> list[Path]:
    return sorted(bundled_catalog_dir().glob("*.toml"))


def _str_tuple(data: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise CatalogError(f"{where}: '{key}' must be a list of strings")
    return tuple(value)


def _optional_str(data: dict[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is None or isinstance(value, str):
        return value
    raise CatalogError(f"{where}: '{key}' must be a string")


def _op_spec(entry: dict[str, Any], where: str) -> OpSpec:
    op = entry.get("op")
    if not isinstance(op, str):
        raise CatalogError(f"{where}: every entry needs a string 'op'")
    kind = entry.get("kind", "collective")
    if kind not in OP_KINDS:
        raise CatalogError(f"{where}: unknown kind '{kind}' (expected one of {', '.join(OP_KINDS)})")
    return OpSpec(
        op=op,
        kind=kind,
        params=_str_tuple(entry, "params", where),
        group=_optional_str(entry, "group", where),
        root=_optional_str(entry, "root", where),
        group_root=_optional_str(entry, "group_root", where),
        peer=_optional_str(entry, "peer", where),
        group_peer=_optional_str(entry, "group_peer", where),
        reduce_op=_optional_str(entry, "reduce_op", where),
        ranks=_optional_str(entry, "ranks", where),
        operands=_str_tuple(entry, "operands", where),
        uniform_after=_str_tuple(entry, "uniform_after", where),
        root_only_after=_str_tuple(entry, "root_only_after", where),
        default_group=_optional_str(entry, "default_group", where),
        when=_condition(entry, where),
        when_defaults=_defaults(entry, where),
        source=where,
    )


def _condition(entry: dict[str, Any], where: str) -> str | None:
    """`when`: a Python expression over the entry's parameters and `self.ATTRIBUTE`."""
    text = _optional_str(entry, "when", where)
    if text is None:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise CatalogError(f"{where}: 'when' is not a Python expression: {text!r}") from None
    params = set(_str_tuple(entry, "params", where))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in params and node.id != "self":
            raise CatalogError(f"{where}: 'when' names {node.id!r}, which is not in 'params'")
    return text


def _defaults(entry: dict[str, Any], where: str) -> tuple[tuple[str, bool | int | float | str], ...]:
    table = entry.get("defaults", {})
    if not isinstance(table, dict) or not all(isinstance(v, (bool, int, float, str)) for v in table.values()):
        raise CatalogError(f"{where}: 'defaults' must be a table of literals")
    return tuple(sorted((str(k), v) for k, v in table.items()))


def _value_table(data: Any, where: str, default_value: str) -> dict[str, str]:
    """Accept either a list of names (all meaning `default_value`) or a name -> value table."""
    if data is None:
        return {}
    if isinstance(data, list):
        return {str(name): default_value for name in data}
    if isinstance(data, dict):
        return {str(key): str(value) for key, value in data.items()}
    raise CatalogError(f"{where}: expected a list or a table")


@dataclass
class _Builder:
    functions: dict[str, OpSpec] = field(default_factory=dict)
    methods: list[MethodSpec] = field(default_factory=list)
    sessions: dict[str, SessionSpec] = field(default_factory=dict)
    default_groups: set[str] = field(default_factory=set)
    tables: dict[str, dict[str, str]] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    grids: dict[str, tuple[str, ...]] = field(default_factory=dict)
    gradient_syncs: list[GradientSync] = field(default_factory=list)

    def table(self, name: str) -> dict[str, str]:
        return self.tables.setdefault(name, {})


def _add_rank_section(
    builder: _Builder, section: dict[str, Any], where: str, value: str, prefix: str
) -> None:
    builder.table("rank_functions").update(
        _value_table(section.get("functions"), f"{where}.functions", value)
    )
    for name in _value_table(section.get("local_functions"), f"{where}.local_functions", "local_rank"):
        builder.table("rank_functions")[name] = "local_rank"
    for name in _value_table(section.get("group_functions"), f"{where}.group_functions", "group_rank"):
        builder.table("rank_functions")[name] = "group_rank"
    builder.table("rank_methods").update(_value_table(section.get("methods"), f"{where}.methods", value))
    builder.table("rank_env").update(_value_table(section.get("env"), f"{where}.env", value))
    builder.table("rank_parameters").update(
        _value_table(section.get("parameters"), f"{where}.parameters", value)
    )
    builder.table("rank_attributes").update(
        _value_table(section.get("attributes"), f"{where}.attributes", value)
    )


def _add_document(builder: _Builder, data: dict[str, Any], where: str) -> None:
    meta = data.get("catalog", {})
    builder.names.append(str(meta.get("name", where)))
    for index, entry in enumerate(data.get("op", [])):
        spec = _op_spec(entry, f"{where}: op #{index + 1}")
        for name in _str_tuple(entry, "names", f"{where}: op #{index + 1}"):
            builder.functions[name] = spec
    for index, entry in enumerate(data.get("method", [])):
        item_where = f"{where}: method #{index + 1}"
        spec = _op_spec(entry, item_where)
        for method in _str_tuple(entry, "methods", item_where) or (str(entry.get("method", "")),):
            if not method:
                raise CatalogError(f"{item_where}: needs 'method' or 'methods'")
            builder.methods.append(
                MethodSpec(
                    method=method,
                    spec=spec,
                    receivers=_str_tuple(entry, "receiver", item_where),
                    any_receiver=bool(entry.get("any_receiver", False)),
                )
            )
    for index, entry in enumerate(data.get("async_session", [])):
        item_where = f"{where}: async_session #{index + 1}"
        for name in _str_tuple(entry, "names", item_where):
            builder.sessions[name] = _session_spec(entry, item_where)
    for index, entry in enumerate(data.get("gradient_sync", [])):
        builder.gradient_syncs.append(_gradient_sync(entry, f"{where}: gradient_sync #{index + 1}"))
    default_groups = data.get("default_group", {})
    builder.default_groups.update(_str_tuple(default_groups, "names", f"{where}: [default_group]"))
    _add_rank_section(builder, data.get("rank", {}), f"{where}: [rank]", "rank", "rank")
    world = data.get("world", {})
    world_functions = _value_table(world.get("functions"), f"{where}: [world].functions", "world")
    builder.table("rank_functions").update(world_functions)
    builder.table("rank_methods").update(
        _value_table(world.get("methods"), f"{where}: [world].methods", "world")
    )
    builder.table("rank_env").update(_value_table(world.get("env"), f"{where}: [world].env", "world"))
    builder.table("rank_parameters").update(
        _value_table(world.get("parameters"), f"{where}: [world].parameters", "world")
    )
    builder.table("rank_attributes").update(
        _value_table(world.get("attributes"), f"{where}: [world].attributes", "world")
    )
    section = data.get("coordinator", {})
    if not isinstance(section, dict):
        raise CatalogError(f"{where}: [coordinator]: expected a table")
    coordinator = _value_table(section.get("attributes"), f"{where}: [coordinator].attributes", "")
    for attribute, meaning in coordinator.items():
        if meaning not in COORDINATOR_VALUES:
            expected = sorted(COORDINATOR_VALUES)
            raise CatalogError(f"{where}: [coordinator].{attribute}: expected one of {expected}")
    builder.table("coordinator_attributes").update(coordinator)
    builder.table("nondeterministic").update(
        _value_table(data.get("nondeterministic"), f"{where}: [nondeterministic]", "varies")
    )
    builder.table("rank_decorators").update(
        _value_table(data.get("rank_decorators"), f"{where}: [rank_decorators]", "rank == 0")
    )
    counters = _value_table(data.get("disabled_counters"), f"{where}: [disabled_counters]", "")
    for name, value in counters.items():
        keyword, _, attribute = value.partition(":")
        if not (keyword.isidentifier() and attribute.isidentifier()):
            raise CatalogError(f'{where}: [disabled_counters] {name}: expected "KEYWORD:ATTRIBUTE"')
    builder.table("disabled_counters").update(counters)
    builder.table("types").update(_value_table(data.get("types"), f"{where}: [types]", ""))
    builder.table("types_in_place").update(
        _value_table(data.get("types_in_place"), f"{where}: [types_in_place]", "")
    )
    kept = _value_table(data.get("kept_arguments"), f"{where}: [kept_arguments]", "")
    for name, value in kept.items():
        if not all(keyword.isidentifier() for keyword in value.split(",")):
            raise CatalogError(f'{where}: [kept_arguments] {name}: expected "KEYWORD,KEYWORD"')
    builder.table("kept_arguments").update(kept)
    builder.table("groups").update(_value_table(data.get("groups"), f"{where}: [groups]", "group"))
    builder.table("group_members").update(
        _value_table(data.get("group_members"), f"{where}: [group_members]", "True")
    )
    builder.table("remote_calls").update(
        _value_table(data.get("remote_calls"), f"{where}: [remote_calls]", "remote call")
    )
    builder.table("attribute_types").update(_attribute_types(data.get("attribute_types"), where))
    builder.table("launchers").update(
        _value_table(data.get("launchers"), f"{where}: [launchers]", "local_rank")
    )
    grids = data.get("group_grids", {})
    if not isinstance(grids, dict):
        raise CatalogError(f"{where}: [group_grids] must be a table of name = [group, ...]")
    for name in grids:
        builder.grids[f"{where}:{name}"] = _str_tuple(grids, name, f"{where}: [group_grids]")


def _session_spec(entry: dict[str, Any], where: str) -> SessionSpec:
    quiet = entry.get("quiet_when", {})
    if not isinstance(quiet, dict) or not all(isinstance(v, str) for v in quiet.values()):
        raise CatalogError(f"{where}: 'quiet_when' must be a table of keyword = source text")
    ends = tuple(tuple(chain.split(".")) for chain in _str_tuple(entry, "ends", where))
    if not ends or not all(all(part.isidentifier() for part in chain) for chain in ends):
        raise CatalogError(f"{where}: 'ends' must list dotted method names called on the handle")
    return SessionSpec(
        what=_optional_str(entry, "what", where) or "background session",
        params=_str_tuple(entry, "params", where),
        group=_optional_str(entry, "group", where),
        ends=ends,
        quiet_when=tuple(sorted((str(k), v) for k, v in quiet.items())),
    )


def _gradient_sync(entry: dict[str, Any], where: str) -> GradientSync:
    op = _optional_str(entry, "op", where)
    wrappers = _str_tuple(entry, "wrappers", where)
    assumed = _optional_str(entry, "assumed", where)
    evidence = _str_tuple(entry, "evidence", where)
    if not op or not (wrappers or assumed):
        raise CatalogError(f"{where}: needs 'op' and 'wrappers' (or 'assumed')")
    if bool(assumed) != is_assumed_op(op) or bool(assumed) != bool(evidence):
        raise CatalogError(
            f"{where}: an assumed reduction needs 'evidence' and an op beginning with "
            f"{ASSUMED_OP_PREFIX!r}, and only an assumed one may have them"
        )
    return GradientSync(
        spec=OpSpec(op=op, source="gradient_sync"),
        wrappers=wrappers,
        group=_optional_str(entry, "group", where),
        paused_by=_str_tuple(entry, "paused_by", where),
        methods=_str_tuple(entry, "methods", where) or ("backward",),
        functions=_str_tuple(entry, "functions", where),
        assumed=assumed,
        evidence=evidence,
        returned_by=_str_tuple(entry, "returned_by", where),
        manual_flag=_optional_str(entry, "manual_flag", where),
    )


def _attribute_types(data: Any, where: str) -> dict[str, str]:
    """`"transformers.Trainer" = { accelerator = "accelerate.Accelerator" }` -> the flat
    `{"transformers.Trainer.accelerator": "accelerate.Accelerator"}`."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise CatalogError(f"{where}: [attribute_types] must be a table of type = {{ attribute = type }}")
    flat: dict[str, str] = {}
    for owner, attributes in data.items():
        if not isinstance(attributes, dict):
            raise CatalogError(f"{where}: [attribute_types] {owner}: expected a table attribute = type")
        for attribute, held in attributes.items():
            if not (attribute.isidentifier() and isinstance(held, str) and held):
                raise CatalogError(f"{where}: [attribute_types] {owner}.{attribute}: expected a type name")
            flat[f"{owner}.{attribute}"] = held
    return flat


def _read_bytes(path: Path) -> bytes:
    try:
        return read_regular_file(path, MAX_CONFIG_BYTES)
    except FileRefused as refused:
        raise CatalogError(f"cannot read catalog {path}: {refused}") from refused
    except OSError as error:
        raise CatalogError(f"cannot read catalog {path}: {error.strerror}") from error


def _read_toml(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        data: dict[str, Any] = tomllib.loads(raw.decode("utf-8"))
        return data
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise CatalogError(f"catalog {path} is not valid TOML: {error}") from error


def load_catalog(
    extra_paths: Iterable[Path] = (), summaries: Iterable[Path | str] = (), documents: Documents = ()
) -> Catalog:
    """Summaries of installed packages first (`documents`, then the summary files), then the
    bundled catalogs, then the user's: a hand-written entry wins over a summarised one."""
    return _load_catalog(tuple(str(path) for path in extra_paths), _sources(summaries, documents))


def catalog_fingerprint(
    extra_paths: Iterable[Path | str] = (), summaries: Iterable[Path | str] = (), documents: Documents = ()
) -> str:
    """`load_catalog(...).fingerprint` from the files' bytes, without parsing them: a
    warm run whose results are all cached never parses a catalog."""
    return _fingerprint(tuple(str(path) for path in extra_paths), _sources(summaries, documents))[0]


# The `[nondeterministic]` category of what the filesystem holds (`os.path.exists`, `open`): per
# process unless the user states that every rank reads one shared filesystem (`shared-filesystem`).
FILESYSTEM_STATE = "filesystem state"


def settings_catalog(settings: Settings) -> Catalog:
    """The catalog a run with `settings` uses (its catalogs, summary files and package summaries)."""
    catalog = load_catalog(
        (Path(p) for p in settings.catalogs), settings.summaries, settings.summary_documents
    )
    if not settings.shared_filesystem and settings.assume_wrapped_models:
        return catalog
    kept = {name: why for name, why in catalog.nondeterministic.items() if why != FILESYSTEM_STATE}
    syncs = tuple(sync for sync in catalog.gradient_syncs if not sync.assumed)
    return replace(
        catalog,
        nondeterministic=kept if settings.shared_filesystem else catalog.nondeterministic,
        gradient_syncs=catalog.gradient_syncs if settings.assume_wrapped_models else syncs,
        fingerprint=settings_catalog_fingerprint(settings),
    )


def settings_catalog_fingerprint(settings: Settings) -> str:
    fingerprint = catalog_fingerprint(settings.catalogs, settings.summaries, settings.summary_documents)
    if settings.shared_filesystem:
        fingerprint += "+shared-fs"
    return fingerprint if settings.assume_wrapped_models else f"{fingerprint}+unwrapped"


_QUOTED_DOTTED = re.compile(rb'"([A-Za-z_][A-Za-z0-9_]*)\.[A-Za-z_]')


@lru_cache(maxsize=8)
def catalogued_packages(extra_paths: tuple[str, ...] = ()) -> frozenset[str]:
    """Top-level packages the bundled and the user's catalogs name (`"torch.distributed.barrier"`),
    read off the files' bytes without parsing them: hand-written entries describe those, so their
    installed source is not summarised (torch itself is the layer summaries are made of)."""
    contents = _fingerprint(extra_paths)[1]
    return frozenset(m.decode() for _, raw in contents for m in _QUOTED_DOTTED.findall(raw))


def _sources(summaries: Iterable[Path | str], documents: Documents) -> Summaries:
    return tuple(str(path) for path in summaries), tuple(documents)


@lru_cache(maxsize=8)
def _fingerprint(
    extra_paths: tuple[str, ...], summaries: Summaries = ((), ())
) -> tuple[str, tuple[tuple[Path, bytes], ...]]:
    """The fingerprint of the summaries, the bundled catalogs and `extra_paths`, and each source
    with its bytes (a summary document is named by its package, not by a path)."""
    digest = hashlib.sha256()
    contents = [(Path(name), text.encode("utf-8")) for name, text in summaries[1]]
    summary_files = [Path(p) for p in summaries[0]]
    for path in [*summary_files, *bundled_catalog_paths(), *(Path(p) for p in extra_paths)]:
        contents.append((path, _read_bytes(path)))
    for path, raw in contents:
        digest.update(path.name.encode() + b"\0" + raw)
    return digest.hexdigest()[:16], tuple(contents)


def _with_defining_names(methods: list[MethodSpec], types: dict[str, str]) -> tuple[MethodSpec, ...]:
    """Each receiver's class also under the name `[types]` gives it (a summary names a class where
    it is defined, `lightning.pytorch.strategies.ddp.DDPStrategy`, a hand-written entry where users
    import it, `lightning.pytorch.strategies.DDPStrategy`): one class, one set of methods."""
    widened = []
    for method in methods:
        named = (types.get(r) for r in method.receivers)
        extra = [t for t in named if isinstance(t, str) and t not in method.receivers]
        receivers = (*method.receivers, *dict.fromkeys(extra))
        widened.append(replace(method, receivers=receivers) if extra else method)
    return tuple(widened)


@lru_cache(maxsize=8)
def _load_catalog(extra_paths: tuple[str, ...], summaries: Summaries = ((), ())) -> Catalog:
    builder = _Builder()
    fingerprint, contents = _fingerprint(extra_paths, summaries)
    summary_count, split = len(summaries[0]) + len(summaries[1]), 0  # the summaries come first
    for index, (path, raw) in enumerate(contents):
        split = len(builder.methods) if index == summary_count else split
        data = _read_toml(path, raw)
        try:
            _add_document(builder, data, path.name)
        except CatalogError:
            raise
        except (TypeError, AttributeError) as error:
            raise CatalogError(f"catalog {path}: malformed entry ({error})") from error
    tables = builder.tables
    # A call matches the first method entry that fits (`Catalog.method_specs`): the hand-written
    # ones first, so they win over summarised ones as a hand-written function does (read later).
    methods = [*builder.methods[split:], *builder.methods[:split]]
    return Catalog(
        functions=builder.functions,
        methods=_with_defining_names(methods, tables.get("types", {})),
        rank_functions=tables.get("rank_functions", {}),
        rank_methods=tables.get("rank_methods", {}),
        rank_env=tables.get("rank_env", {}),
        rank_parameters=tables.get("rank_parameters", {}),
        rank_attributes=tables.get("rank_attributes", {}),
        coordinator_attributes=tables.get("coordinator_attributes", {}),
        nondeterministic=tables.get("nondeterministic", {}),
        rank_decorators=tables.get("rank_decorators", {}),
        disabled_counters=tables.get("disabled_counters", {}),
        types=tables.get("types", {}),
        types_in_place=tables.get("types_in_place", {}),
        kept_arguments=tables.get("kept_arguments", {}),
        groups=tables.get("groups", {}),
        group_members=tables.get("group_members", {}),
        group_grids=tuple(builder.grids.values()),
        remote_calls=tables.get("remote_calls", {}),
        attribute_types=tables.get("attribute_types", {}),
        launchers=tables.get("launchers", {}),
        sessions=builder.sessions,
        default_groups=frozenset(builder.default_groups),
        gradient_syncs=tuple(builder.gradient_syncs),
        names=tuple(builder.names),
        fingerprint=fingerprint,
    )
