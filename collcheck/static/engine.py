"""One file through the static pipeline: parse -> module model -> extract -> solve -> checks.

The engine never prints. A file that cannot be parsed becomes a FileError; a function that a
work budget cuts short (statements, paths, z3 resource units: budget.py, over_budget.py) becomes a
`BudgetCut`, a note that names it.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from collcheck.catalog import Catalog
from collcheck.checks import Rule, StaticRules, all_rules, rule_selection, static_rules
from collcheck.config import Settings
from collcheck.findings import (
    Budget,
    BudgetCut,
    Counterexample,
    FileError,
    FileResult,
    Finding,
    Location,
    TraceStep,
    UnusedSuppression,
)
from collcheck.lines import line_texts
from collcheck.source import SourceFile
from collcheck.static import groups
from collcheck.static.anchor import Anchor, locate
from collcheck.static.budget import SolverBudgetSpent, check_active, solver_allowance
from collcheck.static.calls import REMOTE_OP
from collcheck.static.catalog_values import value_from_spec
from collcheck.static.closures import Closure
from collcheck.static.context import ModuleContext
from collcheck.static.divergence import Blocked, Divergence, DivergenceKind
from collcheck.static.groups import NO_GROUP_FACTS, GroupFacts
from collcheck.static.handoff import behind_unknown_code
from collcheck.static.interpret import Interpreter
from collcheck.static.loader import (
    FunctionNode,
    Loader,
    ModuleInfo,
    already_loaded,
    build_module,
    is_catalog_call,
    module_body,
    parse,
    remember_loaded,
)
from collcheck.static.module_values import complete_loaded_module, complete_module
from collcheck.static.names import ImportTable, module_imports, nodes_under
from collcheck.static.over_budget import (
    MODULE_BODY,
    Place,
    decided_in,
    lines_of,
    owning_a_split,
    run_within_budget,
)
from collcheck.static.p2p_schedule import Verdict, confirm, files_of, loop_table, schedule_deadlock
from collcheck.static.prefilter import trigger_pattern
from collcheck.static.program import Element, LoopEvent, Region, Site
from collcheck.static.project import Project
from collcheck.static.smt import SolveStats
from collcheck.static.solve import solve_region
from collcheck.static.state import PathLimitExceeded
from collcheck.suppress import apply_suppressions, build_suppressions, parse_suppressions

# The codes of an early exit and of a sequence difference (one root cause, one finding).
EXIT_CODE, SEQUENCE_CODE = "CC003", "CC001"

# A finding, where its divergence arises (code, path, line), and the calls it went through.
Candidate = tuple[Finding, tuple[str, str, int], tuple[Site, ...]]


def mentions_communication(
    text: str, catalog: Catalog, project: Project | None = None, path: str = ""
) -> bool:
    """The textual prefilter: a file that names no catalogued callable, nor a function of the run
    that reaches one, is never parsed."""
    real = os.path.realpath(path) if path else ""
    if project is not None and project.indexed(real):
        return real in project.selected
    return trigger_pattern(catalog).search(text)


def analyze_source(
    source: SourceFile, catalog: Catalog, settings: Settings, project: Project | None = None
) -> FileResult:
    result = FileResult(path=source.path)
    if not mentions_communication(source.text, catalog, project, source.path):
        return result
    loaded = already_loaded(source.path, catalog, project)
    if loaded is not None and loaded.path != source.path:
        loaded = None  # the same file under another name (a link): its findings carry this name
    tree = loaded.tree if loaded is not None else parse(source)
    if isinstance(tree, FileError):
        result.error = tree
        return result
    stats = SolveStats()
    rules = static_rules(settings)
    try:
        findings = _analyze_tree(
            tree, source, catalog, settings, rules, (result.notes, result.budget_cuts), stats, project
        )
    except RecursionError:
        result.error = FileError(source.path, "too deeply nested to analyse")
        return result
    finally:
        result.z3_queries, result.settled_pairs = stats.queries, stats.settled
    result.budget_cuts.extend(cut for cut in stats.cuts if cut not in result.budget_cuts)
    comments = parse_suppressions(source.text)
    suppressions = build_suppressions(comments, _def_spans(tree) if comments else {})
    result.findings, unused = apply_suppressions(findings, suppressions, source.path)
    result.unused_suppressions = _searched(unused, rules.unsearched)
    return result


def _searched(unused: list[UnusedSuppression], unsearched: frozenset[str]) -> list[UnusedSuppression]:
    """Unused suppressions, less the codes this run did not look for (`--select CC101` does not
    search for CC001: its suppressions are not known to be unused)."""
    if not unsearched:
        return unused
    kept: list[UnusedSuppression] = []
    for item in unused:
        codes = tuple(code for code in item.codes if code not in unsearched)
        if codes:  # a blank suppression may cover a finding that was not looked for
            kept.append(replace(item, codes=codes))
    return kept


def _def_spans(tree: ast.Module) -> dict[int, int]:
    spans: dict[int, int] = {}
    for node in nodes_under(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            spans[node.lineno] = node.end_lineno or node.lineno
    return spans


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
    rules: StaticRules,
    remarks: tuple[list[str], list[BudgetCut]],
    stats: SolveStats,
    project: Project | None = None,
) -> list[Finding]:
    """The file's findings; `remarks` gets the notes (functions reduced or skipped, then the
    solver's notes) and the functions a work budget cut short."""
    notes, cuts = remarks
    if not rules.any:  # only module checks are selected: no extraction, no solver
        return sorted(
            _module_checks(tree, source, catalog, settings, module_imports(tree)), key=Finding.sort_key
        )
    setup, main = module_body(tree)
    loaded = already_loaded(source.path, catalog, project)
    if loaded is not None and loaded.tree is tree:
        module = loaded
        extractor = Interpreter(module, settings.max_paths, settings.max_inline_depth, settings.max_steps)
    else:
        loader = Loader(catalog, project, settings, complete_loaded_module) if project is not None else None
        module = build_module(tree, source.path, catalog, loader, source.text)
        extractor = Interpreter(module, settings.max_paths, settings.max_inline_depth, settings.max_steps)
        complete_module(module, extractor)
        remember_loaded(module)
    candidates: list[Candidate] = []
    nonblocking = NonblockingFiles(module, catalog, project)
    facts = catalog_group_facts(catalog)
    roots: list[tuple[FunctionNode, str | None, str, Closure | None]] = [
        (function, class_name, qualname, None) for function, class_name, qualname in _entries(module)
    ]
    while roots:
        function, class_name, qualname, closure = roots.pop(0)
        place = Place(source.path, function.lineno, qualname)
        run = run_within_budget(
            extractor,
            partial(extractor.run_function, function, class_name, qualname, closure),
            place,
            notes,
            cuts,
            function,
        )
        if run is None:
            continue
        regions, reduced = run
        for region in regions:
            region.conditions = extractor.conditions
        # Nested functions handed to unknown code are roots of their own (closures.py).
        nested = extractor.nested_roots(function, qualname, closure)
        roots.extend((inner, class_name, name, scope) for inner, name, scope in nested)
        if reduced:
            regions = owning_a_split(regions, extractor.conditions, source.path, lines_of(function))
        found = _allowed(place, regions, rules, settings, stats, facts, nonblocking, cuts)
        if reduced:
            found = [c for c in found if decided_in(c[0], source.path, lines_of(function))]
        candidates.extend(found)
    body = setup + main
    ran = None
    module_place = Place(source.path, 1, MODULE_BODY)
    if _communicates(body, module):
        ran = run_within_budget(extractor, partial(extractor.run_module, body), module_place, notes, cuts)
    if ran is not None:
        for region in ran[0]:
            region.conditions = extractor.conditions
        whole = (1, len(line_texts(source.text)))
        regions = owning_a_split(ran[0], extractor.conditions, source.path, whole) if ran[1] else ran[0]
        found = _allowed(module_place, regions, rules, settings, stats, facts, nonblocking, cuts)
        if ran[1]:
            found = [c for c in found if decided_in(c[0], source.path, whole)]
        candidates.extend(found)
    notes.extend(stats.notes)
    candidates = [
        c for c in candidates if not _reported_in_callee(c, source.path, catalog, settings, project)
    ]
    findings = _deduplicate(_one_root_cause(candidates))
    findings.extend(_module_checks(tree, source, catalog, settings, module.imports))
    return sorted(findings, key=Finding.sort_key)


