"""One file through the static pipeline: parse -> module model -> extract -> solve -> classify.

In: a `SourceFile`, the `Catalog`, the `Settings`, the `Project`, and the run's rules as a
`rulebook.Rulebook` (collcheck.api passes collcheck.classify's). Out: its `FileResult`. The
divergences the solver finds are handed to the rulebook, which asks the rules which finding each
becomes and which findings one root cause explains; the engine names no rule and imports none.

The engine never prints. A file that cannot be parsed becomes a FileError; a function that a
work budget cuts short (statements, paths, z3 resource units: budget.py, over_budget.py) becomes a
`BudgetCut`, a note that names it.
"""

from __future__ import annotations

import ast
import os
from dataclasses import replace
from functools import partial

from collcheck.catalog import Catalog
from collcheck.config import Settings
from collcheck.findings import Budget, BudgetCut, FileError, FileResult, Finding, UnusedSuppression
from collcheck.lines import line_texts
from collcheck.source import SourceFile
from collcheck.static import groups
from collcheck.static.budget import SolverBudgetSpent, check_active, solver_allowance
from collcheck.static.caller_context import RootRun, judged_in_callers, may_be_judged_in_file, root_run
from collcheck.static.calls import REMOTE_OP
from collcheck.static.catalog_values import value_from_spec
from collcheck.static.closures import Closure
from collcheck.static.context import ModuleContext
from collcheck.static.divergence import Divergence, DivergenceKind
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
from collcheck.static.names import ImportTable, forget_walks, module_imports, nodes_under
from collcheck.static.over_budget import (
    MODULE_BODY,
    Mode,
    Place,
    decided_in,
    decided_on_chain,
    lines_of,
    owning_a_split,
    run_within_budget,
)
from collcheck.static.p2p_schedule import (
    NonblockingSites,
    Verdict,
    confirm,
    files_of,
    loop_table,
    schedule_deadlock,
)
from collcheck.static.prefilter import trigger_pattern
from collcheck.static.program import Element, LoopEvent, Region, RegionKind
from collcheck.static.project import Project, read_digest
from collcheck.static.reads import note, note_model, recording
from collcheck.static.rulebook import Candidate, Explanations, Rulebook
from collcheck.static.smt import SolveStats
from collcheck.static.solve import solve_region
from collcheck.static.state import PathLimitExceeded
from collcheck.suppress import apply_suppressions, build_suppressions, parse_suppressions


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
    source: SourceFile,
    catalog: Catalog,
    settings: Settings,
    project: Project | None = None,
    *,
    rules: Rulebook,
) -> FileResult:
    """The findings of `rules` in one file (the rules of `settings`'s selection, built by the caller)."""
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
    try:
        with recording() as reads:
            if loaded is not None:
                note_model(loaded.reads)  # modelled as another file's helper: what that read, this file reads
            findings = _analyze_tree(
                tree, source, catalog, settings, rules, (result.notes, result.budget_cuts), stats, project
            )
    except RecursionError:
        result.error = FileError(source.path, "too deeply nested to analyse")
        return result
    finally:
        result.z3_queries, result.settled_pairs = stats.queries, stats.settled
        result.reads = {
            path: digest for path, digest in reads.items() if path != os.path.realpath(source.path)
        }
    result.budget_cuts.extend(cut for cut in stats.cuts if cut not in result.budget_cuts)
    comments = parse_suppressions(source.text)
    suppressions = build_suppressions(comments, _def_spans(tree) if comments else {})
    result.findings, unused = apply_suppressions(findings, suppressions, source.path)
    result.unused_suppressions = _searched(unused, rules.unsearched)
    kept = already_loaded(source.path, catalog, project)
    if project is not None and (kept is None or kept.tree is not tree):
        # A model not kept for other files (`_analyze_tree`: it runs nothing) is never released
        # by `forget_loaded`: its walks, each holding its node, would wait for a full collection.
        forget_walks(tree)
    return result


