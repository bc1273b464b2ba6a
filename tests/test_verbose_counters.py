"""`-v` says how much work the solver stage did: z3 queries asked, and pairs of paths settled in
Python without one. Printed on stderr, so the report itself is the same with and without `-v`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_support import BUG, FIXED, run

COUNTS = re.compile(r"solver: (\d+) z3 queries asked, (\d+) pairs of paths settled without z3")


def _counts(err: str) -> tuple[int, int]:
    match = COUNTS.search(err)
    assert match is not None, err
    return int(match.group(1)), int(match.group(2))


def test_a_rank_dependent_collective_asks_z3(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", str(BUG), "--no-cache", "-j", "1", "-v")
    queries, _ = _counts(err)
    assert code == 1 and queries >= 1
    _, quiet_out, quiet_err = run(capsys, "check", str(BUG), "--no-cache", "-j", "1")
    assert quiet_out == out and COUNTS.search(quiet_err) is None


def test_paths_every_rank_takes_are_settled_without_z3(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    uniform = tmp_path / "uniform.py"
    uniform.write_text(
        "import torch.distributed as dist\n\n\ndef f(x):\n    if x:\n        dist.barrier()\n"
        "    dist.all_reduce(x)\n",
        encoding="utf-8",
    )
    code, _, err = run(capsys, "check", str(uniform), "--no-cache", "-j", "1", "-v")
    assert code == 0 and _counts(err) == (0, 3)  # two paths: (a, a), (a, b), (b, b)


def test_a_memory_only_selection_asks_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    _, _, err = run(capsys, "check", str(BUG), str(FIXED), "--no-cache", "-j", "1", "-v", "--select", "CC101")
    assert _counts(err) == (0, 0)