def _communicates(body: list[ast.stmt], module: ModuleInfo) -> bool:
    names = {f.name for f in module.communicating}
    for stmt in body:
        for node in nodes_under(stmt):
            if isinstance(node, ast.Call):
                if is_catalog_call(node, module):
                    return True
                if isinstance(node.func, ast.Name) and node.func.id in names:
                    return True
    return False


def _module_checks(
    tree: ast.Module, source: SourceFile, catalog: Catalog, settings: Settings, imports: ImportTable
) -> list[Finding]:
    context = ModuleContext(tree=tree, source=source, settings=settings, catalog=catalog, imports=imports)
    findings: list[Finding] = []
    selection = rule_selection(settings)
    for rule in all_rules():
        if not selection.enabled(rule.code):
            continue  # a rule switched off costs nothing
        check = getattr(rule.module, "check_module", None)
        if check is not None:
            findings.extend(check(context))
    return findings


_GROUP_FACTS: dict[str, groups.GroupFacts] = {}


NONBLOCKING = "p2p_nonblocking"  # the catalog kind of `isend`, `irecv`, `batch_isend_irecv`


class NonblockingFiles:
    """Whether a file of the run names a non-blocking point-to-point call (`isend`, `irecv`,
    `batch_isend_irecv`, `P2POp`, or one the catalog marks `p2p_nonblocking`), by its tree; a file
    that is not modelled in this process counts as naming one. Each file is walked once."""

    def __init__(self, module: ModuleInfo, catalog: Catalog, project: Project | None) -> None:
        self.module, self.catalog, self.project = module, catalog, project
        functions = catalog.functions.items()
        self.names = frozenset(
            {"P2POp"}
            | {name.rsplit(".", 1)[-1] for name, spec in functions if spec.kind == NONBLOCKING}
            | {method.method for method in catalog.methods if method.spec.kind == NONBLOCKING}
        )
        self.known: dict[str, bool] = {}

    def __call__(self, path: str) -> bool:
        if path not in self.known:
            module = (
                self.module if path == self.module.path else already_loaded(path, self.catalog, self.project)
            )
            self.known[path] = module is None or any(
                (isinstance(node, ast.Name) and node.id in self.names)
                or (isinstance(node, ast.Attribute) and node.attr in self.names)
                for node in ast.walk(module.tree)
            )
        return self.known[path]


