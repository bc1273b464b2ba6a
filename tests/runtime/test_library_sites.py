"""Every report names a call site: a job whose every frame is an installed library's (a library's
own test script run from site-packages, as accelerate's test suite is) is reported at the innermost
frame outside torch and collcheck, marked library code, by both kernels, never `<no python frame>`."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from conftest import run_job

from collcheck.runtime import hook
from collcheck.runtime.analyze import analyze
from collcheck.runtime.record import CallSite, library_path
from collcheck.runtime.trace_load import load_dir
from collcheck.runtime.trace_render import render_text
from collcheck.runtime.tracer import TraceConfig
from collcheck.runtime.verify import ABORT_EXIT_CODE

INSTALLED = Path(__file__).parent / "installed"
VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"


def _install(tmp_path: Path) -> Path:
    """looplib copied into a site-packages folder, as pip would put it; returns that folder."""
    site_packages = tmp_path / "env" / "lib" / VERSION / "site-packages"
    shutil.copytree(INSTALLED / "looplib", site_packages / "looplib")
    return site_packages


def _line(marker: str) -> int:
    text = (INSTALLED / "looplib" / "loop.py").read_text().splitlines()
    return next(n for n, line in enumerate(text, start=1) if line.rstrip().endswith(f"# {marker}"))


def _run(tmp_path: Path, trace: TraceConfig, mode: str) -> tuple[object, Path]:
    site_packages = _install(tmp_path)
    script = site_packages / "looplib" / "scripts" / "run_loop.py"
    job = run_job(
        str(script),
        tmp_path,
        trace=trace,
        args=(mode,),
        pythonpath=(str(site_packages),),
        extra_env={"PG_TIMEOUT": "20"},
    )
    return job, site_packages


def test_installed_frames_are_library_code_and_collcheck_frames_are_never_a_site(tmp_path: Path) -> None:
    installed = str(tmp_path / "lib" / "site-packages" / "lib" / "m.py")
    assert hook.file_tier(installed) is hook.Tier.PACKAGE
    assert hook.file_tier(str(tmp_path / "train.py")) is hook.Tier.USER
    assert hook.file_tier(hook.__file__) is hook.Tier.NEVER
    assert hook.skipped_file(installed) and not hook.skipped_file(str(tmp_path / "train.py"))
    assert library_path(installed) == "lib/m.py"
    site = CallSite(installed, 12, "step", (f"{installed}:12 in step",), library=True)
    assert site.short == "lib/m.py:12 (library)"
    assert site.to_json()["library"] is True and "library" not in CallSite("t.py", 1).to_json()


@pytest.mark.multirank
def test_a_divergence_inside_an_installed_library_names_both_library_lines(tmp_path: Path) -> None:
    job, _ = _run(tmp_path, TraceConfig(verify=True, timeout_s=3.0), "diverge")
    assert job.returncodes == [ABORT_EXIT_CODE, ABORT_EXIT_CODE], job.stderr  # type: ignore[attr-defined]
    broadcast, barrier = _line("LIB_BROADCAST"), _line("LIB_BARRIER")
    expected = (
        f"rank 0 broadcast(int32[3], root=0) at looplib/loop.py:{broadcast} (library) vs "
        f"rank 1 barrier() at looplib/loop.py:{barrier} (library)"
    )
    assert expected in job.stderr, job.stderr  # type: ignore[attr-defined]
    assert "<no python frame>" not in job.stderr  # type: ignore[attr-defined]


@pytest.mark.multirank
@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_both_kernels_record_the_library_site(tmp_path: Path, native: bool) -> None:
    job, site_packages = _run(tmp_path, TraceConfig(timeout_s=3.0, native=native), "agree")
    assert job.returncodes == [0, 0], job.stderr  # type: ignore[attr-defined]
    analysis = analyze(load_dir(str(job.trace_dir)))  # type: ignore[attr-defined]
    loop = str(site_packages / "looplib" / "loop.py")
    for rank in (0, 1):
        (event,) = [e for e in analysis.events[rank] if e.op == "all_reduce"]
        site = event.site
        assert (site.file, site.line, site.func, site.library) == (
            loop,
            _line("LIB_ALL_REDUCE"),
            "agree",
            True,
        )
        assert site.short == f"looplib/loop.py:{_line('LIB_ALL_REDUCE')} (library)"
        assert site.stack[0].startswith(f"{loop}:") and site.stack[1].endswith(" in <module>")
    assert "<no python frame>" not in render_text(analysis)
