"""Recall on blind cases: hangs rebuilt from public reports by writers who never saw collcheck.

    python bench/blind_score.py [--cases bench/blind/cases] [--out results.json] [-v]
                                [--extend-select CC008,...]

Each case is a pair `<id>_bug.py` / `<id>_fixed.py` under `bench/blind/cases/`, listed in
`bench/blind/CASES.tsv` with its report's URL (how the reports were chosen: bench/blind/PROCEDURE.md;
the cases are frozen: never edited after collcheck ran on them, except to fix a syntax error). Each
file is copied alone into a scratch folder and checked there with `collcheck check --format json
--no-cache`, so no case sees another.

A case is
  caught       when the bug file gets at least one finding of a hang rule (CC001-CC009 that the
               default selection reports, and the rules named by `--extend-select`, which is
               handed on to `collcheck check`);
  at the line  when, further, a finding or a site of its counterexample (a collective, a `why`
               condition) stands on a line the writer marked `# DIVERGES`;
  noisy        when its fixed twin gets any hang-rule finding (a false alarm).
The script prints one line per case, then the figures: caught / cases, at the line, noisy fixed
twins, by project and for the Ascend/HCCL cases. It exits 0 whatever the figures are (a bench).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CASES = HERE / "blind" / "cases"
INDEX = HERE / "blind" / "CASES.tsv"
# The hang rules, on by default (CC008 too); a preview rule counts when --extend-select names it.
HANG_RULES = frozenset({*(f"CC00{n}" for n in range(1, 9)), "CC009"})
MARK = "# DIVERGES"
RUN_TIMEOUT_S = 300


@dataclass
class Outcome:
    case: str
    project: str
    ascend: bool
    bug_codes: list[str] = field(default_factory=list)
    fixed_codes: list[str] = field(default_factory=list)
    at_line: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def caught(self) -> bool:
        return bool(self.bug_codes)

    @property
    def noisy(self) -> bool:
        return bool(self.fixed_codes)


def marked_lines(path: Path) -> set[int]:
    text = path.read_text(encoding="utf-8")
    return {number for number, line in enumerate(text.split("\n"), start=1) if MARK in line}


def finding_lines(finding: dict[str, Any]) -> set[int]:
    """The line of a finding and of every site its counterexample names."""
    lines = {int(finding.get("line") or 0)}
    counterexample = finding.get("counterexample") or {}
    for events in (counterexample.get("ranks") or {}).values():
        lines.update(int(event.get("line") or 0) for event in events if isinstance(event, dict))
    whys = counterexample.get("why") or []
    lines.update(int(why.get("line") or 0) for why in whys if isinstance(why, dict))
    return lines


def check_alone(
    source: Path, scratch: Path, extra: frozenset[str] = frozenset()
) -> tuple[list[dict[str, Any]], list[str]]:
    """Hang-rule findings (and those of the `extra` rules) and file errors of one file checked in
    a folder of its own."""
    folder = scratch / source.stem
    folder.mkdir()
    shutil.copyfile(source, folder / source.name)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [sys.executable, "-m", "collcheck", "check", source.name, "--format", "json", "--no-cache"]
    command += ["--extend-select", ",".join(sorted(extra))] if extra else []
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if done.returncode not in (0, 1):
        return [], [f"exit {done.returncode}: {done.stderr.strip()[-300:]}"]
    report = json.loads(done.stdout)
    findings = [f for f in report["findings"] if f["code"] in HANG_RULES | extra]
    return findings, [str(error.get("message", error)) for error in report["errors"]]


def read_index(path: Path) -> dict[str, dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return {row["id"]: row for row in csv.DictReader(handle, delimiter="\t")}


def score(
    cases: Path, index: dict[str, dict[str, str]], verbose: bool, extra: frozenset[str] = frozenset()
) -> list[Outcome]:
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="collcheck-blind-") as scratch_name:
        scratch = Path(scratch_name)
        for case in sorted(index):
            row = index[case]
            bug, fixed = cases / f"{case}_bug.py", cases / f"{case}_fixed.py"
            outcome = Outcome(case, row.get("project", "?"), row.get("ascend", "").strip().lower() == "yes")
            if not bug.exists() or not fixed.exists():
                outcome.errors.append("missing file")
                outcomes.append(outcome)
                continue
            bug_findings, bug_errors = check_alone(bug, scratch, extra)
            fixed_findings, fixed_errors = check_alone(fixed, scratch, extra)
            outcome.bug_codes = sorted(f["code"] for f in bug_findings)
            outcome.fixed_codes = sorted(f["code"] for f in fixed_findings)
            marks = marked_lines(bug)
            outcome.at_line = any(finding_lines(f) & marks for f in bug_findings)
            outcome.errors = bug_errors + fixed_errors
            outcomes.append(outcome)
            verdict = "caught" if outcome.caught else "missed"
            marked = " (at the marked line)" if outcome.at_line else ""
            noisy = f"  FIXED TWIN FLAGGED {outcome.fixed_codes}" if outcome.noisy else ""
            errors = f"  errors: {outcome.errors}" if outcome.errors else ""
            print(f"{case:<48} {verdict}{marked} {outcome.bug_codes}{noisy}{errors}")
            if verbose:
                for finding in bug_findings + fixed_findings:
                    print(f"    {finding['path']}:{finding['line']}: {finding['code']} {finding['message']}")
    return outcomes


def figures(outcomes: list[Outcome]) -> list[str]:
    def ratio(part: int, whole: int) -> str:
        return f"{part}/{whole} ({part / whole:.0%})" if whole else "0/0"

    caught, at_line, total = sum(o.caught for o in outcomes), sum(o.at_line for o in outcomes), len(outcomes)
    lines = [
        f"caught: {ratio(caught, total)}; at the marked line: {ratio(at_line, total)}",
        f"fixed twins flagged: {sum(o.noisy for o in outcomes)} of {len(outcomes)}",
    ]
    ascend = [o for o in outcomes if o.ascend]
    lines.append(f"Ascend/HCCL cases: caught {ratio(sum(o.caught for o in ascend), len(ascend))}")
    by_project: Counter[str] = Counter(o.project for o in outcomes)
    hits: Counter[str] = Counter(o.project for o in outcomes if o.caught)
    lines.append("by project: " + ", ".join(f"{p} {hits[p]}/{n}" for p, n in sorted(by_project.items())))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument("--index", type=Path, default=INDEX)
    parser.add_argument("--out", type=Path)
    parser.add_argument("-v", "--verbose", action="store_true", help="print each finding")
    parser.add_argument("--extend-select", default="", help="more rules that count (CC008,...)")
    args = parser.parse_args(argv)
    extra = frozenset(code.strip().upper() for code in args.extend_select.split(",") if code.strip())
    outcomes = score(args.cases, read_index(args.index), args.verbose, extra)
    print("rules counted: " + ", ".join(sorted(HANG_RULES | extra)))
    print("\n".join(figures(outcomes)))
    if args.out is not None:
        payload = [{**vars(o), "caught": o.caught, "noisy": o.noisy} for o in outcomes]
        args.out.write_text(json.dumps(payload, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
