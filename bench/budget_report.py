"""What the work budgets cost on real packages: per package, the functions cut, the functions analysed
only in the reduced mode, and the fate of the packages' main training loops.

    python bench/budget_report.py [--packages composer,deepspeed,torchtitan] [-j 2] [--json out.json]

The packages are bench/precision.py's (corpus.PINNED_PACKAGES: same pinned versions, same fetch
and scratch copy, `corpus.fetch` into `~/.cache/collcheck-bench/inject/`, nothing imported or
run). Each is checked twice, whole, `--no-cache`, `--format json`:

1. with default settings: the report's `budget_cuts` are the functions (or module bodies) a work
   budget cut short, with the budget that did it (`max-steps`/`max-paths`: skipped, nothing of
   them is checked; `z3-rlimit`/`z3-function-rlimit`: extracted, but some of their pairs of paths
   were not decided); its `notes` name every function that went over the full analysis's budget and
   ran in the reduced mode (over_budget.py: paths joined, only the divergences the function itself
   decides are kept), and why: over `max-steps` or `max-paths` itself, or calling a helper that is
   (a call to such a helper stops the full analysis of its callers too); "helpers opaque" when even
   the reduced mode went over and the function's communicating helpers were taken as unknown
   collectives;
2. with `max-steps = 1` in the scratch copy's pyproject.toml: every function the engine takes as a
   root (a function that communicates, per its own analysis) goes over that budget at once and is
   named in a note or a cut. This run is only a census of the roots, so that a main loop named in
   neither list of run 1 can be called "analysed in full" only when run 2 shows it was analysed at all.
   A root whose run executes a single statement stays within `max-steps = 1` and is not named: the
   count of functions analysed is a lower bound (the main loops are far longer).

The main loops looked for are MAIN_LOOPS (file, qualified name). Not a test: exit status 0 unless a
package could not be checked (1).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import inject_bugs
from corpus import CACHE, PINNED_PACKAGES, PackageSpec, fetch

# The main training loops issue 26 named: (package, file under the scratch root, qualified name).
MAIN_LOOPS: tuple[tuple[str, str, str], ...] = (
    ("composer", "composer/trainer/trainer.py", "Trainer.fit"),
    ("deepspeed", "deepspeed/runtime/engine.py", "DeepSpeedEngine.step"),
    ("torchtitan", "torchtitan/trainer.py", "Trainer.train"),
)
# The notes of over_budget.py: `path:line: Class.method <what>: why`, or `path: module body <what>: why`.
PLACE = r"^(?P<path>.+?):(?:(?P<line>\d+): (?P<name>\S+)| (?P<body>module body))"
REDUCED = re.compile(PLACE + r" analysed in the reduced mode: (?P<why>.*)$")
SKIPPED = re.compile(PLACE + r" skipped: ")
OPAQUE_MARK = "its communicating helpers were taken as unknown collectives"
INHERITED_MARK = "itself over the budget"
CENSUS_SETTING = "max-steps = 1\n"


@dataclass(frozen=True)
class Function:
    path: str  # relative to the scratch root: `composer/trainer/trainer.py`
    line: int  # of its `def`; 1 for a module body
    name: str  # `Class.method`, or "module body"

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.name}"


@dataclass(frozen=True)
class Reduced:
    function: Function
    cause: str  # "max-steps", "max-paths", "a helper over the budget", or the note's own words
    helpers_opaque: bool


@dataclass(frozen=True)
class Cut:
    function: Function
    budget: str
    limit: int


@dataclass
class PackageBudget:
    name: str
    source: str
    files: int
    roots: int  # functions and module bodies the engine analysed (run 2's census)
    reduced: list[Reduced] = field(default_factory=list)
    cuts: list[Cut] = field(default_factory=list)
    main_loops: dict[str, str] = field(default_factory=dict)  # "file: name" -> status in words
    findings: int = 0  # of run 1
    seconds: float = 0.0


def _function(match: re.Match[str]) -> Function:
    if match.group("body"):
        return Function(match.group("path"), 1, "module body")
    return Function(match.group("path"), int(match.group("line")), match.group("name"))


def cause_of(why: str) -> str:
    """The budget a reduced-mode note names (its text after "analysed in the reduced mode: ")."""
    if INHERITED_MARK in why:
        return "a helper over the budget"
    if "statements" in why:
        return "max-steps"
    if "paths" in why:
        return "max-paths"
    return why.split(";")[0]


def reduced_functions(notes: list[str]) -> list[Reduced]:
    found = []
    for note in notes:
        match = REDUCED.match(note)
        if match:
            why = match.group("why")
            found.append(Reduced(_function(match), cause_of(why), OPAQUE_MARK in why))
    return found


def cuts_of(report: dict[str, object]) -> list[Cut]:
    cuts = report.get("budget_cuts", [])
    assert isinstance(cuts, list)
    return [
        Cut(Function(c["path"], int(c["line"]), c["function"]), c["budget"], int(c["limit"])) for c in cuts
    ]


def census(report: dict[str, object]) -> set[Function]:
    """The roots named by a `max-steps = 1` run: every one went over, so every one has a note or a cut."""
    notes = report.get("notes", [])
    assert isinstance(notes, list)
    named = {r.function for r in reduced_functions([str(n) for n in notes])}
    for note in notes:
        match = SKIPPED.match(str(note))
        if match:
            named.add(_function(match))
    return named | {cut.function for cut in cuts_of(report)}


def loop_status(path: str, name: str, result: PackageBudget, roots: set[Function]) -> str:
    def here(function: Function) -> bool:
        return function.path == path and function.name == name

    cut = [c for c in result.cuts if here(c.function)]
    if any(c.budget in ("max-steps", "max-paths") for c in cut):
        return f"CUT (skipped: over {', '.join(c.budget for c in cut)} in the reduced mode too)"
    reduced = [r for r in result.reduced if here(r.function)]
    solver = f"; solver budget {cut[0].budget} cut some of its pairs" if cut else ""
    if reduced:
        opaque = ", communicating helpers taken as unknown collectives" if reduced[0].helpers_opaque else ""
        return f"REDUCED (cause: {reduced[0].cause}{opaque}){solver}"
    if any(here(function) for function in roots):
        return f"FULL{solver}"
    return "NOT ANALYSED (not taken as a communicating function, or not found)"


def check(spec: PackageSpec, scratch: Path, jobs: int, bounds: str = "") -> PackageBudget:
    """`bounds`: `[tool.collcheck]` lines for run 1 (`max-steps = 20000`), to see what a larger
    budget would analyse in full; the census run never has them (it sets its own max-steps)."""
    package, source = fetch(spec, CACHE)
    workspace = inject_bugs.prepare(spec.name, package, scratch)
    settings = workspace.root / "pyproject.toml"
    base = settings.read_text(encoding="utf-8")
    settings.write_text(base + bounds, encoding="utf-8")
    started = time.perf_counter()
    inject_bugs.run_collcheck(workspace.target, workspace.root, jobs, no_cache=True)
    report = json.loads((workspace.root / "report.json").read_text(encoding="utf-8"))
    seconds = time.perf_counter() - started
    settings.write_text(base + CENSUS_SETTING, encoding="utf-8")
    inject_bugs.run_collcheck(workspace.target, workspace.root, jobs, no_cache=True)
    roots = census(json.loads((workspace.root / "report.json").read_text(encoding="utf-8")))
    result = PackageBudget(
        spec.name,
        source,
        int(report["summary"]["files"]),
        len(roots),
        reduced_functions([str(n) for n in report["notes"]]),
        cuts_of(report),
        findings=int(report["summary"]["findings"]),
        seconds=seconds,
    )
    for name, path, qualname in MAIN_LOOPS:
        if name == spec.name:
            result.main_loops[f"{path}: {qualname}"] = loop_status(path, qualname, result, roots)
    return result


def describe(result: PackageBudget) -> list[str]:
    own = Counter(r.cause for r in result.reduced)
    opaque = sum(1 for r in result.reduced if r.helpers_opaque)
    by_budget = Counter(c.budget for c in result.cuts)
    share = f"{len(result.reduced) / result.roots:.1%}" if result.roots else "-"
    lines = [
        f"== {result.name} ({result.source}; {result.files} files, "
        f"at least {result.roots} functions analysed, {result.findings} findings, {result.seconds:.0f} s) ==",
        f"reduced mode: {len(result.reduced)} ({share} of those analysed); causes: "
        + (", ".join(f"{cause} {count}" for cause, count in own.most_common()) or "-")
        + f"; helpers opaque in {opaque}",
        "cut: " + (", ".join(f"{budget} {count}" for budget, count in by_budget.most_common()) or "none"),
    ]
    lines += [f"  cut      {c.function} ({c.budget} {c.limit:,})" for c in result.cuts]
    for r in result.reduced:
        lines.append(f"  reduced  {r.function} ({r.cause}{', helpers opaque' if r.helpers_opaque else ''})")
    lines += [f"main loop {where}: {status}" for where, status in result.main_loops.items()]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", default=",".join(spec.name for spec in PINNED_PACKAGES))
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--bound",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a work budget for the main run, e.g. max-steps=20000 (repeatable; default: collcheck's)",
    )
    args = parser.parse_args(argv)
    specs = {spec.name: spec for spec in PINNED_PACKAGES}
    wanted = [name.strip() for name in args.packages.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in specs]
    if unknown:
        parser.error(f"unknown packages {unknown}; known: {sorted(specs)}")
    bounds = "".join(
        f"{key.strip()} = {value.strip()}\n" for key, _, value in (b.partition("=") for b in args.bound)
    )
    results: list[PackageBudget] = []
    status = 0
    with tempfile.TemporaryDirectory(prefix="collcheck-budget-") as scratch:
        for name in wanted:
            try:
                results.append(check(specs[name], Path(scratch), args.jobs, bounds))
            except Exception as error:  # a package that cannot be fetched or checked is reported
                print(f"{name}: not checked: {error}", file=sys.stderr)
                status = 1
                continue
            print("\n".join(describe(results[-1])), flush=True)
    total_reduced = sum(len(r.reduced) for r in results)
    total_cut = sum(len(r.cuts) for r in results)
    total_roots = sum(r.roots for r in results)
    print(
        f"\ntotal: {len(results)} packages, {total_roots} functions analysed, "
        f"{total_reduced} in the reduced mode, {total_cut} cut"
    )
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1), encoding="utf-8")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
