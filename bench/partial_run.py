"""Wall time of `collcheck check ONE_FILE` on a warm cache: pre-commit's call with one staged file.

    python bench/partial_run.py [--project DIR] [--file REL] [--repeat 15] [--flake8 PATH]
                                [--collcheck CHECKOUT] [--json out.json]

Builds a sample project in a temp dir: a copy of collcheck's `fixtures/` (or of `--project DIR`),
a `pyproject.toml` with `[tool.collcheck] cache-dir`, `git init` (so the run asks git what it
ignores, as in a real repository) and a small package `pkg/` whose `train.py` calls a helper of
`pkg/comm.py` and reads rank constants of `pkg/env.py` (found only through the cross-file index).
The file checked is `pkg/train.py` (findings) and `pkg/comm.py` (clean), or `--file`. The code
timed is this checkout's (`--collcheck`: another one, e.g. main's for a before/after).

One run warms the cache; then, `--repeat` times each, round-robin:
  * `python -c pass` (interpreter start, with site);
  * `python -m collcheck check FILE` and the `collcheck` console script beside this interpreter
    (end to end, subprocess wall time, output to a pipe);
  * flake8 on the same file, when found (on PATH, beside this interpreter, or `--flake8`);
and one in-process breakdown per repeat (a child process that times the phases by wrapping the
API's functions): CLI import (everything a plain check imports), settings, catalog, walk of the
project (`_index_files`), index load (`_project`), the rest of the run (manifest, cache lookups,
analysis of misses), output (`render`). It also lists the heavy modules the run imported (typer,
pydantic, rich, z3, libcst, the static engine): a warm plain check should import none of them.

Prints medians of wall time and of CPU time (user + sys of the child: less sensitive than wall
time to other work on a shared machine); the goal (issue 12): one staged file on a warm cache
<= 0.15 s wall end to end.
Not a test: exit status 0 even when the goal is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GOAL_S = 0.15
HEAVY = (
    "typer",
    "click",
    "pydantic",
    "rich",
    "z3",
    "libcst",
    "collcheck.static.engine",
    "collcheck.commands",
)

ENV = "import os\nRANK = int(os.environ['RANK'])\nIS_MAIN = RANK == 0\n"
COMM = "import torch.distributed as dist\n\n\ndef sync(t):\n    dist.all_reduce(t)\n"
TRAIN = (
    "import torch.distributed as dist\n\n"
    "from . import env\n"
    "from .comm import sync\n"
    "from .env import IS_MAIN, RANK\n\n\n"
    "def first(t):\n    if RANK == 0:\n        dist.barrier()\n\n\n"
    "def second(t):\n    if IS_MAIN:\n        sync(t)\n\n\n"
    "def third(t):\n    sync(t)\n    if env.RANK == 0:\n        print(t)\n"
)

# Run in a child process: times the phases of one plain `collcheck check FILE` by wrapping the
# functions the run calls through module attributes. Prints one JSON object.
BREAKDOWN = r"""
import io, json, sys, time
start = time.perf_counter()
import collcheck.cli
import collcheck.api, collcheck.config, collcheck.catalog, collcheck.report
import collcheck.report.text
try:
    import collcheck.checking
except ImportError:  # a checkout from before the plain-check path
    pass
imported = time.perf_counter()
spent = {}
def wrap(module, name, label):
    inner = getattr(module, name, None)
    if inner is None:
        return
    def timed(*args, **kwargs):
        began = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + time.perf_counter() - began
    setattr(module, name, timed)
wrap(collcheck.config, "load_settings", "settings")
wrap(collcheck.api, "load_catalog", "catalog")
wrap(collcheck.api, "catalog_fingerprint", "catalog")
wrap(collcheck.api, "settings_catalog", "catalog")  # the names since summaries of installed packages
wrap(collcheck.api, "settings_catalog_fingerprint", "catalog")
wrap(collcheck.api, "_index_files", "project walk")
wrap(collcheck.api, "_project", "index load")
wrap(collcheck.api, "check_paths", "run")
wrap(collcheck.report, "render", "output")
sys.stdout = io.StringIO()
began = time.perf_counter()
code = collcheck.cli.main(["check", sys.argv[1]])
ended = time.perf_counter()
sys.stdout = sys.__stdout__
spent["run"] -= sum(spent.get(k, 0.0) for k in ("catalog", "project walk", "index load"))
heavy = sorted({m.split(".")[0] if not m.startswith("collcheck") else m for m in sys.modules
               if any(m == h or m.startswith(h + ".") for h in sys.argv[2].split(","))})
print(json.dumps({"cli import": imported - start, **spent, "total in-process": ended - began,
                  "exit": code, "heavy": heavy}))
