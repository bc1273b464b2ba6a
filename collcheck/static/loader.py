"""The module model and its loader: what one analysed file holds, and other files of the run.

In: a parsed `ast.Module` and the catalog (and, for a run over a project, a `Loader` that finds
and loads the other files of the run). Out: a `ModuleInfo` — the file's functions, classes,
import table, the functions that reach a collective (directly or through helpers, also in other
files), and, once `Loader.complete` (the interpreter) has run over its top-level code, its module
globals and class attributes.

`Loader` keeps one `ModuleInfo` per file and process: a file met as another file's helper is
parsed and modelled once, and the file analysed later reuses it. Nothing here runs or imports
the analysed code.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import TypeVar

from collcheck.catalog import Catalog
from collcheck.config import Settings
from collcheck.findings import FileError
from collcheck.lines import line_starts
from collcheck.source import SourceFile, read_source
from collcheck.static.inferred_types import inferred_receiver
from collcheck.static.launchers import launched_functions
from collcheck.static.method_wrappers import wrapped_methods
from collcheck.static.module_hooks import CALL, module_hook_table
from collcheck.static.names import (
    ImportTable,
    add_import,
    forget_walks,
    imports_under,
    module_imports,
    nodes_under,
    qualified_name,
    starts_a_process,
)
from collcheck.static.prefilter import IDENTIFIER, trigger_pattern
from collcheck.static.project import Project, read_digest, realpath_once
from collcheck.static.project import identity as project_identity
from collcheck.static.reads import note, note_model, recording
from collcheck.static.reexports import MAX_REEXPORTS
from collcheck.static.symbolic import Const, Expr
from collcheck.static.wrapped import uses_wrapped, wrapped_names

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True, eq=False)
class ClassInfo:
    node: ast.ClassDef
    methods: dict[str, FunctionNode]
    bases: list[str]
    attributes: dict[str, Expr] = field(default_factory=dict)
    # `@property` getters by name (a setter of the same name replaces the getter in `methods`)
    properties: dict[str, FunctionNode] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class ModuleInfo:
    """One file. The tables are filled while it is modelled (`build_module`, then the
    `module_values.complete_module` for `globals` and class attributes), never replaced."""

    path: str
    tree: ast.Module
    imports: ImportTable
    catalog: Catalog
    loader: Loader | None = None  # other files of the run; None for a file checked alone
    functions: dict[str, FunctionNode] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    globals: dict[str, Expr] = field(default_factory=dict)
    communicating: set[FunctionNode] = field(default_factory=set)
    # Of `communicating`, the functions that reach a collective only through an assumed gradient
    # reduction (their own or an in-file helper's backward, gradient_sync.py): followed within
    # the file, never as another file's helper (`remote_function`, inliner).
    assumed_only: set[FunctionNode] = field(default_factory=set)
    mutable_globals: set[str] = field(default_factory=set)  # names some function declares `global`
    # functions a process launcher starts (`mp.spawn(train)`) -> the value of their first parameter
    launched: dict[FunctionNode, str] = field(default_factory=dict)
    # What the model was built from (its file and the files building it read), reported again to
    # every later file that uses it (reads.py); filled once the model is complete.
    reads: dict[str, str] = field(default_factory=dict)

    @property
    def project(self) -> Project | None:
        return self.loader.project if self.loader is not None else None


_T = TypeVar("_T")


def inherited(
    module: ModuleInfo,
    class_name: str,
    name: str,
    table: Callable[[ClassInfo], Mapping[str, _T]],
    seen: frozenset[str] = frozenset(),
) -> _T | None:
    """`name` in the class or, failing that, its bases of this module (methods, attributes)."""
    info = module.classes.get(class_name)
    if info is None or class_name in seen:
        return None
    if name in table(info):
        return table(info)[name]
    for base in info.bases:
        found = inherited(module, base, name, table, seen | {class_name})
        if found is not None:
            return found
    return None


def inherited_attribute(module: ModuleInfo, class_name: str, name: str, depth: int = 0) -> Expr | None:
    """A class attribute from the class, its bases of this module, or a base class imported from
    another file of the run (`MAIN_PROCESS_RANK = -1` in a test base class of another module)."""
    found = inherited(module, class_name, name, lambda info: info.attributes)
    if found is not None or module.loader is None or depth > 4:
        return found
    info = module.classes.get(class_name)
    for base in info.node.bases if info is not None else []:
        qualified = qualified_name(base, module.imports)
        located = module.loader.project.lookup(qualified, module.path) if qualified else None
        if located is None or "." in located[1]:
            continue
        other = module.loader.load(located[0])
        if other is not None and other is not module:
            found = inherited_attribute(other, located[1], name, depth + 1)
            if found is not None:
                return found
    return None


def parse(source: SourceFile) -> ast.Module | FileError:
    try:
        return ast.parse(source.text, filename=source.path)
    except SyntaxError as error:
        return FileError(source.path, f"syntax error: {error.msg}", error.lineno)
    except (RecursionError, MemoryError):
        return FileError(source.path, "too deeply nested to parse")
    except ValueError as error:
        return FileError(source.path, f"cannot parse: {error}")


def build_module(
    tree: ast.Module,
    path: str,
    catalog: Catalog,
    loader: Loader | None = None,
    text: str | None = None,
    package: str = "",
) -> ModuleInfo:
    """The module model of `tree`, without globals and class attributes (see `complete_module`).
    `package`: the dotted package the file is in, when known, for its relative imports."""
    imports = module_imports(tree, package)
    module = ModuleInfo(path=path, tree=tree, imports=imports, catalog=catalog, loader=loader)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            module.functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            _add_class(module, node)
    communicating, assumed_only = _communicating_functions(module, text)
    module.communicating.update(communicating)
    module.assumed_only.update(assumed_only)
    module.launched.update(
        launched_functions(tree, module.imports, module.functions, catalog.launchers, text)
    )
    return module


def _add_class(module: ModuleInfo, node: ast.ClassDef, depth: int = 0) -> None:
    """A class and the classes nested in it (a test suite's `class _Base` inside its case): each is
    analysed under its own name, the first one of a name kept."""
    methods = {
        item.name: item for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    bases = [base.id for base in node.bases if isinstance(base, ast.Name)]
    properties = {
        item.name: item
        for item in node.body
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_property(item, module.imports)
    }
    info = ClassInfo(node, methods, bases, properties=properties)
    info.attributes.update(_class_constants(node))
    module.classes.setdefault(node.name, info)
    if depth < 4:
        for item in node.body:
            if isinstance(item, ast.ClassDef):
                _add_class(module, item, depth + 1)


def is_property(function: FunctionNode, imports: ImportTable) -> bool:
    """`@property def name(self)`: the builtin (not a name imported in its place)."""
    return any(
        isinstance(d, ast.Name) and d.id == "property" and imports.lookup("property") is None
        for d in function.decorator_list
    )


def property_names(module: ModuleInfo) -> frozenset[str]:
    """The names of the `@property` getters of the file's classes."""
    return frozenset(name for info in module.classes.values() for name in info.properties)


def _class_constants(node: ast.ClassDef) -> dict[str, Expr]:
    """`MAIN_PROCESS_RANK = -1` in a class body: `self.MAIN_PROCESS_RANK` is that constant."""
    constants: dict[str, Expr] = {}
    for item in node.body:
        if not isinstance(item, ast.Assign) or len(item.targets) != 1:
            continue
        target, value = item.targets[0], item.value
        if (
            isinstance(value, ast.UnaryOp)
            and isinstance(value.op, ast.USub)
            and isinstance(value.operand, ast.Constant)
        ):
            if isinstance(value.operand.value, int):
                constants[getattr(target, "id", "")] = Const(-value.operand.value)
            continue
        literal = isinstance(value, ast.Constant) and (
            isinstance(value.value, (int, str, bool)) or value.value is None
        )
        if isinstance(target, ast.Name) and literal:
            constants[target.id] = Const(value.value)  # type: ignore[attr-defined]
    constants.pop("", None)
    return constants


def _all_functions(module: ModuleInfo) -> list[FunctionNode]:
    functions: list[FunctionNode] = list(module.functions.values())
    for info in module.classes.values():
        functions.extend(info.methods.values())
    return functions


def _communicating_functions(
    module: ModuleInfo, text: str | None = None
) -> tuple[set[FunctionNode], set[FunctionNode]]:
    """Functions that reach a collective, directly or through helpers of this module (fixed point),
    and those of them that reach one only through an assumed gradient reduction.

    With the module's `text`, a function whose own text names no catalogued callable, no
    communicating function of the run and no `global` is not walked: walking every node of every
    function is the costliest step of modelling a large module, and most functions never match.
    """
    # The methods that constructors rebind to a wrapper run as the wrapper's body (method_wrappers.py).
    functions = [*_all_functions(module), *(w.method for w in wrapped_methods(module).values())]
    words = _function_words(functions, text) if text is not None else None
    text_words = frozenset(IDENTIFIER.findall(text)) if text is not None else None
    wrapped = wrapped_names(module.tree, module.imports, module.catalog, text_words)
    module_hook_table(module, text_words)  # filled once here, without a walk for most files
    candidates = _candidate_words(module) | wrapped.words
    properties = property_names(module)  # reading one runs its getter
    direct: set[FunctionNode] = set()
    backward: set[FunctionNode] = set()  # run a backward that may be an assumed reduction
    called: dict[FunctionNode, set[str]] = {}
    kept = kept_functions(module)  # `self.gather_fn(x)` calls the function kept there
    for function in functions:
        own = words.get(function) if words is not None else None
        if own is not None and own.isdisjoint(candidates):
            # a superset of the names it calls: enough for the fixed point
            called[function] = set(own) | {kept[word] for word in own & kept.keys()}
            continue
        names: set[str] = set()
        nodes = list(nodes_under(function))  # walked once: the imports first, then the calls
        imports = _function_imports(nodes, module.imports)
        for node in nodes:
            if isinstance(node, ast.Global):
                module.mutable_globals.update(node.names)
            if isinstance(node, ast.Attribute) and node.attr in properties:
                names.add(node.attr)
            if not isinstance(node, ast.Call):
                continue
            if is_listed_call(node, module, imports, function) or uses_wrapped(node, wrapped):
                direct.add(function)
            elif is_assumed_backward(node, module):
                backward.add(function)
            if isinstance(node.func, ast.Name):
                names.add(node.func.id)
            elif isinstance(node.func, ast.Attribute):
                names.add(node.func.attr)
                names.update([kept[node.func.attr]] if node.func.attr in kept else [])
                if node.func.attr == "apply" and isinstance(node.func.value, ast.Name):
                    names.add(node.func.value.id)  # `Fn.apply(x)` runs `Fn.forward` (autograd_functions.py)
            if not starts_a_process(node):
                # `apply(sync, t)`, `partial(sync, t)`, `Thread(target=sync)`: a function handed on
                # by name may be called, by a function of the file or, as a callback, by unknown
                # code (calls.py models both); a new process's target runs elsewhere.
                names.update(arg.id for arg in node.args if isinstance(arg, ast.Name))
                names.update(k.value.id for k in node.keywords if isinstance(k.value, ast.Name))
        called[function] = names
    communicating = _closed(module, functions, called, direct)
    hooks = _backward_hooks(module)
    if not (backward | hooks) - communicating:
        return communicating, set()
    assumed = _closed(module, functions, called, communicating | backward | hooks)
    return assumed, assumed - communicating


def _closed(
    module: ModuleInfo,
    functions: list[FunctionNode],
    called: dict[FunctionNode, set[str]],
    start: set[FunctionNode],
) -> set[FunctionNode]:
    """`start` and the functions that call one of them by name, through any number of calls."""
    communicating = set(start)
    changed = True
    while changed:
        changed = False
        names = {f.name for f in communicating} | _called_classes(module, communicating)
        for function in functions:
            if function not in communicating and called[function] & names:
                communicating.add(function)
                changed = True
    return communicating


def parameter_defaults(function: FunctionNode) -> dict[str, ast.expr]:
    """Each parameter of `function` that has a default, with the default's expression."""
    arguments = function.args
    positional = [a.arg for a in [*arguments.posonlyargs, *arguments.args]]
    with_default = positional[len(positional) - len(arguments.defaults) :]
    defaults = dict(zip(with_default, arguments.defaults, strict=True))
    keyword = zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
    defaults.update((a.arg, default) for a, default in keyword if default is not None)
    return defaults


def _on_self(target: ast.Attribute) -> bool:
    return isinstance(target.value, ast.Name) and target.value.id == "self"


def kept_functions(module: ModuleInfo) -> dict[str, str]:
    """The attributes that a class's constructor sets to a function of the module, by name or as
    a parameter's default (`self.gather_fn = gather_fn` with `gather_fn=gather_all`): attribute ->
    function. Read from the syntax alone, to find what `self.gather_fn(x)` may call; the values
    the interpreter gives such attributes are module_values.py's."""
    kept: dict[str, str] = {}
    for info in module.classes.values():
        init = info.methods.get("__init__")
        if init is None:
            continue
        defaults = parameter_defaults(init)
        for node in nodes_under(init):
            if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Name):
                continue
            value = defaults.get(node.value.id, node.value)
            if not isinstance(value, ast.Name) or value.id not in module.functions:
                continue
            for target in node.targets:
                if isinstance(target, ast.Attribute) and _on_self(target):
                    kept[target.attr] = value.id
    return kept


