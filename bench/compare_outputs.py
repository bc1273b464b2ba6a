"""Byte-for-byte comparison of `collcheck check --format json` before and after a refactor.

    python bench/compare_outputs.py snapshot DIR [--corpus PATH ...] [--jobs N]
    python bench/compare_outputs.py compare DIR [--corpus PATH ...] [--jobs N]

`snapshot` runs the CLI (`python -m collcheck check <paths> --format json --no-cache -j 2`, with
this checkout first on PYTHONPATH) over every fixture unit (a single-file fixture, or a folder
marked by `__fixture__`), over every fixture folder as a whole, and over each real-code corpus
(by default the installed torch's `torch/distributed`, plus any `~/.cache/collcheck-bench/*`
folders), with and without a few `--select` sets, and writes each run's stdout and exit status to
DIR (one file per run). `compare` runs the same list again and reports every run whose stdout or
exit status differs from the stored one; exit status 1 when any differs, 0 when all are equal.

In: fixture and corpus paths. Out: files under DIR (`snapshot`), a diff summary (`compare`).
Not a test: it takes minutes; run it before and after each step of a behaviour-preserving change.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
BENCH_CACHE = Path.home() / ".cache" / "collcheck-bench"
SELECTIONS = ((), ("--select", "CC001"), ("--select", "CC005"), ("--select", "CC101,CC102"))


@dataclass(frozen=True)
class Run:
    """One CLI invocation: a stable name (the snapshot file) and its arguments."""

    name: str
    args: tuple[str, ...]


def _torch_distributed() -> Path | None:
    try:
        import torch
    except ImportError:
        return None
    return Path(torch.__file__).parent / "distributed"


def fixture_units() -> list[Path]:
    """Single-file fixtures and `__fixture__` folders, as tests/test_fixtures.py defines them."""
    marked = sorted(marker.parent for marker in FIXTURES.rglob("__fixture__"))
    files = [
        path
        for path in sorted(FIXTURES.rglob("*.py"))
        if not any(folder in path.parents for folder in marked)
    ]
    return files + marked


def _name(path: Path, extra: tuple[str, ...]) -> str:
    text = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
    base = text.replace("/", "__").strip("_") + ("__" + "_".join(extra).replace(",", "+") if extra else "")
    return base if len(base) < 180 else hashlib.sha1(base.encode()).hexdigest()


def runs(corpora: list[Path]) -> list[Run]:
    result = [Run(_name(unit, ()), (str(unit.relative_to(REPO)),)) for unit in fixture_units()]
    for folder in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        result.append(Run("dir__" + _name(folder, ()), (str(folder.relative_to(REPO)),)))
    for corpus in corpora:
        for extra in SELECTIONS:
            result.append(Run("corpus__" + _name(corpus, extra), (str(corpus), *extra)))
    return result


def execute(run: Run) -> bytes:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [
        sys.executable,
        "-m",
        "collcheck",
        "check",
        *run.args,
        "--format",
        "json",
        "--no-cache",
        "-j",
        "2",
    ]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, timeout=3600, check=False)
    return b"exit %d\n" % done.returncode + done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("snapshot", "compare"))
    parser.add_argument("dir", type=Path)
    parser.add_argument("--corpus", type=Path, action="append", default=None)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="run only names containing this text")
    options = parser.parse_args(argv)
    corpora = options.corpus
    listed = options.dir / "corpora.txt"  # the snapshot's corpora: compare runs exactly those
    if corpora is None and options.mode == "compare" and listed.exists():
        corpora = [Path(line) for line in listed.read_text(encoding="utf-8").splitlines() if line]
    if corpora is None:
        corpora = [p for p in [_torch_distributed()] if p is not None]
        corpora += sorted(p for p in BENCH_CACHE.glob("*") if p.is_dir()) if BENCH_CACHE.is_dir() else []
    todo = [run for run in runs(corpora) if options.only in run.name]
    options.dir.mkdir(parents=True, exist_ok=True)
    if options.mode == "snapshot":
        listed.write_text("".join(f"{corpus}\n" for corpus in corpora), encoding="utf-8")
    with ThreadPoolExecutor(max_workers=options.jobs) as pool:
        outputs = list(pool.map(execute, todo))
    differ = 0
    for run, output in zip(todo, outputs, strict=True):
        stored = options.dir / (run.name + ".out")
        if options.mode == "snapshot":
            stored.write_bytes(output)
            continue
        before = stored.read_bytes() if stored.exists() else b"(missing)\n"
        if before != output and execute(run) == before:
            # A solver timeout under load (a note "solver gave up") can come and go between runs:
            # a run that matches on a second try is reported as such, not as a difference.
            print(f"equal on a second run: {run.name}")
            continue
        if before != output:
            differ += 1
            print(f"DIFFERS: {run.name} ({' '.join(run.args)})")
            lines = difflib.unified_diff(
                before.decode(errors="replace").splitlines(),
                output.decode(errors="replace").splitlines(),
                lineterm="",
            )
            print("\n".join(list(lines)[:40]))
    print(f"{options.mode}: {len(todo)} runs, {differ} differ", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
