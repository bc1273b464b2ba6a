"""Summaries of an installed package: which of its functions communicate, and which return the rank.

In: a site-packages folder, a top-level package name, the modules of it the analysed code imports,
the catalog and the settings. Out: a `PackageSummary` whose `document` is a catalog in the format of
docs/catalog-format.md (`[[op]]`, `[[method]]`, `[types]`, `[rank]`), so that a call into the
package is answered like a catalogued call.

Nothing of the package is imported or run: its files are read as text, and the engine's own
machinery does the work. The files reached from the imported modules through the package's own
imports (and only those, at most `MAX_FILES`) become a project (`project.build_project`); each
function or method that may communicate is run by the interpreter as a root, its helpers of the
package inlined as in a checked project, and it is summarised when every path that does not raise
issues the same collectives (an `OpSpec`: the op, its parameters, and the parameter that carries
the group when the group is one passed in). A function whose every path returns the same rank
expression (`rank == world - 1`) is summarised in `[rank]`. Anything else — collectives on some
paths only, loops, callbacks, point-to-point — is left out: the call stays unknown code.
"""

from __future__ import annotations

import ast
import ctypes
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from collcheck.catalog import CONTEXT_METHODS, Catalog
from collcheck.config import Settings
from collcheck.findings import FileError
from collcheck.import_scan import imported_names
from collcheck.source import FileRefused, read_regular_file, read_source
from collcheck.static.budget import BudgetExceeded, file_budget
from collcheck.static.call_graph import MODULE_CODE
from collcheck.static.groups import SIZE_PREFIX, atoms_of
from collcheck.static.interpret import Interpreter
from collcheck.static.loader import FunctionNode, Loader, ModuleInfo
from collcheck.static.module_values import complete_loaded_module
from collcheck.static.names import module_imports, qualified_name, resolve_relative
from collcheck.static.object_values import kept_constructor_arguments
from collcheck.static.prefilter import rank_words, trigger_pattern
from collcheck.static.program import CommEvent, EventKind, ExitKind
from collcheck.static.program import Path as ProgramPath
from collcheck.static.project import FileFacts, build_project, file_facts, realpath_once
from collcheck.static.receivers import filled_by_the_object
from collcheck.static.smt import SolveStats
from collcheck.static.state import SET_IN_ONE_ARM, Frame, PathLimitExceeded, State
from collcheck.static.summary_conditions import Condition, Configuration, sufficient_condition
from collcheck.static.symbolic import Atom, BinOp, BoolOp, Compare, Const, Expr, GroupVal, Not, Z3Translator
from collcheck.static.values import where_of

MAX_FILES = 400  # files of one package read per run (the reach of what the analysed code imports)
MAX_FILE_BYTES = 2 * 1024 * 1024
FILE_SECONDS = 10.0  # the interpreter's wall-clock budget per file of the package
PACKAGE_SECONDS = 120.0  # and per package: past it the remaining files are left out (a note says so)
POSSIBLE_TIMEOUT_MS = 500  # per path whose possibility decides a summary (unknown: possible)
# Atoms a rank expression of the catalog may name (catalog_values reads them back).
_VALUE_ATOMS = frozenset({"rank", "world", "local_rank", "local_world", "node_rank"})
# The value of `super().NAME` where the base's attribute is not followed (an unknown call's result).
_BASE_ATTRIBUTE = "call:super()."
_VALUE_OPERATORS = frozenset({"+", "-", "*", "//", "%", "==", "!=", "<", "<=", ">", ">="})


@dataclass(frozen=True)
class PackageSummary:
    package: str
    document: dict[str, Any]  # a catalog document (TOML-shaped: tables, lists, strings)
    files_read: int
    notes: tuple[str, ...] = ()


@dataclass
class _Found:
    """What the summaries of one package collect before they become a catalog document."""

    ops: dict[str, dict[str, Any]] = field(default_factory=dict)  # qualified name -> [[op]] entry
    methods: list[dict[str, Any]] = field(default_factory=list)
    classes: dict[str, str] = field(default_factory=dict)  # spelling -> defining qualified name
    rank: dict[str, str] = field(default_factory=dict)  # qualified name -> value expression
    notes: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # class -> constructor keywords kept as attributes
    solving: SolveStats = field(default_factory=SolveStats)  # one z3 context for the package