def _backward_hooks(module: ModuleInfo) -> set[FunctionNode]:
    """Methods of the file's classes whose returned value their framework runs backward on (a
    LightningModule's `training_step`: `GradientSync.returned_by`), in a file that trains under
    torch.distributed; the class's direct bases only (the interpreter reads them all)."""
    hooks = module.catalog.backward_hooks
    found: set[FunctionNode] = set()
    for info in module.classes.values():
        bases = {qualified_name(base, module.imports) for base in info.node.bases}
        for method, syncs in hooks.items():
            function = info.methods.get(method)
            if function is not None and any(
                f"{b}.{method}" in s.returned_by for s in syncs for b in bases if b
            ):
                found.add(function)
    # The evidence last: it walks the whole tree (every import, also in functions), and most
    # files have no hook method.
    return found if found and assumes_wrapping(module) else set()


def _called_classes(module: ModuleInfo, communicating: set[FunctionNode]) -> set[str]:
    """Classes whose objects communicate when called (`model(x)` runs `forward` or `__call__`) or
    entered (`with Section():` runs `__enter__` and `__exit__`): a function that builds one may
    call or enter it."""
    called = {
        name
        for name, info in module.classes.items()
        if any(info.methods.get(m) in communicating for m in _IMPLICITLY_CALLED)
    }
    return called | _communicating_hooks(module, communicating)


