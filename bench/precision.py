"""Precision of `collcheck check` on real packages nobody here tuned for, against a triaged ledger.

    python bench/precision.py [--packages vllm,sglang,...] [-j 2] [--out results.json]
                              [--ledger bench/precision-ledger.tsv] [--write-missing FILE]
                              [--extend-select CC008,...]

Each package below is fetched at a pinned version with `pip download --no-deps` into
`~/.cache/collcheck-bench/inject/` (bench/corpus.py, as for bench/inject_bugs.py: only `*.py`
members with safe names are written; nothing third-party is imported or run), copied into a
scratch folder and checked whole with `collcheck check --format json`. Every finding is looked up
in the ledger, `bench/precision-ledger.tsv`, one row per finding:

    package  code  path  line  verdict  reason

`verdict` is TRUE (a concrete per-rank execution makes the sequences differ: the reason gives the
values), DEBATABLE (it hangs only if an invariant collcheck cannot know is broken: the reason names
it) or FALSE (what the model got wrong). The script prints, per package and in total, the findings,
their verdicts, the share of FALSE findings, files that could not be analysed, notes, and the time;
then every finding that is not in the ledger (it must be triaged: `--write-missing FILE` writes
them as ledger rows with an empty verdict to start from) and every ledger row no finding matched
any more. It exits 1 when a finding is not in the ledger (a bench that cannot silently drift),
0 otherwise, even when the 5% goal is missed: the figures are the answer.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import inject_bugs
from corpus import CACHE, PINNED_PACKAGES, PackageSpec, fetch

HERE = Path(__file__).resolve().parent
LEDGER = HERE / "precision-ledger.tsv"
VERDICTS = ("TRUE", "DEBATABLE", "FALSE")
COLUMNS = ("package", "code", "path", "line", "verdict", "reason")
FALSE_GOAL = 0.05

PACKAGES = PINNED_PACKAGES  # pinned: a ledger row speaks of one version's line (corpus.py)


@dataclass(frozen=True)
class LedgerKey:
    package: str
    code: str
    path: str
    line: int


@dataclass(frozen=True)
class Entry:
    verdict: str
    reason: str


def read_ledger(path: Path) -> dict[LedgerKey, Entry]:
    """The ledger's rows by key; a malformed row is an error naming its line."""
    ledger: dict[LedgerKey, Entry] = {}
    if not path.exists():
        return ledger
    with path.open(encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.reader(handle, delimiter="\t"), start=1):
            if number == 1 or not row or row[0].startswith("#"):
                continue
            if len(row) != len(COLUMNS) or row[4] not in VERDICTS or not row[3].isdigit():
                expected = f"{len(COLUMNS)} columns {COLUMNS}, verdict in {VERDICTS}"
                raise SystemExit(f"{path}:{number}: expected {expected}")
            ledger[LedgerKey(row[0], row[1], row[2], int(row[3]))] = Entry(row[4], row[5])
    return ledger