def catalog_group_facts(catalog: Catalog) -> groups.GroupFacts:
    """The catalogs' group facts as symbolic values, built once per catalog."""
    facts = _GROUP_FACTS.get(catalog.fingerprint)
    if facts is None:
        members = {
            name: value_from_spec(spec, f"members:{name}") for name, spec in catalog.group_members.items()
        }
        facts = _GROUP_FACTS[catalog.fingerprint] = groups.GroupFacts(members, catalog.group_grids)
    return facts


def _allowed(
    place: Place,
    regions: list[Region],
    rules: StaticRules,
    settings: Settings,
    stats: SolveStats,
    facts: GroupFacts,
    nonblocking: Callable[[str], bool],
    cuts: list[BudgetCut],
) -> list[Candidate]:
    """`_findings_for` the regions of one function (at `place`) within its solver allowance
    (`z3-function-rlimit`); past it, none of its findings and a cut that names it."""
    try:
        with solver_allowance(settings.z3_function_rlimit):
            return _findings_for(regions, rules, settings, stats, facts, nonblocking)
    except SolverBudgetSpent as spent:
        cuts.append(BudgetCut(place.path, place.line, place.name, Budget.Z3_FUNCTION, spent.units))
        return []


def _findings_for(
    regions: list[Region],
    rules: StaticRules,
    settings: Settings,
    stats: SolveStats,
    facts: GroupFacts = NO_GROUP_FACTS,
    nonblocking: Callable[[str], bool] | None = None,
) -> list[Candidate]:
    """The findings of the rules about `regions` (one run of the interpreter). `nonblocking(path)`
    tells whether a file names a non-blocking point-to-point call; None: no schedule is simulated."""
    results = []
    wanted = rules.wanted
    verdict = _simulated(regions, settings, nonblocking) if DivergenceKind.P2P in wanted else Verdict()
    if verdict.clean:  # every rank of every world simulated ran to its end: no pairwise search
        wanted = wanted - {DivergenceKind.P2P}
    pairwise: list[Divergence] = []  # point-to-point waits found pair by pair (solve)
    for region in regions:
        check_active()  # the file's safety clock (budget.py)
        found = [
            divergence
            for divergence in solve_region(
                region, settings.world_size, settings.z3_rlimit, stats, wanted, group_facts=facts
            )
            if not (behind_unknown_code(divergence) or _may_serve_remote_calls(divergence))
        ]
        pairwise.extend(d for d in found if d.kind is DivergenceKind.P2P)
        for divergence in found:
            if divergence.kind is DivergenceKind.P2P:
                continue
            finding = classify(divergence, rules)
            if finding is not None:
                results.append(finding)
        for rule in rules.region_rules:
            finding = _region_finding(region, rule, found)
            if finding is not None:
                results.append(finding)
    # A wait found pair by pair keeps its message; else the one the simulation found (a cycle
    # through more ranks, or one that opens after some calls matched).
    if nonblocking is not None:
        # An `isend` posted before a blocking `recv` answers the peer's blocking `recv` (a
        # send_recv helper): non-blocking calls are not recorded, so no wait is claimed near one.
        pairwise = [d for d in pairwise if not _near_nonblocking(d, nonblocking)]
    if not pairwise:
        pairwise = confirm(verdict, settings.world_size, settings.z3_rlimit, stats)
    for divergence in pairwise:
        finding = classify(divergence, rules)
        if finding is not None:
            results.append(finding)
    return results


