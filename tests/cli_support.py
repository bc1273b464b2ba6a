"""What the CLI and configuration tests share: fixture paths and running `main(argv)` in-process."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from collcheck.api import check_paths
from collcheck.cli import main
from collcheck.config import load_settings
from collcheck.findings import RunResult

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
BUG = FIXTURES / "CC001" / "barrier_rank0_bug.py"  # CC001 at line 11, column 9 (1-based)
FIXED = FIXTURES / "CC001" / "barrier_rank0_fixed.py"
LOOP_BUG = FIXTURES / "CC002" / "range_rank_bug.py"  # CC002 at line 9

# rank 2 exists only from world size 3 on
RANK2 = (
    "import torch.distributed as dist\n\n\ndef f():\n    if dist.get_rank() == 2:\n        dist.barrier()\n"
)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(
    capsys: pytest.CaptureFixture[str], *argv: str, command: tuple[str, ...] = ()
) -> tuple[int, dict[str, Any]]:
    """JSON report of a run; `command` goes first (`("check",)`), or none: the default command."""
    code, out, err = run(capsys, *command, "--no-cache", "--format", "json", *argv)
    assert code in (0, 1), err
    return code, json.loads(out)


def located(data: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(Path(f["path"]).name, f["code"], f["line"]) for f in data["findings"]]


@functools.cache
def fixture_run(unit: Path) -> RunResult:
    """One fixture unit (a file, or a `__fixture__` folder) checked on its own: one job, no cache,
    no project context. Run once per session: the fixture markers (test_fixtures.py) and the
    message snapshots (test_message_snapshots.py) are both read from it. Read it, never change it."""
    settings = load_settings([unit]).with_overrides(jobs=1, cache=False, project_context=False)
    return check_paths([unit], settings)