def _communicating_hooks(module: ModuleInfo, communicating: set[FunctionNode]) -> set[str]:
    """Classes with a communicating hook on their objects (module_hooks.py), and the entry points
    that run one (`state_dict`): a function that calls one may communicate."""
    found: set[str] = set()
    for (class_name, entry), hooks in module_hook_table(module).items():
        for hook in (*hooks.before, *hooks.after):
            if hook.bound:
                function = inherited(module, class_name, hook.name, lambda info: info.methods)
            else:
                function = module.functions.get(hook.name)
            if function in communicating:
                found.update((class_name, entry) if entry != CALL else (class_name,))
    return found


_IMPLICITLY_CALLED = ("forward", "__call__", "__enter__", "__exit__", "__aenter__", "__aexit__")


def _function_words(functions: list[FunctionNode], text: str) -> dict[FunctionNode, frozenset[str]]:
    """The identifiers of each function's own source lines."""
    starts = line_starts(text)  # not str.splitlines: a U+2028 in a string is no line break
    words: dict[FunctionNode, frozenset[str]] = {}
    for function in functions:
        first = min([function.lineno, *(d.lineno for d in function.decorator_list)])
        last = function.end_lineno or function.lineno
        if 0 < first <= last < len(starts):
            words[function] = frozenset(IDENTIFIER.findall(text, starts[first - 1], starts[last]))
    return words