def _near_nonblocking(divergence: Divergence, nonblocking: Callable[[str], bool]) -> bool:
    """The file of the function, or of a call of either rank's sequence, names a non-blocking call."""
    events = (*divergence.sequence_a, *divergence.sequence_b)
    return any(nonblocking(path) for path in files_of(divergence.region, events))


def _simulated(
    regions: list[Region], settings: Settings, nonblocking: Callable[[str], bool] | None
) -> Verdict:
    """What simulating every rank's point-to-point schedule says about the function of `regions`
    (p2p_schedule); nothing when `nonblocking` is None (a helper run alone, to place a finding)."""
    if nonblocking is None:
        return Verdict()
    loops = loop_table(regions)
    for region in regions:
        if region.kind == "function":
            return schedule_deadlock(region, loops, settings.world_size, nonblocking)
    return Verdict()


def _may_serve_remote_calls(divergence: Divergence) -> bool:
    """Some path of the region sends a communicating callable to another process (`rpc.remote(
    worker, Trainer)`), and one of the two ranks issues nothing of its own on the channel: that rank
    may be the destination, issuing what it is sent (an RPC trainer waiting for its shutdown
    signal). A rank that issues something of its own is still compared."""
    if divergence.sequence_a and divergence.sequence_b:
        return False
    return any(_sends_remote(element) for path in divergence.region.paths for element in path.events)


def _sends_remote(element: Element) -> bool:
    if isinstance(element, LoopEvent):
        return REMOTE_OP in element.body_ops
    return element.op == REMOTE_OP


def classify(divergence: Divergence, rules: StaticRules) -> Candidate | None:
    """The finding of the rule that owns `divergence`, where it arises, and the calls it went through."""
    rule = rules.owner(divergence)
    if rule is None:
        return None
    code = rule.code
    described: tuple[str, dict[str, str]] = rule.module.describe(divergence)
    template, args = _in_local_ranks(described[0], described[1], divergence)
    primary, origin = locate(divergence, rule.anchor)
    cause = getattr(rule.module, "cause", None)
    cause_at = cause(divergence) if cause is not None else None
    if rule.anchor is Anchor.GUARD and cause_at is not None and cause_at.path == primary.path:
        primary = cause_at  # the guard that reads the cause, in the file of the finding
    finding = Finding(
        code=rule.code,
        severity=rule.severity,
        location=primary,
        message_template=template,
        message_args=tuple(sorted(args.items())),
        counterexample=counterexample(divergence),
        function=divergence.region.function,
        cause=cause_at,
    )
    key = (code, origin[0], origin[1]) if origin else (code, primary.path, primary.line)
    sites = _divergence_sites(divergence)
    if code == SEQUENCE_CODE and any(r.path != divergence.region.path_name for r in divergence.why):
        sites = _sequence_sites(divergence, sites)  # split in a helper of another file: ask it too
    return finding, key, sites