"""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def make_project(work: Path, source: Path | None) -> Path:
    """The sample project (see the module docstring); returns its root."""
    root = work / "project"
    if source is None:
        shutil.copytree(REPO / "fixtures", root / "fixtures", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        shutil.copytree(source, root / source.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    package = root / "pkg"
    package.mkdir(parents=True)
    for name, text in {"__init__.py": "", "env.py": ENV, "comm.py": COMM, "train.py": TRAIN}.items():
        (package / name).write_text(text, encoding="utf-8")
    (root / "pyproject.toml").write_text(
        '[project]\nname = "sample"\n\n[tool.collcheck]\ncache-dir = ".collcheck_cache"\n', encoding="utf-8"
    )
    (root / ".gitignore").write_text(".collcheck_cache/\n", encoding="utf-8")
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q"], cwd=root, check=False, capture_output=True)
    return root


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wall(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int, float]:
    """Wall seconds, exit status and CPU seconds (user + sys) of one run of `command`."""
    cpu = children_cpu()
    began = time.perf_counter()
    completed = subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=600)
    return time.perf_counter() - began, completed.returncode, children_cpu() - cpu


def console_script() -> str | None:
    beside = Path(sys.executable).parent / "collcheck"
    return str(beside) if beside.exists() else shutil.which("collcheck")


def flake8_command(explicit: str | None) -> list[str] | None:
    if explicit:
        return [explicit]
    beside = Path(sys.executable).parent / "flake8"
    found = str(beside) if beside.exists() else shutil.which("flake8")
    return [found] if found else None


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def measure(
    root: Path, target: str, repeat: int, flake8: list[str] | None, env: dict[str, str]
) -> dict[str, Any]:
    python = sys.executable
    commands = {
        "python -c pass": [python, "-c", "pass"],
        "python -m collcheck check": [python, "-m", "collcheck", "check", target],
    }
    script = console_script()
    if script:
        commands["collcheck check (console script)"] = [script, "check", target]
    if flake8:
        commands["flake8"] = [*flake8, target]
    first, code, _ = wall(commands["python -m collcheck check"], root, env)  # warms the cache
    log(f"  cold run of {target}: {first:.2f} s (exit {code})")
    times: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    phases: list[dict[str, Any]] = []
    for _ in range(repeat):
        for name, command in commands.items():
            seconds, _, cpu = wall(command, root, env)
            times[name].append(seconds)
            cpus[name].append(cpu)
        out = subprocess.run(
            [python, "-c", BREAKDOWN, target, ",".join(HEAVY)],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
        )
        if out.returncode == 0:
            phases.append(json.loads(out.stdout))
        else:
            log(out.stderr[-2000:])
    labels = [k for k in (phases[0] if phases else {}) if k not in ("exit", "heavy")]
    breakdown = {label: median([p.get(label, 0.0) for p in phases]) for label in labels}
    return {
        "file": target,
        "exit": code,
        "wall": {name: median(values) for name, values in times.items()},
        "cpu": {name: median(values) for name, values in cpus.items()},
        "breakdown": breakdown,
        "heavy modules imported": phases[-1]["heavy"] if phases else None,
    }


def report(result: dict[str, Any]) -> None:
    print(f"\n{result['file']} (warm cache, exit {result['exit']}): median wall, median CPU (user+sys)")
    for name, seconds in result["wall"].items():
        print(f"  {name:<36} {seconds * 1000:7.1f} ms  {result['cpu'][name] * 1000:7.1f} ms CPU")
    print("  breakdown (in-process, median):")
    for name, seconds in result["breakdown"].items():
        print(f"    {name:<34} {seconds * 1000:7.1f} ms")
    print(f"  heavy modules imported: {', '.join(result['heavy modules imported'] or []) or 'none'}")
    end_to_end = result["wall"].get(
        "collcheck check (console script)", result["wall"]["python -m collcheck check"]
    )
    verdict = "met" if end_to_end <= GOAL_S else "missed"
    print(f"  goal <= {GOAL_S:.2f} s end to end: {verdict} ({end_to_end:.3f} s)")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--project", type=Path, help="copy this folder instead of fixtures/")
    parser.add_argument("--file", action="append", help="file to check, relative to the project root")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--flake8", help="flake8 executable to compare with")
    parser.add_argument("--collcheck", type=Path, default=REPO, help="checkout whose code is timed")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(args.collcheck.resolve())}
    flake8 = flake8_command(args.flake8)
    with tempfile.TemporaryDirectory(prefix="collcheck-partial-") as temp:
        root = make_project(Path(temp), args.project)
        files = sum(1 for _ in root.rglob("*.py"))
        log(f"sample project: {files} Python files under {root}; load average {load_average():.2f}")
        targets = args.file or ["pkg/train.py", "pkg/comm.py"]
        results = [measure(root, target, args.repeat, flake8, env) for target in targets]
    print(f"load average after the run: {load_average():.2f}")
    for result in results:
        report(result)
    if flake8 is None:
        print("\nflake8: not found (pass --flake8 PATH to compare)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
