"""An interrupted native build is neither a hang nor a failure (issue 27, item 8): what it left
is cleaned up under collcheck's lock, an interrupted build is retried by the next run, and
`collcheck run` never waits for a compiler."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import base_env

from collcheck.runtime import native_recorder as native


def _fake_build(seen: list[bool], returncode: int, output: str = "") -> object:
    def run_build(name: str, directory: Path, lock: int) -> subprocess.CompletedProcess[str]:
        seen.append((directory / "staging" / native.TORCH_BATON).exists())
        return subprocess.CompletedProcess(["compile"], returncode, output, "")

    return run_build


@pytest.fixture
def build_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(native.ENV_NATIVE_DIR, str(tmp_path / "cache"))
    directory = tmp_path / "cache" / "rec"
    (directory / "staging").mkdir(parents=True)
    return directory


def test_a_stale_torch_lock_is_removed_before_building(
    build_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (build_dir / "staging" / native.TORCH_BATON).write_text("")  # left by a build killed mid-way
    seen: list[bool] = []
    monkeypatch.setattr(native, "_run_build", _fake_build(seen, 1, "g++: error"))
    assert native._build_and_import("rec", build_dir, quiet=True) is None
    assert seen == [False]  # torch's compile would have waited on it forever


@pytest.mark.parametrize(
    ("returncode", "output"),
    [
        (-2, ""),
        (-15, ""),
        (130, ""),
        (1, "ninja: build stopped: interrupted by user.\n"),
        (1, "KeyboardInterrupt\n"),
    ],
)
def test_an_interrupted_build_is_not_remembered_as_failed(
    build_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    returncode: int,
    output: str,
) -> None:
    monkeypatch.setattr(native, "_run_build", _fake_build([], returncode, output))
    assert native._build_and_import("rec", build_dir, quiet=True) is None
    assert not (build_dir / native.FAILED_MARKER).exists()
    assert "interrupted; the next run builds it again" in capsys.readouterr().err


def test_a_real_failure_is_still_remembered(build_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "_run_build", _fake_build([], 1, "g++: not found\n"))
    assert native._build_and_import("rec", build_dir, quiet=True) is None
    assert "g++: not found" in (build_dir / native.FAILED_MARKER).read_text()


def test_the_compiler_process_holds_the_lock_too(build_dir: Path) -> None:
    """The lock is passed to the compile subprocess: a builder killed while its compiler runs does
    not let a second builder clear the staging folder under a live compile."""
    with native._exclusive(build_dir / "collcheck.lock") as lock:
        probe = (
            "import fcntl, os, sys\n"
            "fd = int(sys.argv[1])\n"
            "os.set_inheritable(fd, True)\n"
            "print(os.fstat(fd).st_ino)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", probe, str(lock)],
            pass_fds=(lock,),
            capture_output=True,
            text=True,
            check=True,
        )
        assert int(done.stdout) == os.fstat(lock).st_ino


def test_collcheck_run_does_not_wait_for_a_compiler(tmp_path: Path) -> None:
    """A first `collcheck run` on a machine started the job only after building (30-60 s, or until
    the build's 15-minute timeout behind a stale lock); now the job starts at once."""
    tools = tmp_path / "slow-tools"
    tools.mkdir()
    for tool in ("ninja", "c++", "g++"):
        script = tools / tool
        script.write_text("#!/bin/sh\nsleep 120\n")
        script.chmod(0o755)
    env = base_env()
    env[native.ENV_NATIVE_DIR] = str(tmp_path / "native")
    env["PATH"] = f"{tools}{os.pathsep}{env.get('PATH', '')}"
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "collcheck",
            "run",
            "--trace-dir",
            str(tmp_path / "t"),
            "--",
            sys.executable,
            "-c",
            "print('ran')",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert "ran" in done.stdout, done.stderr[-2000:]
    assert time.monotonic() - started < 60


def test_a_build_is_named_after_the_header_it_includes_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # recorder.cpp includes binary_trace.h: a changed encoder must never load a stale build.
    header = tmp_path / "binary_trace.h"
    header.write_text("// one encoder\n")
    monkeypatch.setattr(native, "HEADERS", (header,))
    first = native.module_name()
    header.write_text("// another encoder\n")
    assert native.module_name() != first
    assert native.HEADERS[0].name in native.SOURCE.read_text()
