"""One file through the static pipeline: parse -> module model -> extract -> solve -> checks.

The engine never prints. A file that cannot be parsed becomes a FileError; a function that is
too large for the path budget becomes a note.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path as FsPath

from collcheck.catalog import Catalog
from collcheck.checks import Rule, all_rules, rule_selection
from collcheck.config import Settings
from collcheck.findings import Counterexample, FileError, FileResult, Finding, Location, TraceStep
from collcheck.source import SourceFile, read_source
from collcheck.static.budget import check_active
from collcheck.static.context import ModuleContext
from collcheck.static.extract import (
    CALLBACK_OP,
    ClassInfo,
    Extractor,
    Frame,
    FunctionNode,
    ModuleInfo,
    PathLimitExceeded,
    State,
    catalog_group_facts,
)
from collcheck.static.names import ImportTable, add_import, module_imports, qualified_name
from collcheck.static.prefilter import IDENTIFIER, trigger_pattern
from collcheck.static.program import Element, LoopEvent, Region, Site
from collcheck.static.project import Project
from collcheck.static.solve import Divergence, SolveStats, solve_region
from collcheck.static.symbolic import Atom, Const, Expr, GroupVal, is_rank_dependent, opaque
from collcheck.static.wrapped import uses_wrapped, wrapped_names
from collcheck.suppress import apply_suppressions, build_suppressions, parse_suppressions

# A finding, where its divergence arises (code, path, line), and the calls it went through.
Candidate = tuple[Finding, tuple[str, str, int], tuple[Site, ...]]

# Order matters: the first rule that claims a divergence reports it.
CLASSIFICATION_ORDER = ("CC007", "CC005", "CC004", "CC003", "CC002", "CC006", "CC001")


def mentions_communication(
    text: str, catalog: Catalog, project: Project | None = None, path: str = ""
) -> bool:
    """The textual prefilter: a file that names no catalogued callable, nor a function of the run
    that reaches one, is never parsed."""
    real = os.path.realpath(path) if path else ""
    if project is not None and project.indexed(real):
        return real in project.selected
    return trigger_pattern(catalog).search(text)


def parse(source: SourceFile) -> ast.Module | FileError:
    try:
        return ast.parse(source.text, filename=source.path)
    except SyntaxError as error:
        return FileError(source.path, f"syntax error: {error.msg}", error.lineno)
    except (RecursionError, MemoryError):
        return FileError(source.path, "too deeply nested to parse")
    except ValueError as error:
        return FileError(source.path, f"cannot parse: {error}")


def analyze_source(
    source: SourceFile, catalog: Catalog, settings: Settings, project: Project | None = None
) -> FileResult:
    result = FileResult(path=source.path)
    if not mentions_communication(source.text, catalog, project, source.path):
        return result
    loaded = _already_loaded(source.path, catalog, project)
    tree = loaded.tree if loaded is not None else parse(source)
    if isinstance(tree, FileError):
        result.error = tree
        return result
    try:
        findings = _analyze_tree(tree, source, catalog, settings, result.notes, project)
    except RecursionError:
        result.error = FileError(source.path, "too deeply nested to analyse")
        return result
    comments = parse_suppressions(source.text)
    suppressions = build_suppressions(comments, _def_spans(tree) if comments else {})
    result.findings, result.unused_suppressions = apply_suppressions(findings, suppressions, source.path)
    return result


def _def_spans(tree: ast.Module) -> dict[int, int]:
    spans: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            spans[node.lineno] = node.end_lineno or node.lineno
    return spans


# ----------------------------------------------------------------------------- module model


def build_module(
    tree: ast.Module, path: str, catalog: Catalog, project: Project | None = None, text: str | None = None
) -> ModuleInfo:
    module = ModuleInfo(path=path, tree=tree, imports=module_imports(tree), catalog=catalog)
    module.project = project
    module.loader = load_project_module
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            module.functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            _add_class(module, node)
    module.communicating = _communicating_functions(module, text)
    return module


def _add_class(module: ModuleInfo, node: ast.ClassDef, depth: int = 0) -> None:
    """A class and the classes nested in it (a test suite's `class _Base` inside its case): each is
    analysed under its own name, the first one of a name kept."""
    methods = {
        item.name: item for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    bases = [base.id for base in node.bases if isinstance(base, ast.Name)]
    info = ClassInfo(node, methods, bases)
    info.attributes.update(_class_constants(node))
    module.classes.setdefault(node.name, info)
    if depth < 4:
        for item in node.body:
            if isinstance(item, ast.ClassDef):
                _add_class(module, item, depth + 1)


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


def _communicating_functions(module: ModuleInfo, text: str | None = None) -> set[FunctionNode]:
    """Functions that reach a collective, directly or through helpers of this module (fixed point).

    With the module's `text`, a function whose own text names no catalogued callable, no
    communicating function of the run and no `global` is not walked: walking every node of every
    function is the costliest step of modelling a large module, and most functions never match.
    """
    functions = _all_functions(module)
    words = _function_words(functions, text) if text is not None else None
    wrapped = wrapped_names(module.tree, module.imports, module.catalog)
    candidates = _candidate_words(module) | wrapped.words
    direct: set[FunctionNode] = set()
    called: dict[FunctionNode, set[str]] = {}
    for function in functions:
        own = words.get(function) if words is not None else None
        if own is not None and own.isdisjoint(candidates):
            called[function] = set(own)  # a superset of the names it calls: enough for the fixed point
            continue
        names: set[str] = set()
        imports = _function_imports(function, module.imports)
        for node in ast.walk(function):
            if isinstance(node, ast.Global):
                module.mutable_globals.update(node.names)
            if not isinstance(node, ast.Call):
                continue
            if _is_catalog_call(node, module, imports) or uses_wrapped(node, wrapped):
                direct.add(function)
            if isinstance(node.func, ast.Name):
                names.add(node.func.id)
            elif isinstance(node.func, ast.Attribute):
                names.add(node.func.attr)
        called[function] = names
    communicating = set(direct)
    changed = True
    while changed:
        changed = False
        names = {f.name for f in communicating}
        for function in functions:
            if function not in communicating and called[function] & names:
                communicating.add(function)
                changed = True
    return communicating


def _function_words(functions: list[FunctionNode], text: str) -> dict[FunctionNode, frozenset[str]]:
    """The identifiers of each function's own source lines."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
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
    return trigger.distinctive | trigger.plain | extra | _last_names(module.catalog) | aliases | {"global"}


def _function_imports(function: FunctionNode, imports: ImportTable) -> ImportTable:
    """The module's imports, with those made inside the function (`import torch.distributed as
    dist` in a function body) added."""
    local = [n for n in ast.walk(function) if isinstance(n, (ast.Import, ast.ImportFrom))]
    if not local:
        return imports
    table = imports.child()
    for node in local:
        add_import(table, node)
    return table


def _is_catalog_call(node: ast.Call, module: ModuleInfo, imports: ImportTable | None = None) -> bool:
    catalog = module.catalog
    name = qualified_name(node.func, imports or module.imports)
    if name is not None and name in catalog.functions:
        return True
    if name is not None and remote_function(module, name) is not None:
        return True
    if isinstance(node.func, ast.Attribute):
        return any(
            spec.any_receiver or _imports_package_of(module, spec.receivers)
            for spec in catalog.method_specs(node.func.attr)
        )
    if isinstance(node.func, ast.Name):
        # A function-level import (`from torch.distributed import barrier` inside the function).
        return node.func.id in _last_names(catalog) and node.func.id not in module.functions
    return False


_LAST_NAMES: dict[str, frozenset[str]] = {}


def _last_names(catalog: Catalog) -> frozenset[str]:
    names = _LAST_NAMES.get(catalog.fingerprint)
    if names is None:
        names = _LAST_NAMES[catalog.fingerprint] = frozenset(q.rsplit(".", 1)[-1] for q in catalog.functions)
    return names


def _without_mutable_globals(env: dict[str, Expr], module: ModuleInfo) -> dict[str, Expr]:
    """A module variable some function rebinds (`global _GROUP`, a lazy cache) has no known value:
    `_GROUP = None` at import time says nothing about it at the time of a call."""
    return {name: value for name, value in env.items() if name not in module.mutable_globals}


def _imports_package_of(module: ModuleInfo, receivers: tuple[str, ...]) -> bool:
    """A typed method (`Accelerator.gather`) can only be reached where its library is imported."""
    packages = {receiver.split(".", 1)[0] for receiver in receivers}
    table = module.imports
    return any(qualified.split(".", 1)[0] in packages for qualified in table.names.values())


def _class_attributes(module: ModuleInfo, extractor: Extractor) -> None:
    """`self.rank = dist.get_rank()` in one method is the rank when read in another."""
    for class_name, info in module.classes.items():
        seen: dict[str, list[Expr]] = {}
        for method in info.methods.values():
            env = extractor._bind_entry_parameters(method)
            state = State(env)
            frame = Frame(method.name, class_name, (), extractor.max_depth, ())
            for node in ast.walk(method):
                if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        extractor.record_events = False
                        try:
                            value = extractor.pure(node.value, state, frame)
                        finally:
                            extractor.record_events = True
                        seen.setdefault(target.attr, []).append(value)
        for attribute, values in seen.items():
            interesting = [
                v
                for v in values
                if is_rank_dependent(v)
                or isinstance(v, GroupVal)
                or (isinstance(v, Atom) and v.name.startswith("type:"))
            ]
            if not interesting:
                continue
            if len(set(values)) == 1:
                info.attributes[attribute] = values[0]
            else:
                info.attributes[attribute] = opaque(f"self.{attribute}@{class_name}", tuple(values))


def _module_body(tree: ast.Module) -> tuple[list[ast.stmt], list[ast.stmt]]:
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


_LOADED: dict[str, ModuleInfo | None] = {}


def _loaded_key(path: str, catalog: Catalog, project: Project) -> str:
    return f"{catalog.fingerprint}:{project.digest}:{os.path.realpath(path)}"


def _already_loaded(path: str, catalog: Catalog, project: Project | None) -> ModuleInfo | None:
    """A file met earlier as another file's helper is not parsed and modelled a second time."""
    if project is None:
        return None
    return _LOADED.get(_loaded_key(path, catalog, project))


def load_project_module(
    path: str, catalog: Catalog, project: Project, settings: Settings
) -> ModuleInfo | None:
    """Parse another file of the run once per process, for helpers imported from it."""
    key = _loaded_key(path, catalog, project)
    if key in _LOADED:
        return _LOADED[key]
    _LOADED[key] = None  # a cycle of imports sees "not available" instead of recursing
    source = read_source(FsPath(path), 8 * 1024 * 1024)
    if isinstance(source, FileError):
        return None
    tree = parse(source)
    if isinstance(tree, FileError):
        return None
    try:
        module = build_module(tree, source.path, catalog, project, source.text)
    except RecursionError:  # a helper file too deep to model is not followed; its importer still is
        return None
    extractor = Extractor(module, settings.max_paths, settings.max_inline_depth, settings.max_steps)
    try:
        module.globals = _without_mutable_globals(extractor.module_environment(_module_body(tree)[0]), module)
        _class_attributes(module, extractor)
    except RecursionError:  # module-level code too deep to model: its functions are still followed
        module.globals = {}
    _LOADED[key] = module
    return module


def remote_function(
    module: ModuleInfo, qualified: str, communicating_only: bool = True
) -> tuple[ModuleInfo, FunctionNode] | None:
    """A function defined in another file of the run (by default: only one that reaches a collective)."""
    project = module.project
    if project is None:
        return None
    if communicating_only and qualified.rsplit(".", 1)[-1] not in project.communicating_names:
        return None
    found = project.lookup(qualified, module.path)
    if found is None:
        return None
    path, attribute = found
    other = load_project_module(path, module.catalog, project, module.settings or Settings())
    if other is None or "." in attribute or attribute not in other.functions:
        return None
    function = other.functions[attribute]
    return (other, function) if function in other.communicating or not communicating_only else None


def remote_value(module: ModuleInfo, qualified: str) -> Expr | None:
    """A module-level value (a constant computed at import) of another file of the run."""
    project = module.project
    if project is None:
        return None
    found = project.lookup(qualified, module.path)
    if found is None:
        return None
    path, attribute = found
    if "." in attribute:
        return None
    other = load_project_module(path, module.catalog, project, module.settings or Settings())
    return None if other is None else other.globals.get(attribute)


# ----------------------------------------------------------------------------- analysis


def _entries(module: ModuleInfo) -> list[tuple[FunctionNode, str | None, str]]:
    entries: list[tuple[FunctionNode, str | None, str]] = []
    for name, function in module.functions.items():
        if function in module.communicating:
            entries.append((function, None, name))
    for class_name, info in module.classes.items():
        for name, method in info.methods.items():
            if method in module.communicating:
                entries.append((method, class_name, f"{class_name}.{name}"))
    return entries


def _analyze_tree(
    tree: ast.Module,
    source: SourceFile,
    catalog: Catalog,
    settings: Settings,
    notes: list[str],
    project: Project | None = None,
) -> list[Finding]:
    setup, main = _module_body(tree)
    loaded = _already_loaded(source.path, catalog, project)
    if loaded is not None and loaded.tree is tree:
        module = loaded
        module.settings = settings
        extractor = Extractor(module, settings.max_paths, settings.max_inline_depth, settings.max_steps)
    else:
        module = build_module(tree, source.path, catalog, project, source.text)
        module.settings = settings
        extractor = Extractor(module, settings.max_paths, settings.max_inline_depth, settings.max_steps)
        module.globals = _without_mutable_globals(extractor.module_environment(setup), module)
        _class_attributes(module, extractor)
        if project is not None:
            _LOADED.setdefault(_loaded_key(source.path, catalog, project), module)
    rules = {rule.code: rule for rule in all_rules()}
    stats = SolveStats()
    candidates: list[Candidate] = []
    for function, class_name, qualname in _entries(module):
        try:
            regions = extractor.run_function(function, class_name, qualname)
        except PathLimitExceeded as limit:
            notes.append(f"{source.path}:{function.lineno}: {qualname} skipped: {limit}")
            continue
        candidates.extend(_findings_for(regions, rules, settings, stats, catalog))
    if _communicates(setup + main, module):
        try:
            regions = extractor.run_module(setup + main)
            candidates.extend(_findings_for(regions, rules, settings, stats, catalog))
        except PathLimitExceeded as limit:
            notes.append(f"{source.path}: module body skipped: {limit}")
    notes.extend(stats.notes)
    candidates = [
        c for c in candidates if not _reported_in_callee(c, source.path, catalog, settings, project)
    ]
    findings = _deduplicate(candidates)
    findings.extend(_module_checks(tree, source, catalog, settings, module))
    return sorted(findings, key=Finding.sort_key)


def _communicates(body: list[ast.stmt], module: ModuleInfo) -> bool:
    names = {f.name for f in module.communicating}
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                if _is_catalog_call(node, module):
                    return True
                if isinstance(node.func, ast.Name) and node.func.id in names:
                    return True
    return False


def _module_checks(
    tree: ast.Module, source: SourceFile, catalog: Catalog, settings: Settings, module: ModuleInfo
) -> list[Finding]:
    context = ModuleContext(
        tree=tree, source=source, settings=settings, catalog=catalog, imports=module.imports
    )
    findings: list[Finding] = []
    selection = rule_selection(settings)
    for rule in all_rules():
        if not selection.enabled(rule.code):
            continue  # a rule switched off costs nothing
        check = getattr(rule.module, "check_module", None)
        if check is not None:
            findings.extend(check(context))
    return findings


def _findings_for(
    regions: list[Region], rules: dict[str, Rule], settings: Settings, stats: SolveStats, catalog: Catalog
) -> list[Candidate]:
    results = []
    facts = catalog_group_facts(catalog)
    for region in regions:
        check_active()  # the file's wall-clock budget (budget.py)
        for divergence in solve_region(
            region, settings.world_size, settings.z3_timeout_ms, stats, group_facts=facts
        ):
            if _behind_unknown_code(divergence):
                continue
            finding = classify(divergence, rules)
            if finding is not None:
                results.append(finding)
        if region.kind == "loop" and region.over_set:
            finding = _set_order_finding(region, rules)
            if finding is not None:
                results.append(finding)
    return results


def _behind_unknown_code(divergence: Divergence) -> bool:
    """A rank handed a communicating callback to unknown code (`study.optimize(objective)`) at or
    before the point of divergence: what it issued there, and how often, is unknown."""
    for sequence in (divergence.sequence_a, divergence.sequence_b):
        for index, element in enumerate(sequence):
            if index > divergence.index and divergence.kind in ("sequence", "swap", "loop_exit"):
                break
            if _is_callback(element):
                return True
    return _is_callback(divergence.event_a) or _is_callback(divergence.event_b)


def _is_callback(element: Element | None) -> bool:
    if isinstance(element, LoopEvent):
        return CALLBACK_OP in element.body_ops
    return element is not None and element.op == CALLBACK_OP


def classify(divergence: Divergence, rules: dict[str, Rule]) -> Candidate | None:
    for code in CLASSIFICATION_ORDER:
        rule = rules.get(code)
        if rule is None or not rule.module.applies(divergence):
            continue
        template, args = rule.module.describe(divergence)
        primary, origin = _locations(divergence, code)
        finding = Finding(
            code=rule.code,
            severity=rule.severity,
            location=primary,
            message_template=template,
            message_args=tuple(sorted(args.items())),
            counterexample=counterexample(divergence),
            function=divergence.region.function,
        )
        key = (code, origin[0], origin[1]) if origin else (code, primary.path, primary.line)
        return finding, key, _divergence_sites(divergence)
    return None


def _set_order_finding(region: Region, rules: dict[str, Rule]) -> Candidate | None:
    rule = rules.get("CC007")
    if rule is None:
        return None
    template, args = rule.module.describe_set_order(region)
    location = Location(region.path_name, region.line, 0)
    finding = Finding(
        rule.code, rule.severity, location, template, tuple(sorted(args.items())), None, region.function
    )
    return finding, (rule.code, region.path_name, region.line), ()


def _site_location(chain: tuple[Site, ...], path: str, line: int, column: int) -> Location:
    if chain:
        return Location(chain[0].path, chain[0].line, chain[0].column)
    return Location(path, line, column)


def _element_location(element: Element, code: str = "") -> Location:
    if isinstance(element, LoopEvent) and code != "CC002" and element.first is not None and not element.chain:
        element = element.first  # a loop missing on some ranks: point at the collective inside it
    return _site_location(element.chain, element.path, element.line, element.column)


def _locations(d: Divergence, code: str) -> tuple[Location, tuple[str, int] | None]:
    if code == "CC003" and d.exit is not None:
        exit_ = d.exit
        return _site_location(exit_.chain, exit_.path, exit_.line, exit_.column), (exit_.path, exit_.line)
    candidates: list[Element] = [e for e in (d.event_a, d.event_b) if e is not None]
    if code == "CC002":
        loops: list[Element] = [e for e in candidates if isinstance(e, LoopEvent)]
        candidates = loops or candidates
    if not candidates and d.exit is not None:  # a loop left early on some ranks: point at the exit
        exit_ = d.exit
        return _site_location(exit_.chain, exit_.path, exit_.line, exit_.column), (exit_.path, exit_.line)
    if not candidates:
        return Location(d.region.path_name, d.region.line, 0), None
    chosen = min(candidates, key=lambda e: (_element_location(e, code).line, e.line))
    location = _element_location(chosen, code)
    if code == "CC007" and d.exit is not None:
        # Shown at the guarded exit (one finding for the collectives it skips); the divergence
        # still arises at the collective, so callers further up are not told again.
        exit_ = d.exit
        return _site_location(exit_.chain, exit_.path, exit_.line, exit_.column), (chosen.path, chosen.line)
    if isinstance(chosen, LoopEvent) and code != "CC002" and chosen.first is not None and not chosen.chain:
        return location, (location.path, location.line)
    return location, (chosen.path, chosen.line)


def _step(element: Element, trips: str = "") -> TraceStep:
    chain: tuple[str, ...] = ()
    if element.chain:
        chain = (element.chain[0].caller, *(site.callee for site in element.chain))
    if isinstance(element, LoopEvent):
        return TraceStep(f"for[{','.join(element.body_ops)}]", element.path, element.line, chain, trips)
    detail = ""
    if element.operands:
        detail = ", ".join(element.operands)
    return TraceStep(element.op, element.path, element.line, chain, detail)


def counterexample(d: Divergence) -> Counterexample:
    model = d.model
    trips = dict(model.values)
    steps_a = tuple(
        _step(
            e,
            trips.get(f"trips on rank {model.rank_a}", "")
            if isinstance(e, LoopEvent) and e is d.event_a
            else "",
        )
        for e in d.sequence_a
    )
    steps_b = tuple(
        _step(
            e,
            trips.get(f"trips on rank {model.rank_b}", "")
            if isinstance(e, LoopEvent) and e is d.event_b
            else "",
        )
        for e in d.sequence_b
    )
    ranks = [(model.rank_a, steps_a), (model.rank_b, steps_b)]
    ranks.sort(key=lambda item: item[0])
    return Counterexample(world_size=model.world, ranks=tuple(ranks), values=model.values)


_STANDALONE: dict[tuple[str, int], set[tuple[str, str, int]]] = {}


def _reported_in_callee(
    candidate: Candidate,
    path: str,
    catalog: Catalog,
    settings: Settings,
    project: Project | None,
) -> bool:
    """A divergence that a helper in another file shows on its own is reported there, once."""
    finding, origin, sites = candidate
    if project is None or origin[1] == path or finding.counterexample is None:
        return False
    for site in sites:
        if not site.callee_path or site.callee_path == path:
            continue
        if origin in _standalone_origins(site.callee_path, site.callee, catalog, settings, project):
            return True
    return False


def _divergence_sites(d: Divergence) -> tuple[Site, ...]:
    sites: dict[Site, None] = {}
    for element in (d.event_a, d.event_b):
        if element is not None:
            sites.update(dict.fromkeys(element.chain))
    if d.exit is not None:
        sites.update(dict.fromkeys(d.exit.chain))
    return tuple(sites)


def _standalone_origins(
    path: str, function_name: str, catalog: Catalog, settings: Settings, project: Project
) -> set[tuple[str, str, int]]:
    module = load_project_module(path, catalog, project, settings)
    if module is None:
        return set()
    function = module.functions.get(function_name)
    if function is None:
        return set()
    key = (path, function.lineno)
    if key not in _STANDALONE:
        _STANDALONE[key] = set()  # recursion guard
        extractor = Extractor(module, settings.max_paths, settings.max_inline_depth, settings.max_steps)
        try:
            regions = extractor.run_function(function, None, function_name)
        except PathLimitExceeded:
            regions = []
        rules = {rule.code: rule for rule in all_rules()}
        found = _findings_for(regions, rules, settings, SolveStats(), catalog)
        _STANDALONE[key] = {origin for _, origin, _ in found}
    return _STANDALONE[key]


def _deduplicate(candidates: list[Candidate]) -> list[Finding]:
    """A divergence is reported where it arises: in the helper that holds it, or at the call site
    closest to it, not again at every caller further up."""
    depth: dict[tuple[str, str, int], int] = {}
    for finding, origin, _ in candidates:
        depth[origin] = min(depth.get(origin, 99), _chain_depth(finding))
    kept: dict[tuple[str, str, int], Finding] = {}
    for finding, origin, _ in candidates:
        if _chain_depth(finding) > depth[origin]:
            continue
        key = (finding.code, finding.location.path, finding.location.line)
        kept.setdefault(key, finding)
    return list(kept.values())


def _chain_depth(finding: Finding) -> int:
    example = finding.counterexample
    if example is None:
        return 0
    depths = [len(step.chain) for _, steps in example.ranks for step in steps if step.chain]
    return min(depths) if depths else 0