def finding_path(finding: dict[str, Any], workspace: inject_bugs.Workspace) -> str:
    """The finding's path relative to the package folder's parent (`vllm/distributed/...`)."""
    path = Path(str(finding["path"]))
    if not path.is_absolute():
        path = workspace.root / path
    try:
        return path.resolve().relative_to(workspace.root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


@dataclass
class PackageResult:
    name: str
    source: str
    findings: list[tuple[LedgerKey, str]]
    errors: int
    notes: int
    seconds: float


def check_package(
    spec: PackageSpec, scratch: Path, jobs: int, options: tuple[str, ...] = ()
) -> PackageResult:
    package, source = fetch(spec, CACHE)
    workspace = inject_bugs.prepare(spec.name, package, scratch)
    report = inject_bugs.run_collcheck(workspace.target, workspace.root, jobs, no_cache=True, options=options)
    findings = [
        (LedgerKey(spec.name, str(f["code"]), finding_path(f, workspace), int(f["line"])), str(f["message"]))
        for f in report.findings
    ]
    return PackageResult(spec.name, source, findings, len(report.errors), len(report.notes), report.seconds)


def _row(name: str, numbers: tuple[int, ...], tail: str = "") -> str:
    return f"{name:<18} " + " ".join(f"{n:>8}" for n in numbers) + tail


def summarise(results: list[PackageResult], ledger: dict[LedgerKey, Entry]) -> tuple[list[str], int]:
    """The printed table and the number of findings missing from the ledger."""
    header = ("findings", "TRUE", "DEBAT", "FALSE", "new", "errors", "time")
    lines = [f"{'package':<18} " + " ".join(f"{column:>8}" for column in header)]
    totals: Counter[str] = Counter()
    for result in results:
        verdicts = Counter(ledger[key].verdict if key in ledger else "new" for key, _ in result.findings)
        verdicts["findings"] = len(result.findings)
        verdicts["errors"] = result.errors
        totals.update(verdicts)
        lines.append(_row(result.name, _counts(verdicts), f" {result.seconds:>7.1f}s"))
    lines.append(_row("total", _counts(totals)))
    share = totals["FALSE"] / totals["findings"] if totals["findings"] else 0.0
    goal = "met" if share <= FALSE_GOAL and not totals["new"] else "NOT met"
    lines.append(f"FALSE share: {share:.1%} of findings (goal <= {FALSE_GOAL:.0%}: {goal})")
    return lines, totals["new"]


def _counts(counts: Counter[str]) -> tuple[int, ...]:
    return tuple(counts[key] for key in ("findings", "TRUE", "DEBATABLE", "FALSE", "new", "errors"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", default=",".join(spec.name for spec in PACKAGES))
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--ledger", type=Path, default=LEDGER)
    parser.add_argument("--out", type=Path, help="write the findings and verdicts as JSON")
    parser.add_argument("--write-missing", type=Path, help="write unledgered findings as TSV rows")
    parser.add_argument("--extend-select", default="", help="rules to enable beyond the defaults (CC008)")
    args = parser.parse_args(argv)
    options = ("--extend-select", args.extend_select) if args.extend_select else ()
    wanted = [name.strip() for name in args.packages.split(",") if name.strip()]
    specs = {spec.name: spec for spec in PACKAGES}
    unknown = [name for name in wanted if name not in specs]
    if unknown:
        parser.error(f"unknown packages {unknown}; known: {sorted(specs)}")
    ledger = read_ledger(args.ledger)
    results: list[PackageResult] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="collcheck-precision-") as scratch:
        for name in wanted:
            try:
                results.append(check_package(specs[name], Path(scratch), args.jobs, options))
            except Exception as error:  # a package that cannot be fetched is reported, not fatal
                print(f"{name}: skipped: {error}", file=sys.stderr)
    table, missing = summarise(results, ledger)
    print("\n".join(table))
    seen = {key for result in results for key, _ in result.findings}
    new_rows = [(key, message) for result in results for key, message in result.findings if key not in ledger]
    for key, message in new_rows:
        print(f"NOT IN LEDGER: {key.package} {key.code} {key.path}:{key.line}: {message}")
    checked = {result.name for result in results}
    for key in sorted(set(ledger) - seen, key=lambda k: (k.package, k.path, k.line)):
        if key.package in checked:
            print(f"gone: {key.package} {key.code} {key.path}:{key.line} ({ledger[key].verdict})")
    if args.write_missing is not None:
        with args.write_missing.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
            for key, message in new_rows:
                writer.writerow([key.package, key.code, key.path, key.line, "", message])
    if args.out is not None:
        payload = [
            {**vars(key), "message": message, "verdict": ledger[key].verdict if key in ledger else None}
            for result in results
            for key, message in result.findings
        ]
        args.out.write_text(json.dumps(payload, indent=1), encoding="utf-8")
    selected = f", with --extend-select {args.extend_select}" if args.extend_select else ""
    print(f"{len(results)} packages in {time.perf_counter() - started:.0f} s{selected}")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