def _in_local_ranks(template: str, args: dict[str, str], d: Divergence) -> tuple[str, dict[str, str]]:
    """Among the members of a group whose conditions read only local ranks, the global ranks the
    solver picked mean nothing: the message names the local ranks, and the group."""
    local = dict(d.local_ranks)
    reads_global = any(name == "rank" for r in d.why for item in r.ranks for name, _ in item.reads)
    keys = ("rank_x", "rank_y")
    if not local or reads_global or not all(args.get(key, "").isdigit() for key in keys):
        return template, args
    if not all(int(args[key]) in local for key in keys) or "{group}" in template:
        return template, args
    shown = {**args, **{key: str(local[int(args[key])]) for key in keys}, "group": d.group}
    for key in keys:
        template = template.replace(f"rank {{{key}}}", f"local rank {{{key}}}")
    template = template.replace("ranks {rank_x} and", "local ranks {rank_x} and")
    world = " (world size {world})"
    if world in template:
        return template.replace(world, " in `{group}`" + world, 1), shown
    return template + " in `{group}`", shown


def _region_finding(region: Region, rule: Rule, found: list[Divergence]) -> Candidate | None:
    """A rule's finding about a whole region, told what the solver found in it (`found`)."""
    described = rule.module.describe_region(region, found)
    if described is None:
        return None
    template, args = described
    location = Location(region.path_name, region.line, 0)
    finding = Finding(
        rule.code, rule.severity, location, template, tuple(sorted(args.items())), None, region.function
    )
    return finding, (rule.code, region.path_name, region.line), ()


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


SHOWN_CALLS = 12  # the last calls of a simulated point-to-point schedule shown per rank


def _schedule_steps(blocked: Blocked) -> tuple[TraceStep, ...]:
    """A rank's simulated blocking calls up to the one it waits in (all of them if it finished)."""
    end = min(blocked.at + 1, len(blocked.calls))
    steps = []
    for index in range(max(0, end - SHOWN_CALLS), end):
        event, peer = blocked.calls[index]
        step = _step(event)
        towards = f"to rank {peer}" if event.kind == "p2p_send" else f"from rank {peer}"
        waits = ", waits here" if index == blocked.at else ""
        steps.append(
            replace(step, detail=f"{step.detail}; {towards}{waits}" if step.detail else towards + waits)
        )
    return tuple(steps)


def counterexample(d: Divergence) -> Counterexample:
    model = d.model
    if d.blocked:
        shown = sorted((b.rank, _schedule_steps(b)) for b in d.blocked)
        return Counterexample(world_size=model.world, ranks=tuple(shown), values=model.values, why=d.why)
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
    return Counterexample(
        world_size=model.world,
        ranks=tuple(ranks),
        values=model.values,
        why=d.why,
        group=d.group,
        local_ranks=tuple(sorted(d.local_ranks)),
    )


_STANDALONE: dict[tuple[str, int], set[tuple[str, str, int]]] = {}
# The conditions that split the ranks of each helper's own CC003 findings, by (path, helper name).
_STANDALONE_EXITS: dict[tuple[str, str], frozenset[tuple[str, int, str]]] = {}


def _reported_in_callee(
    candidate: Candidate,
    path: str,
    catalog: Catalog,
    settings: Settings,
    project: Project | None,
) -> bool:
    """A divergence that a helper in another file shows on its own is reported there, once."""
    finding, origin, sites = candidate
    split = _splitting_conditions(finding) if finding.code == SEQUENCE_CODE else frozenset()
    if any(condition[0] == path for condition in split):
        split = frozenset()  # the ranks part here too: not only on a helper's conditions
    if project is None or (origin[1] == path and not split) or finding.counterexample is None:
        return False
    for site in sites:
        if not site.callee_path or site.callee_path == path:
            continue
        standalone = _standalone_origins(site.callee_path, site.callee, catalog, settings, project)
        if origin[1] != path and origin in standalone:
            return True
        # The helper's own early exit, reported there as CC003 (one root cause, one finding).
        if split and split <= _STANDALONE_EXITS.get((site.callee_path, site.callee), frozenset()):
            return True
    return False


