"""Where traces and reports are written: no links followed, no other user's shared folder, private
modes, and a trace folder that cannot be written stops `collcheck run` before the job starts."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, base_env
from test_analyze import _event, _write

from collcheck.cli import main
from collcheck.runtime.record import FILE_MODE, TraceWriter, UnsafeLocation, check_folder, trace_file_name

OTHER_UID = 54321


def _collcheck(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "collcheck", *args],
        cwd=cwd,
        env=env or base_env(),
        capture_output=True,
        text=True,
        timeout=90,
    )


@pytest.fixture
def shared_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder like /tmp's subfolders of other users: mode 0777, owned by someone else."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give a folder to another user")
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chown(folder, OTHER_UID, OTHER_UID)
    folder.chmod(0o777)
    yield folder


def test_a_trace_file_planted_as_a_link_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    traces = tmp_path / "t"
    traces.mkdir()
    (traces / trace_file_name(0)).symlink_to(victim)
    with pytest.raises(UnsafeLocation, match="symbolic link"):
        TraceWriter(str(traces / trace_file_name(0)))
    assert victim.read_text() == "precious\n"


def test_a_fifo_in_place_of_a_trace_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / trace_file_name(0))
    with pytest.raises(UnsafeLocation, match="not a regular file"):
        TraceWriter(str(tmp_path / trace_file_name(0)))


def test_traces_are_created_private(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        TraceWriter(str(tmp_path / "new" / trace_file_name(0))).close()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new" / trace_file_name(0)).stat().st_mode) == FILE_MODE
    assert not stat.S_IMODE((tmp_path / "new").stat().st_mode) & stat.S_IWOTH


def test_another_users_world_writable_folder_is_refused_unless_allowed(shared_dir: Path) -> None:
    with pytest.raises(UnsafeLocation, match="owned by uid 54321"):
        check_folder(str(shared_dir), allow_shared=False)
    with pytest.raises(UnsafeLocation):
        TraceWriter(str(shared_dir / trace_file_name(0)))
    TraceWriter(str(shared_dir / trace_file_name(0)), allow_shared=True).close()


def test_run_refuses_a_shared_trace_folder_before_starting_the_job(tmp_path: Path, shared_dir: Path) -> None:
    marker = tmp_path / "started"
    command = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    done = _collcheck("run", "--trace-dir", str(shared_dir), *command, cwd=tmp_path)
    assert done.returncode == 2 and not marker.exists()
    assert "writable by every user" in done.stderr and "Traceback" not in done.stderr
    env = base_env()
    env["COLLCHECK_ALLOW_SHARED_DIR"] = "1"
    assert _collcheck("run", "--trace-dir", str(shared_dir), *command, cwd=tmp_path, env=env).returncode == 0
    assert marker.exists()


def test_trace_output_is_never_written_through_a_link(tmp_path: Path, shared_dir: Path) -> None:
    for rank in (0, 1):
        _write(tmp_path, rank, [_event(rank, 1, 4, 10)])
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "trace.perfetto.json").symlink_to(victim)
    assert main(["trace", str(tmp_path), "--format", "perfetto"]) == 2
    assert (
        main(["trace", str(tmp_path), "--format", "json", "-o", str(tmp_path / "trace.perfetto.json")]) == 2
    )
    assert victim.read_text() == "precious\n"
    assert main(["trace", str(tmp_path), "-o", str(shared_dir / "report.txt")]) == 2
    assert main(["trace", str(tmp_path), "-o", str(shared_dir / "r.txt"), "--allow-shared-trace-dir"]) == 0


def test_run_refuses_a_trace_folder_it_cannot_create(tmp_path: Path) -> None:
    """A path under a regular file fails for root too (chmod does not stop root)."""
    (tmp_path / "file").write_text("")
    marker = tmp_path / "started"
    command = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    trace_dir = str(tmp_path / "file" / "t")
    done = _collcheck("run", "--trace-dir", trace_dir, *command, cwd=tmp_path)
    assert done.returncode == 2 and not marker.exists()
    assert f"cannot write traces to {trace_dir}" in done.stderr and "Traceback" not in done.stderr
    done = _collcheck("run", "--allow-untraced", "--trace-dir", trace_dir, *command, cwd=tmp_path)
    assert done.returncode == 0 and marker.exists()
    assert "running the job UNTRACED" in done.stderr


def test_run_on_a_read_only_folder_with_old_traces_is_a_clear_error(tmp_path: Path) -> None:
    """A read-only bind mount in a private mount namespace (`unshare -rm`): root cannot write it."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) not installed")
    traces = tmp_path / "t"
    for rank in (0, 1):
        _write(traces, rank, [_event(rank, 1, 4, 10)])
    marker = tmp_path / "started"
    run = [sys.executable, "-m", "collcheck", "run", "--trace-dir", str(traces), "--", sys.executable, "-c"]
    run.append(f"open({str(marker)!r}, 'w').close()")
    script = f'mount --bind -o ro "{traces}" "{traces}" && exec "$@"'
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", *run],
        cwd=REPO,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=90,
    )
    if "mount" in done.stderr and "collcheck" not in done.stderr:
        pytest.skip(f"no read-only bind mount here: {done.stderr.strip()}")
    assert done.returncode == 2 and not marker.exists(), done.stderr
    assert "Read-only file system" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in traces.iterdir()) == [trace_file_name(0), trace_file_name(1)]