def summarise_package(
    site: str,
    package: str,
    modules: list[str],
    catalog: Catalog,
    settings: Settings,
    max_files: int = MAX_FILES,
    package_seconds: float = PACKAGE_SECONDS,
    file_seconds: float = FILE_SECONDS,
) -> PackageSummary:
    """The summary of `package` (installed in `site`) as far as `modules` reach, made in at most
    `package_seconds` (the files past it are left out, a note says so), `file_seconds` a file."""
    files = reached_files(site, package, modules, max_files)
    found = _Found()
    if _imports_communication(files, catalog):
        _summarise_files(files, catalog, settings, found, package_seconds, file_seconds)
    document = _document(package, found)
    return PackageSummary(package, document, len(files), tuple(found.notes))


# ----------------------------------------------------------------------------- the files reached


def module_file(site: str, module: str) -> str | None:
    """The file of a dotted module name inside `site` (`a/b.py` or `a/b/__init__.py`), or None;
    a file whose real path leaves the package's own folder (a link) is not read."""
    parts = module.split(".")
    if not all(part.isidentifier() for part in parts):
        return None
    base = os.path.join(site, *parts)
    top = os.path.realpath(os.path.join(site, parts[0]))
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            real = os.path.realpath(candidate)
            single = len(parts) == 1 and candidate.endswith(".py") and real == top + ".py"
            if single or real.startswith(top + os.sep):
                return candidate
            return None
    return None


def reached_files(
    site: str, package: str, modules: list[str], max_files: int = MAX_FILES
) -> dict[str, tuple[str, frozenset[str]]]:
    """Module name -> (file, the modules it imports) of every module of `package` that `modules`
    import, any number of steps (also the packages above each module: importing `a.b` runs
    `a/__init__.py`). Imports are read off the text (`import_scan`), not parsed."""
    found: dict[str, tuple[str, frozenset[str]]] = {}
    todo = [name for name in modules if name.split(".")[0] == package]
    while todo and len(found) < max_files:
        name = todo.pop(0)
        for candidate in _candidates(name):
            if candidate in found:
                continue
            path = module_file(site, candidate)
            if path is None:
                continue
            try:
                raw = read_regular_file(path, MAX_FILE_BYTES)
            except (OSError, FileRefused):
                raw = b""
            imported = frozenset(imported_names(raw, _package_of(candidate, path)))
            found[candidate] = (path, imported)
            todo.extend(m for m in sorted(imported) if m.split(".")[0] == package)
    return found


def _package_of(module: str, path: str) -> str:
    """The package a file's relative imports start from: itself for an `__init__.py`."""
    return module if path.endswith("__init__.py") else module.rpartition(".")[0]


def _candidates(name: str) -> list[str]:
    """`a.b.c` may be a module or a name in `a.b`: each prefix, longest first."""
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(len(parts), 0, -1)]


@dataclass(frozen=True)
class _Bindings:
    """What a file binds at module level from its imports (`local -> qualified`), and the modules
    it star-imports: its re-exports."""

    names: tuple[tuple[str, str], ...] = ()
    stars: tuple[str, ...] = ()


def _bindings(path: str, module: str) -> _Bindings:
    source = read_source(Path(path), MAX_FILE_BYTES)
    if isinstance(source, FileError):
        return _Bindings()
    try:
        tree = ast.parse(source.text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _Bindings()
    current = _package_of(module, path)
    stars = [
        resolve_relative(node.module, node.level, current)
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names)
    ]
    return _Bindings(tuple(module_imports(tree, current).names.items()), tuple(stars))