def _candidate_words(module: ModuleInfo) -> frozenset[str]:
    """Words without which a function cannot call a collective directly (nor declare `global`)."""
    trigger = trigger_pattern(module.catalog)
    project = module.project
    extra = project.communicating_names if project is not None else frozenset()
    # `from torch.distributed import barrier as sync`: the function's text says only `sync`.
    aliases = {
        local
        for local, qualified in module.imports.names.items()
        if qualified in module.catalog.functions or qualified.rsplit(".", 1)[-1] in extra
    }
    return trigger.distinctive | trigger.plain | extra | last_names(module.catalog) | aliases | {"global"}


def _function_imports(nodes: list[ast.AST], imports: ImportTable) -> ImportTable:
    """The module's imports, with those made inside the function (`import torch.distributed as
    dist` in a function body) added; `nodes` are the function's nodes in `ast.walk` order."""
    local = [n for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom))]
    if not local:
        return imports
    table = imports.child()
    for node in local:
        add_import(table, node)
    return table


def is_catalog_call(
    node: ast.Call,
    module: ModuleInfo,
    imports: ImportTable | None = None,
    function: FunctionNode | None = None,
) -> bool:
    """A call that communicates: a catalogued one (`is_listed_call`) or a backward that may run an
    assumed gradient reduction (`is_assumed_backward`)."""
    return is_listed_call(node, module, imports, function) or is_assumed_backward(node, module)