def _searched(unused: list[UnusedSuppression], unsearched: frozenset[str]) -> list[UnusedSuppression]:
    """Unused suppressions, less the codes this run did not look for (a selection of tree checks
    only does not search for divergences: their suppressions are not known to be unused)."""
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
    rules: Rulebook,
    remarks: tuple[list[str], list[BudgetCut]],
    stats: SolveStats,
    project: Project | None = None,
) -> list[Finding]:
    """The file's findings; `remarks` gets the notes (functions reduced or skipped, then the
    solver's notes) and the functions a work budget cut short."""
    notes, cuts = remarks
    if not rules.any:  # only module checks are selected: no extraction, no solver
        return sorted(
            _module_checks(tree, source, catalog, settings, module_imports(tree), rules), key=Finding.sort_key
        )
    setup, main = module_body(tree)
    body = setup + main
    body_communicates: bool | None = None  # asked once, below, unless asked here first
    loaded = already_loaded(source.path, catalog, project)
    if loaded is not None and loaded.tree is tree:
        module = loaded
        extractor = Interpreter(module, settings.max_paths, settings.max_inline_depth, settings.max_steps)
        entries = _entries(module)
    else:
        loader = Loader(catalog, project, settings, complete_loaded_module) if project is not None else None
        with recording() as build_reads:
            module = build_module(tree, source.path, catalog, loader, source.text)
        if project is not None:  # a later file that uses this model reads this file
            real = os.path.realpath(source.path)
            module.reads[real] = read_digest(project, real)
        extractor = Interpreter(module, settings.max_paths, settings.max_inline_depth, settings.max_steps)
        entries = _entries(module)
        if not entries:
            body_communicates = _communicates(body, module)
        # Globals and class attributes are read only by runs of the file's code: a file that names
        # a collective but runs none (nearly half of vllm's) is not completed, and not kept as a
        # model for other files either (one that needs it as a helper loads it completed).
        if entries or body_communicates:
            with recording() as reads:
                complete_module(module, extractor)
            module.reads.update(build_reads)
            module.reads.update(reads)
            remember_loaded(module)
    candidates: list[Candidate] = []
    nonblocking = NonblockingFiles(module, catalog, project)
    facts = catalog_group_facts(catalog)
    roots: list[tuple[FunctionNode, str | None, str, Closure | None]] = [
        (function, class_name, qualname, None) for function, class_name, qualname in entries
    ]
    runs: list[RootRun] = []  # each root's run, for the judgement of helpers by their callers
    every_root_ran = True
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
            every_root_ran = False
            continue
        regions, mode = run
        for region in regions:
            region.conditions = extractor.conditions
        # Nested functions handed to unknown code are roots of their own (closures.py).
        nested = extractor.nested_roots(function, qualname, closure)
        roots.extend((inner, class_name, name, scope) for inner, name, scope in nested)
        if mode is Mode.REDUCED:
            regions = owning_a_split(regions, extractor.conditions, source.path, lines_of(function))
        before = (len(cuts), len(stats.cuts), stats.unknown)
        found = _allowed(place, regions, rules, settings, stats, facts, nonblocking, cuts)
        found = _kept(found, mode, source.path, lines_of(function), tree)
        complete = mode is Mode.FULL and before == (len(cuts), len(stats.cuts), stats.unknown)
        runs.append(root_run(function, class_name, complete, regions, found))
    ran = None
    module_place = Place(source.path, 1, MODULE_BODY)
    if body_communicates if body_communicates is not None else _communicates(body, module):
        ran = run_within_budget(extractor, partial(extractor.run_module, body), module_place, notes, cuts)
        every_root_ran = every_root_ran and ran is not None
    if ran is not None:
        for region in ran[0]:
            region.conditions = extractor.conditions
        whole = (1, len(line_texts(source.text)))
        reduced = ran[1] is Mode.REDUCED
        regions = owning_a_split(ran[0], extractor.conditions, source.path, whole) if reduced else ran[0]
        before = (len(cuts), len(stats.cuts), stats.unknown)
        found = _allowed(module_place, regions, rules, settings, stats, facts, nonblocking, cuts)
        found = _kept(found, ran[1], source.path, whole, tree)
        complete = ran[1] is Mode.FULL and before == (len(cuts), len(stats.cuts), stats.unknown)
        runs.append(root_run(None, None, complete, regions, found))
    candidates.extend(judged_in_callers(runs, every_root_ran, tree, source.path))
    extractor.release()  # its runs are over: the rest reads regions and findings only
    notes.extend(stats.notes)
    candidates = [
        c for c in candidates if not _reported_in_callee(c, source.path, catalog, settings, project, rules)
    ]
    findings = _deduplicate(rules.one_root_cause(candidates))
    findings.extend(_module_checks(tree, source, catalog, settings, module.imports, rules))
    return sorted(findings, key=Finding.sort_key)


