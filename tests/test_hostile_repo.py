"""A repository being checked is hostile input: its pyproject, its files and anything it commits
must not make collcheck start hundreds of processes, hang on a special file, or read without bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent import futures
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from collcheck import api
from collcheck.api import check_paths, usable_cores, worker_count
from collcheck.config import Settings

REPO = Path(__file__).resolve().parents[1]
BUG = REPO / "fixtures" / "CC001" / "barrier_rank0_bug.py"


# --- jobs ----------------------------------------------------------------------------------------


def test_jobs_are_capped_at_the_usable_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "usable_cores", lambda: 3)
    assert worker_count(400) == 3
    assert worker_count(2) == 2
    assert worker_count(0) == 3


def test_usable_cores_follows_the_affinity_mask() -> None:
    if hasattr(os, "sched_getaffinity"):
        assert usable_cores() == len(os.sched_getaffinity(0))
    assert usable_cores() >= 1


def test_jobs_400_in_pyproject_starts_no_more_workers_than_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for index in range(10):
        (tmp_path / f"bug_{index}.py").write_bytes(BUG.read_bytes())
    started: list[int] = []

    class CountingPool(ProcessPoolExecutor):
        def __init__(self, max_workers: int | None = None, **kwargs: Any) -> None:
            started.append(max_workers or 0)
            super().__init__(max_workers=max_workers, **kwargs)

    # The API imports the pool where it starts one (a warm run never loads multiprocessing).
    monkeypatch.setattr(futures, "ProcessPoolExecutor", CountingPool)
    monkeypatch.setattr(api, "usable_cores", lambda: 2)

    result = check_paths([tmp_path], Settings(jobs=400, cache=False))

    assert started and max(started) <= 2
    assert len(result.findings) == 10


# --- special files: never read, never waited on ----------------------------------------------------

needs_posix = pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="POSIX")


def run_cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """collcheck in a fresh process; a hang is a failure, not a stuck test run."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "collcheck", *argv], capture_output=True, text=True, timeout=90, cwd=cwd
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"collcheck {' '.join(argv)} did not finish in 90 s")


def _json_errors(completed: subprocess.CompletedProcess[str]) -> dict[str, str]:
    data = json.loads(completed.stdout)
    return {Path(error["path"]).name: error["message"] for error in data["errors"]}


def _special(folder: Path, kind: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{kind}.py"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    return path


@needs_posix
@pytest.mark.parametrize("kind", ["fifo", "zero"])
@pytest.mark.parametrize("how", ["walked", "named"])
def test_special_py_file_is_one_error_and_the_rest_is_analysed(tmp_path: Path, kind: str, how: str) -> None:
    src = tmp_path / "src"
    special = _special(src, kind)
    (src / "bug.py").write_bytes(BUG.read_bytes())
    targets = [str(src)] if how == "walked" else [str(special), str(src / "bug.py")]

    completed = run_cli("check", "--no-cache", "--format", "json", "-j", "1", *targets, cwd=tmp_path)

    assert completed.returncode == 1, completed.stderr
    assert "Traceback" not in completed.stderr
    assert list(_json_errors(completed)) == [special.name]
    assert "not a regular file" in _json_errors(completed)[special.name]
    assert [Path(f["path"]).name for f in json.loads(completed.stdout)["findings"]] == ["bug.py"]


@needs_posix
def test_special_file_with_the_cache_on(tmp_path: Path) -> None:
    """The cache reads a file's bytes for its key: that read must not block either."""
    src = tmp_path / "src"
    _special(src, "fifo")
    (src / "bug.py").write_bytes(BUG.read_bytes())

    completed = run_cli("check", "--format", "json", "-j", "1", str(src), cwd=tmp_path)

    assert completed.returncode == 1, completed.stderr
    assert list(_json_errors(completed)) == ["fifo.py"]


@needs_posix
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_special_catalog_is_a_config_error(tmp_path: Path, kind: str) -> None:
    catalog = _special(tmp_path, kind)
    (tmp_path / "pyproject.toml").write_text(f'[tool.collcheck]\ncatalogs = ["{catalog.name}"]\n')
    (tmp_path / "bug.py").write_bytes(BUG.read_bytes())

    completed = run_cli("check", "--no-cache", str(tmp_path / "bug.py"), cwd=tmp_path)

    assert completed.returncode == 2
    assert "not a regular file" in completed.stderr
    assert "Traceback" not in completed.stderr


@needs_posix
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_special_config_file_is_a_config_error(tmp_path: Path, kind: str) -> None:
    config = _special(tmp_path, kind)
    (tmp_path / "bug.py").write_bytes(BUG.read_bytes())

    completed = run_cli(
        "check", "--no-cache", "--config", str(config), str(tmp_path / "bug.py"), cwd=tmp_path
    )

    assert completed.returncode == 2
    assert "not a regular file" in completed.stderr


@needs_posix
def test_special_pyproject_found_by_search_is_passed_over(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").symlink_to("/dev/zero")
    (tmp_path / "bug.py").write_bytes(BUG.read_bytes())

    completed = run_cli("check", "--no-cache", str(tmp_path / "bug.py"), cwd=tmp_path)

    assert completed.returncode == 1, completed.stderr  # the finding, with default settings


@needs_posix
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_special_model_config_is_a_usage_error(tmp_path: Path, kind: str) -> None:
    config = _special(tmp_path, kind)

    completed = run_cli("estimate", "--model", str(config), "--seq-len", "8", cwd=tmp_path)

    assert completed.returncode == 2
    assert "not a regular file" in completed.stderr
    assert "Traceback" not in completed.stderr


@needs_posix
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_special_baseline_is_exit_2(tmp_path: Path, kind: str) -> None:
    baseline = _special(tmp_path, kind)
    (tmp_path / "bug.py").write_bytes(BUG.read_bytes())

    completed = run_cli(
        "check", "--no-cache", "--baseline", str(baseline), str(tmp_path / "bug.py"), cwd=tmp_path
    )

    assert completed.returncode == 2, completed.stderr
    assert "not a regular file" in completed.stderr
    assert "Traceback" not in completed.stderr
