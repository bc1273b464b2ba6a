"""`collcheck run` end to end: torchrun workers get the tracer, and the analysis ends the output."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PROGRAMS, base_env, free_port, line_of

RUN_TIMEOUT_S = 90


def _collcheck(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "collcheck", *args],
        cwd=cwd,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


@pytest.mark.multirank
def test_run_torchrun_job_prints_the_first_divergence_with_both_call_sites(tmp_path: Path) -> None:
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        str(PROGRAMS / "swap_diff.py"),
    ]
    done = _collcheck(
        "run", "--verify", "--timeout", "5", "--trace-dir", str(tmp_path / "t"), "--", *torchrun, cwd=tmp_path
    )
    assert done.returncode == 3, done.stderr  # verdict.Status.MISMATCH
    last = done.stderr.rstrip().splitlines()[-1]  # the verdict comes last, after torchrun's output
    assert last.startswith("collcheck: verdict: rank 0 all_reduce(float32[1024]) at ") and last.endswith(
        "[exit status 3: mismatch]"
    )
    tail = done.stderr[done.stderr.index("cross-rank analysis") :]
    assert (
        "all_reduce(float32[1024]) at " in tail
        and f"swap_diff.py:{line_of('swap_diff.py', 'DIFF_0')}" in tail
    )
    assert f"swap_diff.py:{line_of('swap_diff.py', 'DIFF_1')}" in tail
    assert "(group 0, #2)" in tail and "result: ranks diverged" in tail


def _torchrun(program: str, ranks: int = 2) -> list[str]:
    port = str(free_port())
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={ranks}",
        "--master-port",
        port,
        program,
    ]


@pytest.mark.multirank
def test_run_reports_groups_created_in_different_orders_on_4_ranks(tmp_path: Path) -> None:
    started = time.monotonic()
    done = _collcheck(
        "run",
        "--verify",
        "--timeout",
        "10",
        "--trace-dir",
        str(tmp_path / "t"),
        "--",
        *_torchrun(str(PROGRAMS / "groups_mismatch.py"), ranks=4),
        cwd=PROGRAMS,
    )
    assert done.returncode == 3, done.stderr  # verdict.Status.MISMATCH
    assert time.monotonic() - started < 60
    lazy, evens = line_of("groups_mismatch.py", "LAZY"), line_of("groups_mismatch.py", "EVENS")
    last = done.stderr.rstrip().splitlines()[-1]
    assert last.startswith(
        f"collcheck: verdict: rank 0 new_group(ranks=[0, 1]) at groups_mismatch.py:{lazy} vs rank 2 "
        f"new_group(ranks=[0, 2]) at groups_mismatch.py:{evens} (group 0, group creation #1)"
    ), last


@pytest.mark.multirank
@pytest.mark.parametrize("trace_format", ["json", "binary"])  # binary: written live (trace_live.py)
def test_run_says_which_rank_died_and_how_when_one_is_sigkilled(tmp_path: Path, trace_format: str) -> None:
    done = _collcheck(
        "run",
        "--timeout",
        "3",
        "--trace-format",
        trace_format,
        "--trace-dir",
        str(tmp_path / "t"),
        "--",
        *_torchrun(str(PROGRAMS / "sigkill.py")),
        cwd=PROGRAMS,
    )
    assert done.returncode == 5, done.stderr  # verdict.Status.RANK_DIED, not "ranks diverged"
    last = done.stderr.rstrip().splitlines()[-1]
    line = line_of("sigkill.py", "LAST_OF_RANK1")
    assert last.startswith(
        "collcheck: verdict: rank 1 died at #2 (signal 9 SIGKILL): last all_reduce(float32[8]) at "
        f"sigkill.py:{line} (group 0, #2)"
    ), last
    assert last.endswith("[exit status 5: a rank died]")
    assert "rank 0 died" not in last  # torchrun stopped rank 0 afterwards: not the cause


def test_run_does_not_import_torch_into_processes_that_do_not_use_it(tmp_path: Path) -> None:
    check = "import sys, os; assert os.environ['COLLCHECK_TRACE'] == '1'; assert 'torch' not in sys.modules"
    done = _collcheck(
        "run", "--trace-dir", str(tmp_path / "t"), "--", sys.executable, "-c", check, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "no traces" in done.stderr


def test_run_without_a_command_is_a_usage_error(tmp_path: Path) -> None:
    assert _collcheck("run", cwd=tmp_path).returncode == 2


def test_print_env_for_other_launchers(tmp_path: Path) -> None:
    done = _collcheck("run", "--verify", "--print-env", cwd=tmp_path)
    assert "export COLLCHECK_TRACE=1" in done.stdout and "export COLLCHECK_VERIFY=1" in done.stdout
    assert "sitecustomize" not in done.stdout and "/boot${PYTHONPATH:+" in done.stdout


@pytest.mark.parametrize("outer", [None, "/opt/x"])
def test_print_env_adds_no_empty_pythonpath_entry(tmp_path: Path, outer: str | None) -> None:
    """An empty entry (`boot:`) would put the working directory first on sys.path."""
    exports = _collcheck("run", "--print-env", cwd=tmp_path).stdout
    env = {key: value for key, value in base_env().items() if key != "PYTHONPATH"}
    if outer is not None:
        env["PYTHONPATH"] = outer
    shell = subprocess.run(
        ["bash", "-c", exports + '\nprintf %s "$PYTHONPATH"'],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    entries = shell.stdout.split(":")
    assert entries[0].endswith("/boot") and "" not in entries
    assert entries[1:] == ([] if outer is None else [outer])


def test_the_users_sitecustomize_runs_and_stays_importable(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os\nUSER_SETTING = 42\nos.environ['USER_SITE_RAN'] = '1'\n"
    )
    check = "import os, sitecustomize; print(sitecustomize.USER_SETTING, os.environ['USER_SITE_RAN'])"
    env = base_env()
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    command = [sys.executable, "-m", "collcheck", "run", "--trace-dir", str(tmp_path / "t")]
    done = subprocess.run(
        [*command, "--", sys.executable, "-c", check],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["42", "1"]