def _kept(
    found: list[Candidate], mode: Mode, path: str, lines: tuple[int, int], tree: ast.Module
) -> list[Candidate]:
    """The candidates a run in `mode` keeps: all in the full analysis; in its second try, those
    decided in the function or on the diverging collectives' call chains (`decided_on_chain`); in
    the reduced mode, those the function decides itself (`decided_in`)."""
    if mode is Mode.REDUCED:
        return [c for c in found if decided_in(c.finding, path, lines)]
    if mode is Mode.JOINED:
        return [c for c in found if decided_on_chain(c.finding, path, lines, tree)]
    return found


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
    tree: ast.Module,
    source: SourceFile,
    catalog: Catalog,
    settings: Settings,
    imports: ImportTable,
    rules: Rulebook,
) -> list[Finding]:
    context = ModuleContext(tree=tree, source=source, settings=settings, catalog=catalog, imports=imports)
    return rules.module_findings(context)


_GROUP_FACTS: dict[str, groups.GroupFacts] = {}


NONBLOCKING = "p2p_nonblocking"  # the catalog kind of `isend`, `irecv`, `batch_isend_irecv`


class NonblockingFiles:
    """Whether a file of the run names a non-blocking point-to-point call (`isend`, `irecv`,
    `batch_isend_irecv`, `P2POp`, or one the catalog marks `p2p_nonblocking`; not in an
    annotation) outside the places of the transfers the run recorded there (`recorded`: line,
    column, end line, end column); a file that is not modelled in this process counts as naming
    one. Each file is walked once."""

    def __init__(self, module: ModuleInfo, catalog: Catalog, project: Project | None) -> None:
        self.module, self.catalog, self.project = module, catalog, project
        functions = catalog.functions.items()
        self.names = frozenset(
            {"P2POp"}
            | {name.rsplit(".", 1)[-1] for name, spec in functions if spec.kind == NONBLOCKING}
            | {method.method for method in catalog.methods if method.spec.kind == NONBLOCKING}
        )
        self.known: dict[str, tuple[tuple[int, int], ...] | None] = {}

    def __call__(self, path: str, recorded: frozenset[tuple[int, int, int, int]] = frozenset()) -> bool:
        if path not in self.known:
            module = (
                self.module if path == self.module.path else already_loaded(path, self.catalog, self.project)
            )
            if module is not None:
                note_model(module.reads)
            self.known[path] = None if module is None else self._naming(module.tree)
        places = self.known[path]
        spans = [((line, column), (end_line, end_column)) for line, column, end_line, end_column in recorded]
        if places is None:
            return True
        return any(not any(start <= place <= end for start, end in spans) for place in places)

    def _naming(self, tree: ast.Module) -> tuple[tuple[int, int], ...]:
        """Where the file names a non-blocking call, outside annotations."""
        annotations = {
            id(inner)
            for node in ast.walk(tree)
            for annotation in _annotations(node)
            for inner in ast.walk(annotation)
        }
        return tuple(
            (node.lineno, node.col_offset)
            for node in ast.walk(tree)
            if id(node) not in annotations
            and (
                (isinstance(node, ast.Name) and node.id in self.names)
                or (isinstance(node, ast.Attribute) and node.attr in self.names)
            )
        )


def _annotations(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.arg | ast.AnnAssign):
        return [node.annotation] if node.annotation is not None else []
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return [node.returns] if node.returns is not None else []
    return []


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
    rules: Rulebook,
    settings: Settings,
    stats: SolveStats,
    facts: GroupFacts,
    nonblocking: NonblockingSites,
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
    rules: Rulebook,
    settings: Settings,
    stats: SolveStats,
    facts: GroupFacts = NO_GROUP_FACTS,
    nonblocking: NonblockingSites | None = None,
) -> list[Candidate]:
    """The findings of the rules about `regions` (one run of the interpreter). `nonblocking(path)`
    tells whether a file names a non-blocking point-to-point call; None: no schedule is simulated."""
    results: list[Candidate] = []
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
            candidate = rules.finding(divergence)
            if candidate is not None:
                results.append(candidate)
        results.extend(rules.region_findings(region, found))
    # A wait found pair by pair keeps its message; else the one the simulation found (a cycle
    # through more ranks, or one that opens after some calls matched).
    if nonblocking is not None:
        # An `isend` posted before a blocking `recv` answers the peer's blocking `recv` (a
        # send_recv helper): non-blocking calls are not recorded, so no wait is claimed near one.
        pairwise = [d for d in pairwise if not _near_nonblocking(d, nonblocking)]
    if not pairwise:
        pairwise = confirm(verdict, settings.world_size, settings.z3_rlimit, stats)
    for divergence in pairwise:
        candidate = rules.finding(divergence)
        if candidate is not None:
            results.append(candidate)
    return results


def _near_nonblocking(divergence: Divergence, nonblocking: NonblockingSites) -> bool:
    """The file of the function, or of a call of either rank's sequence, names a non-blocking call."""
    events = (*divergence.sequence_a, *divergence.sequence_b)
    return any(nonblocking(path, frozenset()) for path in files_of(divergence.region, events))