def _imports_communication(files: dict[str, tuple[str, frozenset[str]]], catalog: Catalog) -> bool:
    """A package none of whose reached files imports a library with catalogued collectives (torch,
    deepspeed, ...) cannot issue one: it is not modelled at all (sympy, matplotlib: seconds saved)."""
    libraries = {name.split(".")[0] for name in catalog.functions}
    libraries |= {receiver.split(".")[0] for method in catalog.methods for receiver in method.receivers}
    return any(name.split(".")[0] in libraries for _, imported in files.values() for name in imported)


# ----------------------------------------------------------------------------- running the engine


class _RootStates(Interpreter):
    """An interpreter that keeps the states of the root function's body (for what it returns)."""

    root_body: list[ast.stmt] | None = None
    root_states: tuple[State, ...] = ()

    def exec_block(self, body: Any, states: list[State], frame: Frame) -> list[State]:
        result = super().exec_block(body, states, frame)
        if body is self.root_body:
            self.root_states = tuple(result)
        return result


def _summarise_files(
    files: dict[str, tuple[str, frozenset[str]]],
    catalog: Catalog,
    settings: Settings,
    found: _Found,
    package_seconds: float,
    file_seconds: float,
) -> None:
    trigger, ranked = trigger_pattern(catalog), rank_words(catalog)
    facts = {}
    for path, _ in files.values():
        source = read_source(Path(path), MAX_FILE_BYTES)
        if not isinstance(source, FileError):
            facts[path] = file_facts(source.text, trigger, ranked)
    # Dotted names from site-packages down (`project.module_names` would stop at a namespace
    # package's folder without `__init__.py`: megatron-core's `megatron/`).
    names = [(name, path) for name, (path, _) in files.items() if path in facts]
    project = build_project(facts, names)
    # The index resolves imports beside a file; a package's `from ..comm import helper` is
    # followed by the helper's name instead (more files modelled, never fewer facts).
    reaching = _communicating_by_name(facts)
    project = replace(project, communicating_names=project.communicating_names | reaching)
    packages = {
        found: _package_of(name, path) for name, path in names for found in (path, realpath_once(path))
    }
    loader = Loader(catalog, project, settings, complete_loaded_module, packages)
    started = time.monotonic()
    for module_name, (path, _) in sorted(files.items()):
        if time.monotonic() - started > package_seconds:
            found.notes.append(
                f"over the {package_seconds:g} s budget of a package: {module_name} and after left out"
            )
            break
        if path not in facts:
            continue
        interesting = (
            path in project.selected or _names_any(facts[path], reaching) or bool(facts[path].rank_hits)
        )
        if not interesting:
            continue
        try:
            with file_budget(file_seconds):
                module = loader.load(path)
                if module is not None:
                    _summarise_module(module, module_name, settings, found)
        except BudgetExceeded:
            found.notes.append(f"{module_name}: over the {file_seconds:g} s budget, partly summarised")
        except ctypes.ArgumentError as error:
            # The budget's alarm went off while z3's arguments were being converted: ctypes wraps
            # the BudgetExceeded it raised.
            if not isinstance(error.__context__, BudgetExceeded) and "BudgetExceeded" not in str(error):
                raise
            found.notes.append(f"{module_name}: over the {file_seconds:g} s budget, partly summarised")
        except RecursionError:
            found.notes.append(f"{module_name}: too deeply nested to summarise")
    _subclasses(files, found)
    _reexports(files, found)


def _communicating_by_name(facts: dict[str, FileFacts]) -> frozenset[str]:
    """Top-level functions that name a collective, or name (by its last part) such a function,
    any number of steps."""
    names = {name for found in facts.values() for name in found.hits}
    changed = True
    while changed:
        changed = False
        for found in facts.values():
            for function, imported, local in found.references:
                if function == MODULE_CODE or function in names:
                    continue
                if any(q.rsplit(".", 1)[-1] in names for q in imported) or not names.isdisjoint(local):
                    names.add(function)
                    changed = True
    return frozenset(names)


def _names_any(found: FileFacts, names: frozenset[str]) -> bool:
    """Some part of the file (a function, or a class's methods) names one of `names`."""
    return any(
        not names.isdisjoint(local) or any(q.rsplit(".", 1)[-1] in names for q in imported)
        for _, imported, local in found.references
    )