def is_listed_call(
    node: ast.Call,
    module: ModuleInfo,
    imports: ImportTable | None = None,
    function: FunctionNode | None = None,
) -> bool:
    """A catalogued collective, a communicating function of another file, a typed method.
    `function`: the function the call is made in, whose use of a receiver may tell its class
    where the file imports no package of it (inferred_types.py)."""
    catalog = module.catalog
    name = qualified_name(node.func, imports or module.imports)
    if name is not None and name in catalog.functions:
        return True
    if name is not None and remote_function(module, name) is not None:
        return True
    if isinstance(node.func, ast.Attribute):
        specs = catalog.method_specs(node.func.attr)
        if any(spec.any_receiver or _imports_package_of(module, spec.receivers) for spec in specs):
            return True
        if function is None or not specs:
            return False
        owner = next((c.node for c in module.classes.values() if function in c.methods.values()), None)
        return any(inferred_receiver(module, function, node, spec.receivers, owner) for spec in specs)
    if isinstance(node.func, ast.Name):
        # A function-level import (`from torch.distributed import barrier` inside the function).
        return node.func.id in last_names(catalog) and node.func.id not in module.functions
    return False


def is_assumed_backward(node: ast.Call, module: ModuleInfo) -> bool:
    """`loss.backward()` of a model wrapped out of sight (gradient_sync.py), in a file that trains
    under torch.distributed."""
    func = node.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr in module.catalog.assumed_backward_words
        and assumes_wrapping(module)
    )


def assumes_wrapping(module: ModuleInfo) -> bool:
    """The file trains under torch.distributed by an assumed reduction's evidence (it imports a
    module it names), so its backward may reduce gradients of a model wrapped elsewhere."""
    return any(imports_under(module.tree, sync.evidence) for sync in module.catalog.assumed_syncs)