def _simulated(regions: list[Region], settings: Settings, nonblocking: NonblockingSites | None) -> Verdict:
    """What simulating every rank's point-to-point schedule says about the function of `regions`
    (p2p_schedule); nothing when `nonblocking` is None (a helper run alone, to place a finding)."""
    if nonblocking is None:
        return Verdict()
    loops = loop_table(regions)
    for region in regions:
        if region.kind is RegionKind.FUNCTION:
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


_STANDALONE: dict[tuple[str, int], set[tuple[str, str, int]]] = {}
# What computing each entry of `_STANDALONE` read of other files (reads.py): a later file that
# uses the entry reads them too.
_STANDALONE_READS: dict[tuple[str, int], dict[str, str]] = {}
# What each helper's own findings explain of its callers' (`Rulebook.root_causes`), by (path, helper name).
_STANDALONE_CAUSES: dict[tuple[str, str], Explanations] = {}


def _reported_in_callee(
    candidate: Candidate,
    path: str,
    catalog: Catalog,
    settings: Settings,
    project: Project | None,
    rules: Rulebook,
) -> bool:
    """A divergence that a helper in another file shows on its own is reported there, once."""
    finding, origin, sites = candidate.finding, candidate.origin, candidate.sites
    split = rules.explainable(finding)
    if any(condition[0] == path for condition in split):
        split = frozenset()  # the ranks part here too: not only on a helper's conditions
    if project is None or (origin[1] == path and not split) or finding.counterexample is None:
        return False
    for site in sites:
        if not site.callee_path or site.callee_path == path:
            continue
        standalone = _standalone_origins(site.callee_path, site.callee, catalog, settings, project, rules)
        if origin[1] != path and origin in standalone:
            return True
        # The helper's own finding that explains this one (an early exit), reported there.
        causes = _STANDALONE_CAUSES.get((site.callee_path, site.callee))
        if causes is not None and causes.explain(finding, split, elsewhere=False):
            return True
    return False


def _standalone_origins(
    path: str, function_name: str, catalog: Catalog, settings: Settings, project: Project, rules: Rulebook
) -> set[tuple[str, str, int]]:
    module = Loader(catalog, project, settings, complete_loaded_module).load(path)
    if module is None:
        return set()
    function = module.functions.get(function_name)
    if function is None or may_be_judged_in_file(function, function_name, module.tree):
        return set()  # its finding may be dropped there, its callers there showing none: report it here
    key = (path, function.lineno)
    if key in _STANDALONE:
        note(_STANDALONE_READS.get(key, {}))  # what computing it read, read again by this file
    else:
        with recording() as reads:
            _standalone_run(key, module, function, function_name, catalog, settings, rules)
        _STANDALONE_READS[key] = reads
    return _STANDALONE[key]


def _standalone_run(
    key: tuple[str, int],
    module: ModuleInfo,
    function: FunctionNode,
    function_name: str,
    catalog: Catalog,
    settings: Settings,
    rules: Rulebook,
) -> None:
    """Run a helper of another file as a root of its own, for `_standalone_origins`."""
    path = key[0]
    _STANDALONE[key] = set()  # recursion guard
    extractor = Interpreter(module, settings.max_paths, settings.max_inline_depth, settings.max_steps)
    try:
        regions = extractor.run_function(function, None, function_name)
    except PathLimitExceeded:
        regions = []
    extractor.release()
    for region in regions:
        region.conditions = extractor.conditions
    every_rule = rules.every_rule()  # the helper's findings, whatever the run's selection
    try:  # bounded like any function's queries; over the allowance it places nothing
        with solver_allowance(settings.z3_function_rlimit):
            facts = catalog_group_facts(catalog)
            found = _findings_for(regions, every_rule, settings, SolveStats(), facts)
    except SolverBudgetSpent:
        found = []
    _STANDALONE[key] = {candidate.origin for candidate in found}
    _STANDALONE_CAUSES[(path, function_name)] = every_rule.root_causes(found)


def _deduplicate(candidates: list[Candidate]) -> list[Finding]:
    """A divergence is reported where it arises: in the helper that holds it, or at the call site
    closest to it, not again at every caller further up."""
    depth: dict[tuple[str, str, int], int] = {}
    for candidate in candidates:
        origin = candidate.origin
        depth[origin] = min(depth.get(origin, 99), _chain_depth(candidate.finding, origin))
    kept: dict[tuple[str, str, int], Finding] = {}
    for candidate in candidates:
        finding, origin = candidate.finding, candidate.origin
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