def _summarise_module(module: ModuleInfo, module_name: str, settings: Settings, found: _Found) -> None:
    interpreter = _RootStates(module, settings.max_paths, settings.max_inline_depth, settings.max_steps)
    for name, function in module.functions.items():
        _summarise_function(interpreter, function, None, f"{module_name}.{name}", found)
    for class_name, info in module.classes.items():
        qualified = f"{module_name}.{class_name}"
        before = len(found.methods)
        for name, method in info.methods.items():
            # A constructor is no method call; `__call__` is, and `with` calls `__enter__`/`__exit__`.
            if name.startswith("__") and name != "__call__" and name not in CONTEXT_METHODS:
                continue
            _summarise_function(interpreter, method, class_name, f"{qualified}.{name}", found)
        read = {a for entry in found.methods[before:] for a in _receiver_attributes(entry.get("when", ""))}
        kept = kept_constructor_arguments(module, class_name) & read if read else frozenset()
        if kept:  # `Gathered(ps, enabled=False)` then decides `when = "self.enabled"`
            found.kept[qualified] = ",".join(sorted(kept))


def _receiver_attributes(condition: str) -> set[str]:
    """The `self.ATTRIBUTE`s a `when` reads."""
    if not condition:
        return set()
    tree = ast.parse(condition, mode="eval")
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
    }


def _summarise_function(
    interpreter: _RootStates, function: FunctionNode, class_name: str | None, qualified: str, found: _Found
) -> None:
    module = interpreter.module
    communicates = function in module.communicating
    project = module.project
    returns_rank = project is not None and function.name in project.rank_names
    if not communicates and not returns_rank and not _is_property(function):
        return
    interpreter.root_body = function.body
    interpreter.root_states = ()
    label = qualified.rsplit(".", 2)[-2] + "." + function.name if class_name else function.name
    try:
        regions = interpreter.run_function(function, class_name, label)
    except PathLimitExceeded:
        found.notes.append(f"{qualified}: over the work budget, not summarised")
        return
    if communicates:
        named = frozenset(module.catalog.groups.values()) | {"world"}
        filled = filled_by_the_object(module, class_name) if class_name else frozenset()
        subject = _Subject(function, class_name, qualified, named, found.solving, filled)
        entry = _op_entry(regions[0].paths, subject)
        if entry is not None:
            _add_op(found, entry, class_name, function.name, qualified)
        return
    value = _returned_rank(interpreter.root_states)
    if value is None:
        return
    if class_name is None:
        found.rank[qualified] = value
    elif _is_property(function):
        found.rank[f"attribute:{function.name}"] = value


def _is_property(function: FunctionNode) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in function.decorator_list)


def _parameters(function: FunctionNode, class_name: str | None) -> list[str]:
    args = function.args
    names = [a.arg for a in [*args.posonlyargs, *args.args]]
    if class_name is not None and names and not _is_static(function):
        names = names[1:]  # `self` / `cls`: the receiver
    return [*names, *(a.arg for a in args.kwonlyargs)]


def _is_static(function: FunctionNode) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in function.decorator_list)


@dataclass(frozen=True)
class _Subject:
    """The function being summarised, and the group names an entry may use as its default."""

    function: FunctionNode
    class_name: str | None
    qualified: str
    named_groups: frozenset[str]  # the catalog's `[groups]` names, and `world`
    solving: SolveStats  # its z3 context, made on first use and shared by the package's functions
    # the receiver's attributes only methods without arguments store (`receivers.filled_by_the_object`)
    filled_by_the_object: frozenset[str] = frozenset()

    @property
    def parameters(self) -> list[str]:
        return _parameters(self.function, self.class_name)


