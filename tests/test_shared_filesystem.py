"""`shared-filesystem = true` states that every rank reads one filesystem: filesystem reads are
then no per-process value (CC007); every other per-process source still is. Without it, a
filesystem finding names that assumption and the setting (issue 26: debatable findings a user can
act on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collcheck.api import check_paths
from collcheck.config import ConfigError, load_settings

SOURCE = """import os
import time

import torch.distributed as dist


def resume(path):
    if os.path.exists(path):
        dist.barrier()


def timed(start):
    if time.time() - start > 60:
        dist.barrier()
"""


def _run(tmp_path: Path, table: str) -> list[tuple[str, int, str]]:
    (tmp_path / "pyproject.toml").write_text(f"[tool.collcheck]\ncache = false\n{table}")
    (tmp_path / "train.py").write_text(SOURCE)
    settings = load_settings([tmp_path / "train.py"])
    result = check_paths([tmp_path / "train.py"], settings)
    return [(f.code, f.location.line, f.message) for f in result.findings]


def test_a_filesystem_finding_names_its_assumption_and_the_setting(tmp_path: Path) -> None:
    findings = _run(tmp_path, "")
    assert [(code, line) for code, line, _ in findings] == [("CC007", 8), ("CC007", 13)]
    filesystem, clock = findings[0][2], findings[1][2]
    assert "filesystem state" in filesystem and "`shared-filesystem = true`" in filesystem
    assert "shared-filesystem" not in clock  # only the filesystem rests on that assumption


def test_shared_filesystem_drops_filesystem_reads_only(tmp_path: Path) -> None:
    findings = _run(tmp_path, "shared-filesystem = true\n")
    assert [(code, line) for code, line, _ in findings] == [("CC007", 13)]  # the clock still differs


def test_shared_filesystem_must_be_a_boolean(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.collcheck]\nshared-filesystem = "yes"\n')
    with pytest.raises(ConfigError, match="shared-filesystem"):
        load_settings([tmp_path])
