"""The collcheck checkout bench/static_speed.py measures: its state for the report, its bytecode.

In: the collcheck executable (for `compile_collcheck`). Out: a line saying what was done or what
the checkout is (HEAD and its uncommitted changes under collcheck/ and rules/), for the log
and the report. Read-only git commands only.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def compile_collcheck(executable: str) -> str:
    """Write the bytecode of the collcheck package the executable runs, as `pip install` does for
    an installed package. A checkout run with PYTHONDONTWRITEBYTECODE set (as on the project's
    shared machines) otherwise compiles every module from source in every run (about 0.15 s of
    a cold run's serial start, none of it the analysis). Returns what was done, for the log."""
    try:
        first = Path(executable).read_text(encoding="utf-8", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return "collcheck's bytecode not compiled (its executable is unreadable)"
    python = (
        shlex.split(first[2:]) if first.startswith("#!") else [sys.executable]
    )  # `#!/usr/bin/env python3`
    locate = [*python, "-c", "import collcheck, os; print(os.path.dirname(collcheck.__file__))"]
    try:
        found = subprocess.run(locate, capture_output=True, text=True, timeout=60)
        if found.returncode != 0 or not found.stdout.strip():
            return "collcheck's bytecode not compiled (its package was not found)"
        package = found.stdout.strip()
        done = subprocess.run([*python, "-m", "compileall", "-q", package], capture_output=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"collcheck's bytecode not compiled ({error})"
    outcome = "compiled" if done.returncode == 0 else f"compileall exited {done.returncode} for"
    return f"{outcome} the bytecode of {package} (as pip install does)"


def source_state() -> str:
    """HEAD and the modified files of the collcheck checkout (read-only git commands)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "collcheck", "catalogs"],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
    except OSError:
        return "unknown (no git)"
    changed = len(dirty.stdout.splitlines())
    return f"{head.stdout.strip() or '?'}" + (
        f" + {changed} uncommitted changes under collcheck/ rules/" if changed else ""
    )