def _op_entry(paths: list[ProgramPath], subject: _Subject) -> dict[str, Any] | None:
    """The `[[op]]` entry of a function whose every path that does not raise and issues collectives
    begins with the same ones on the same group (`when`: the configuration under which it does, if
    some paths issue none), or None."""
    kept = [p for p in paths if p.exit is None or p.exit.kind is ExitKind.RETURN]
    sequences = {tuple(p.events) and _sequence(p, subject) for p in kept}
    if len(sequences) > 1:  # some may be the paths of a process alone in its world or group
        kept = [p for p in kept if _possible(p, subject.solving)]
        sequences = {tuple(p.events) and _sequence(p, subject) for p in kept}
    if None in sequences:
        return None
    issued = sorted((s for s in sequences if s), key=repr)  # `via` from the same path every run
    if len(issued) > 1:  # paths that go on differently: what every one of them begins with
        issued = [_common_prefix(issued)]
    condition = None
    if () in sequences and issued and issued[0]:
        # Collectives on some paths only: summarised when the configuration decides (`when`).
        condition = _configuration_condition(kept, subject)
        if condition is None:
            return None
    if len(issued) != 1:
        return None
    sequence = issued[0]
    if not sequence:
        return None
    ops = [op for op, _, _ in sequence]
    groups = {group for _, group, _ in sequence}
    if len(groups) != 1:
        return None
    group = groups.pop()
    entry: dict[str, Any] = {"op": "+".join(ops), "params": subject.parameters, "via": list(sequence[0][2])}
    if group is not None:
        role, value = group
        entry[role] = value
    if condition is not None:
        entry["when"] = condition.text
        if condition.defaults:
            entry["defaults"] = dict(condition.defaults)
    return entry


def _common_prefix(sequences: list[tuple[Step, ...]]) -> tuple[Step, ...]:
    """The collectives (op and group) every sequence begins with; `via` of the first one."""
    first = sequences[0]
    length = 0
    while length < len(first) and all(
        len(other) > length and other[length][:2] == first[length][:2] for other in sequences
    ):
        length += 1
    return first[:length]


def _configuration_condition(paths: list[ProgramPath], subject: _Subject) -> Condition | None:
    communicating = [tuple(p.conds) for p in paths if p.events]
    silent = [tuple(p.conds) for p in paths if not p.events]
    configuration = Configuration(
        tuple(subject.parameters), where_of(subject.function), subject.class_name is not None
    )
    return sufficient_condition(communicating, silent, configuration, subject.function, subject.solving)


def _possible(path: ProgramPath, solving: SolveStats) -> bool:
    """A path some process of a job can take: in a world of at least two processes, and in
    groups of at least two members, as the engine assumes of a group passed around in SPMD code
    (`if get_world_size(group) < 2: return t` before the all-reduce is no second behaviour).
    `solving` holds the one z3 context of the package's summary."""
    sizes = [a for a in atoms_of(path.conds) if a.kind == "world" or a.name.startswith(SIZE_PREFIX)]
    z3 = solving.z3_in_context()
    translator = Z3Translator(z3)
    world, rank = translator.world, translator.rank("a")
    facts = [world >= 2, rank >= 0, rank < world]
    facts += [translator.as_int(a, "a") >= 2 for a in sizes if a.kind != "world"]
    facts += [translator.as_bool(condition, "a") for condition in path.conds]
    solver = z3.Solver()
    solver.set("timeout", POSSIBLE_TIMEOUT_MS)
    solver.add(*facts, *translator.side_constraints)
    return bool(solver.check() != z3.unsat)


Step = tuple[str, tuple[str, str] | None, tuple[str, ...]]  # op, (role, value) of its group, via


def _sequence(path: ProgramPath, subject: _Subject) -> tuple[Step, ...] | None:
    """The path's collectives as (op, group role, helpers it went through); None when one of its
    events cannot be said in a catalog entry (a loop, a callback, point-to-point, a group that is
    none of the function's parameters, its receiver's attributes or the catalog's groups)."""
    steps: list[Step] = []
    for event in path.events:
        if not isinstance(event, CommEvent) or event.kind is not EventKind.COLLECTIVE:
            return None
        group = _group_role(event.group, subject)
        if group is False:
            return None
        via = (*(site.callee for site in event.chain), event.op)
        steps.append((event.op, group, via))  # type: ignore[arg-type]
    return tuple(steps)