_LAST_NAMES: dict[str, frozenset[str]] = {}


def last_names(catalog: Catalog) -> frozenset[str]:
    names = _LAST_NAMES.get(catalog.fingerprint)
    if names is None:
        names = _LAST_NAMES[catalog.fingerprint] = frozenset(q.rsplit(".", 1)[-1] for q in catalog.functions)
    return names


def _imports_package_of(module: ModuleInfo, receivers: tuple[str, ...]) -> bool:
    """A typed method (`Accelerator.gather`) can only be reached where its library is imported, or
    that of a catalogued class that keeps such an object (`transformers.Trainer.accelerator`)."""
    packages = module.catalog.receiver_packages(receivers)
    table = module.imports
    return any(qualified.split(".", 1)[0] in packages for qualified in table.names.values())


def module_body(tree: ast.Module) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """Module statements split into definitions-time code and `if __name__ == "__main__":` code."""
    setup: list[ast.stmt] = []
    main: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if _is_main_guard(node):
            main.append(node)
        else:
            setup.append(node)
    return setup, main


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    left = node.test.left
    return isinstance(left, ast.Name) and left.id == "__name__"


# ----------------------------------------------------------------------------- other files of the run

_LOADED: dict[str, ModuleInfo | None] = {}
# Models of other files a process keeps between the files it analyses. A model and its tree take
# about 1 MB a file; a worker of a large tree (sglang: 500 files met as helpers) otherwise grows
# without bound. Past this many, the least recently used are dropped before the next file, down
# to half (`forget_loaded`): a model is a function of its file alone, so this costs re-parsing,
# never a different answer. Measured 2026-12-05 on a quiet machine: sglang -j 2, summed over the
# processes, 867 MB unbounded, 555 MB with 64, 436 MB with 32; torch/distributed -j 1 user CPU
# 10.7 s unbounded, 11.4 s with 64, 14.3 s with 32 (each analysed file there reaches dozens of
# helper files, so a smaller bound parses them again and again: with 12 and no LRU, 39 s).
MAX_LOADED_MODULES = 64