def _sequence_sites(d: Divergence, sites: tuple[Site, ...]) -> tuple[Site, ...]:
    """`sites`, then the calls through which either rank's sequence went before the divergence."""
    found = dict.fromkeys(sites)
    for sequence in (d.sequence_a, d.sequence_b):
        for element in sequence[: d.index + 1]:
            found.update(dict.fromkeys(element.chain))
    return tuple(found)


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
    module = Loader(catalog, project, settings, complete_loaded_module).load(path)
    if module is None:
        return set()
    function = module.functions.get(function_name)
    if function is None:
        return set()
    key = (path, function.lineno)
    if key not in _STANDALONE:
        _STANDALONE[key] = set()  # recursion guard
        extractor = Interpreter(module, settings.max_paths, settings.max_inline_depth, settings.max_steps)
        try:
            regions = extractor.run_function(function, None, function_name)
        except PathLimitExceeded:
            regions = []
        for region in regions:
            region.conditions = extractor.conditions
        try:  # bounded like any function's queries; over the allowance it places nothing
            with solver_allowance(settings.z3_function_rlimit):
                found = _findings_for(
                    regions, static_rules(None), settings, SolveStats(), catalog_group_facts(catalog)
                )
        except SolverBudgetSpent:
            found = []
        _STANDALONE[key] = {origin for _, origin, _ in found}
        _STANDALONE_EXITS[(path, function_name)] = frozenset(
            condition
            for finding, _, _ in found
            if finding.code == EXIT_CODE
            for condition in _splitting_conditions(finding)
        )
    return _STANDALONE[key]


def _splitting_conditions(finding: Finding) -> frozenset[tuple[str, int, str]]:
    example = finding.counterexample
    if example is None:
        return frozenset()
    return frozenset((reason.path, reason.line, reason.condition) for reason in example.why)


def _one_root_cause(candidates: list[Candidate]) -> list[Candidate]:
    """An early exit in a helper is reported once, as CC003 at the exit: the callers of the helper
    see ranks issue different sequences (the `return` ends only the helper), which is the same
    cause and not reported again as CC001 there. A caller's CC001 is that when every condition that
    splits its ranks also splits those of a CC003 found in another function."""
    exits: dict[tuple[str, int, str], set[str]] = {}
    for finding, _, _ in candidates:
        if finding.code == EXIT_CODE:
            for condition in _splitting_conditions(finding):
                exits.setdefault(condition, set()).add(finding.function)
    if not exits:
        return candidates
    kept = []
    for candidate in candidates:
        finding = candidate[0]
        split = _splitting_conditions(finding)
        same_cause = (
            finding.code == SEQUENCE_CODE
            and bool(split)
            and all(condition in exits and exits[condition] - {finding.function} for condition in split)
        )
        if not same_cause:
            kept.append(candidate)
    return kept


def _deduplicate(candidates: list[Candidate]) -> list[Finding]:
    """A divergence is reported where it arises: in the helper that holds it, or at the call site
    closest to it, not again at every caller further up."""
    depth: dict[tuple[str, str, int], int] = {}
    for finding, origin, _ in candidates:
        depth[origin] = min(depth.get(origin, 99), _chain_depth(finding, origin))
    kept: dict[tuple[str, str, int], Finding] = {}
    for finding, origin, _ in candidates:
        if _chain_depth(finding, origin) > depth[origin]:
            continue
        key = (finding.code, finding.location.path, finding.location.line)
        kept.setdefault(key, finding)
    return list(kept.values())


def _chain_depth(finding: Finding, origin: tuple[str, str, int]) -> int:
    """How many calls down from the reporting function the divergence lies: the chain of the
    collective at the origin where the counterexample shows it (a helper's own finding is then
    shallower than its caller's, whatever else either rank issued first), else the shallowest
    chain of any collective reached through a call."""
    example = finding.counterexample
    if example is None:
        return 0
    steps = [step for _, sequence in example.ranks for step in sequence]
    at_origin = [len(step.chain) for step in steps if (step.path, step.line) == origin[1:]]
    if at_origin:
        return min(at_origin)
    depths = [len(step.chain) for step in steps if step.chain]
    return min(depths) if depths else 0