def _group_role(group: GroupVal | None, subject: _Subject) -> tuple[str, str] | bool | None:
    """("group", parameter) for a group passed in, ("default_group", name) for one the function
    finds itself (an attribute of its receiver, a catalogued group), None for the world, False
    for anything else (chosen per rank, computed from an argument: not a catalog entry)."""
    if group is None:
        return None
    if group.per_rank or group.color is not None or group.created:
        return False
    prefix, _, where = group.key.partition("@")
    if prefix.startswith("param:") and where == where_of(subject.function):
        name = prefix[len("param:") :]
        return ("group", name) if name in subject.parameters else False
    key = group.key
    if key.startswith(SET_IN_ONE_ARM + "self."):
        # `if self._group is None: self._group = dist.group.WORLD` in a getter the function read:
        # its arms joined, the value is the receiver's attribute or what the object filled it with,
        # the group the object holds from then on (`interpret._lazy_initialisation`), unless a
        # method that takes arguments may have stored one of them there.
        key = key[len(SET_IN_ONE_ARM) :]
        if key[len("self.") :] not in subject.filled_by_the_object:
            return False
    elif key.startswith(_BASE_ATTRIBUTE):
        # `return super().group` (a getter of a base in another file, not followed): the
        # receiver's attribute as its base reads it, a value of the object like `self.group`.
        key = "self." + key[len(_BASE_ATTRIBUTE) :]
    attribute = key[len("self.") :] if key.startswith("self.") else ""
    if attribute.isidentifier() and subject.class_name is not None:
        owner = subject.qualified.rsplit(".", 1)[0]
        return ("default_group", f"{owner}.{attribute}")
    if group.key in subject.named_groups:
        return ("default_group", group.key)
    return False


def _add_op(found: _Found, entry: dict[str, Any], class_name: str | None, name: str, qualified: str) -> None:
    if class_name is None:
        found.ops[qualified] = entry
        return
    owner = qualified.rsplit(".", 1)[0]
    found.classes.setdefault(owner, owner)
    found.methods.append({**entry, "method": name, "receiver": [owner], "defined": qualified})


def _returned_rank(states: tuple[State, ...]) -> str | None:
    """The value expression every path returns, when it reads the rank or the world size."""
    if not states or any(
        s.exit is None or s.exit.kind is not ExitKind.RETURN or s.returned is None for s in states
    ):
        return None
    values = {s.returned for s in states}
    if len(values) != 1:
        return None
    text = _value_text(values.pop())
    return text if text is not None and any(atom in text for atom in ("rank", "world")) else None


def _value_text(value: Expr | None) -> str | None:
    """A symbolic value as a catalog value expression, or None when it is not one."""
    if isinstance(value, Const) and isinstance(value.value, (int, bool)):
        return repr(value.value)
    if isinstance(value, Atom):
        return value.name if value.name in _VALUE_ATOMS else None
    if isinstance(value, (BinOp, Compare)) and value.op in _VALUE_OPERATORS:
        left, right = _value_text(value.left), _value_text(value.right)
        return None if left is None or right is None else f"({left} {value.op} {right})"
    if isinstance(value, BoolOp):
        parts = [_value_text(v) for v in value.values]
        return None if None in parts else "(" + f" {value.op} ".join(parts) + ")"  # type: ignore[arg-type]
    if isinstance(value, Not):
        inner = _value_text(value.operand)
        return None if inner is None else f"(not {inner})"
    return None


# ----------------------------------------------------------------------------- the catalog document