def forget_loaded(limit: int | None = None) -> bool:
    """Drop the models of other files when there are more than `limit` (default
    `MAX_LOADED_MODULES`); whether it did."""
    bound = MAX_LOADED_MODULES if limit is None else limit
    if len(_LOADED) <= bound:
        return False
    for key in list(_LOADED)[: len(_LOADED) - bound // 2]:  # the least recently used, to half the bound
        dropped = _LOADED.pop(key)
        if dropped is not None:  # its tree then dies by reference count, not in a full collection
            forget_walks(dropped.tree)
    return True


def _loaded_key(path: str, catalog: Catalog, project: Project) -> str:
    return f"{catalog.fingerprint}:{project_identity(project)}:{realpath_once(path)}"


def already_loaded(path: str, catalog: Catalog, project: Project | None) -> ModuleInfo | None:
    """A file met earlier as another file's helper is not parsed and modelled a second time."""
    if project is None:
        return None
    return _LOADED.get(_loaded_key(path, catalog, project))


def remember_loaded(module: ModuleInfo) -> None:
    """An analysed file is the same model when another file later imports a helper from it."""
    if module.loader is not None:
        _LOADED.setdefault(_loaded_key(module.path, module.catalog, module.loader.project), module)


@dataclass(frozen=True)
class Loader:
    """Finds and models the other files of a run (once per process, see `_LOADED`).

    `complete` fills a new model's globals and class attributes: that is the interpreter's job
    (`collcheck.static.module_values.complete_loaded_module`), passed in so that this module does not
    import the interpreter that imports it.
    """

    catalog: Catalog
    project: Project
    settings: Settings
    complete: Callable[[ModuleInfo, Settings], None]
    # path -> the dotted package of the file, where known (an installed package's files: relative
    # imports `from ..utils import f` then resolve); a project's files resolve them beside the file.
    packages: Mapping[str, str] | None = None

    def load(self, path: str) -> ModuleInfo | None:
        """Parse another file of the run once per process, for helpers imported from it."""
        key = _loaded_key(path, self.catalog, self.project)
        if key in _LOADED:
            found = _LOADED.pop(key)  # last used goes last: `forget_loaded` drops the oldest first
            _LOADED[key] = found
            # A model reports what it was built from; one being built (a cycle) or unmodelled, its text.
            if found is not None:
                note_model(found.reads)
            else:
                note(self._text_read(path))
            return found
        with recording() as reads:
            module = self._model(path, key)
        if module is not None:
            module.reads.update(reads)
        return module

    def _text_read(self, path: str) -> dict[str, str]:
        real = realpath_once(path)
        return {real: read_digest(self.project, real)}

    def _model(self, path: str, key: str) -> ModuleInfo | None:
        note(self._text_read(path))
        _LOADED[key] = None  # a cycle of imports sees "not available" instead of recursing
        source = read_source(FsPath(path), 8 * 1024 * 1024)
        if isinstance(source, FileError):
            return None
        tree = parse(source)
        if isinstance(tree, FileError):
            return None
        try:
            package = self.packages.get(path, "") if self.packages is not None else ""
            module = build_module(tree, source.path, self.catalog, self, source.text, package)
        except RecursionError:  # a helper file too deep to model is not followed; its importer still is
            return None
        try:
            self.complete(module, self.settings)
        except RecursionError:  # module-level code too deep to model: its functions are still followed
            module.globals.clear()
        _LOADED[key] = module
        return module


def remote_function(
    module: ModuleInfo, qualified: str, communicating_only: bool = True, depth: int = 0
) -> tuple[ModuleInfo, FunctionNode] | None:
    """A function defined in another file of the run (by default: only one that reaches a collective)."""
    loader = module.loader
    if loader is None:
        return None
    project = loader.project
    if communicating_only and qualified.rsplit(".", 1)[-1] not in project.communicating_names:
        return None
    found = project.lookup(qualified, module.path)
    if found is None:
        return None
    path, attribute = found
    other = loader.load(path)
    if other is None or "." in attribute:
        return None
    if attribute not in other.functions:
        # `from pkg import f` where `pkg/__init__.py` imports `f` from a submodule (a re-export).
        reexported = other.imports.lookup(attribute)
        if reexported is None or other is module or depth >= MAX_REEXPORTS:
            return None
        return remote_function(other, reexported, communicating_only, depth + 1)
    function = other.functions[attribute]
    if not communicating_only:
        return other, function
    return (other, function) if followed_as_communicating(other, function, other is module) else None


def followed_as_communicating(module: ModuleInfo, function: FunctionNode, same_file: bool) -> bool:
    """Whether a call of `function` (of `module`) is followed for its collectives, from a caller in
    the same file or in another. A function that communicates only by an assumed gradient
    reduction is followed in its own file only: the assumption rests on that file's evidence (it
    trains under torch.distributed and shows no wrapper), and following such helpers across files
    made every caller of a backward, through any number of files, a helper to model (a whole
    installed torch tree: 2,100 module builds instead of 400). What it costs: a backward in a
    helper of another file, under a rank-dependent branch of the checked file, is not seen
    (tests/test_assumed_wrapping.py)."""
    return function in module.communicating and (same_file or function not in module.assumed_only)


def remote_value(module: ModuleInfo, qualified: str) -> Expr | None:
    """A module-level value (a constant computed at import) of another file of the run."""
    loader = module.loader
    if loader is None:
        return None
    found = loader.project.lookup(qualified, module.path)
    if found is None:
        return None
    path, attribute = found
    if "." in attribute:
        return None
    other = loader.load(path)
    return None if other is None else other.globals.get(attribute)