def _reexports(files: dict[str, tuple[str, frozenset[str]]], found: _Found) -> None:
    """`from ourlib.comm import sync` (or `import *`) in `ourlib/__init__.py`: `ourlib.sync` is the
    same function. Only files that import a module with summaries are parsed for this."""
    tables: list[dict[str, Any]] = [found.ops, found.classes, found.rank]
    parsed: dict[str, _Bindings] = {}
    for _ in range(3):  # re-exports of re-exports
        summarised = {name.rsplit(".", 1)[0] for table in tables for name in table}
        for module_name, (path, imported) in files.items():
            if imported.isdisjoint(summarised):
                continue
            if module_name not in parsed:
                parsed[module_name] = _bindings(path, module_name)
            bindings = parsed[module_name]
            pairs = list(bindings.names)
            for star in bindings.stars:
                prefix = star + "."
                pairs.extend(
                    (name[len(prefix) :], name)
                    for table in tables
                    for name in list(table)
                    if name.startswith(prefix)
                    and "." not in name[len(prefix) :]
                    and not name.startswith(prefix + "_")
                )
            for local, target in pairs:
                spelling = f"{module_name}.{local}"
                for table in tables:
                    if target in table and spelling not in table:
                        table[spelling] = table[target]


def _subclasses(files: dict[str, tuple[str, frozenset[str]]], found: _Found) -> None:
    """`class Fast(Reducer)` anywhere in the files read: `Fast().flush(t)` is the summarised
    `Reducer.flush`, when `Fast` overrides none of `Reducer`'s methods but `__init__` (an override
    of a helper `flush` calls could change what it issues). Only files that define or import a
    module of a class with summarised methods are parsed for this."""
    owners = {receiver for entry in found.methods for receiver in entry["receiver"]}
    modules = {owner.rsplit(".", 1)[0] for owner in owners}
    classes: dict[str, tuple[list[str], frozenset[str]]] = {}
    for module_name, (path, imported) in files.items():
        if module_name in modules or not imported.isdisjoint(modules):
            for name, bases, defined in _classes(path, module_name):
                classes[f"{module_name}.{name}"] = (bases, defined)
    for _ in range(3):  # subclasses of subclasses
        added = False
        for qualified, (bases, defined) in classes.items():
            for base in (found.classes.get(b, b) for b in bases):
                overridden = defined & classes.get(base, ([], frozenset()))[1]
                if not overridden - {"__init__"}:
                    added = _inherit(found, qualified, base) or added
        if not added:
            return


def _inherit(found: _Found, qualified: str, base: str) -> bool:
    """Add class `qualified` to the receivers of `base`'s summarised methods."""
    added = False
    for entry in found.methods:
        receivers = entry["receiver"]
        if base in receivers and qualified not in receivers:
            receivers.append(qualified)
            found.classes.setdefault(qualified, qualified)
            added = True
    return added


def _classes(path: str, module_name: str) -> list[tuple[str, list[str], frozenset[str]]]:
    """Each top-level class of a file: its name, its bases' qualified names, the methods it defines."""
    source = read_source(Path(path), MAX_FILE_BYTES)
    if isinstance(source, FileError):
        return []
    try:
        tree = ast.parse(source.text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    imports = module_imports(tree, _package_of(module_name, path))
    local = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    classes = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = []
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in local:
                bases.append(f"{module_name}.{base.id}")
            elif (qualified := qualified_name(base, imports)) is not None:
                bases.append(qualified)
        defined = frozenset(
            item.name for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
        )
        classes.append((node.name, bases, defined))
    return classes


def _document(package: str, found: _Found) -> dict[str, Any]:
    document: dict[str, Any] = {"catalog": {"name": f"summary of {package}"}}
    ops: dict[str, dict[str, Any]] = {}
    for name, entry in sorted(found.ops.items()):
        key = repr(sorted(entry.items()))
        ops.setdefault(key, {**entry, "names": []})["names"].append(name)
    if ops:
        document["op"] = list(ops.values())
    if found.methods:
        document["method"] = found.methods
    if found.classes:
        document["types"] = dict(sorted(found.classes.items()))
    if found.kept:
        document["kept_arguments"] = dict(sorted(found.kept.items()))
    functions = {k: v for k, v in sorted(found.rank.items()) if not k.startswith("attribute:")}
    attributes = {k.split(":", 1)[1]: v for k, v in sorted(found.rank.items()) if k.startswith("attribute:")}
    rank: dict[str, Any] = {}
    if functions:
        rank["functions"] = functions
    if attributes:
        rank["attributes"] = attributes
    if rank:
        document["rank"] = rank
    return document
