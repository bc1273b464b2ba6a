"""The wheel carries the catalogs: build it, install it into a fresh venv, run it on a fixture."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_ships_rules_and_runs(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr
    wheel = next(wheels.glob("collcheck-*.whl"))
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "collcheck/rules/torch.toml" in names
    assert "collcheck/runtime/native/recorder.cpp" in names  # built on first use in record mode
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True, timeout=600
    )
    assert install.returncode == 0, install.stderr
    fixture = ROOT / "fixtures" / "CC001" / "barrier_rank0_bug.py"
    clean_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run(
        [str(python), "-m", "collcheck", "--no-cache", "--format", "json", str(fixture)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=clean_env,
    )
    assert run.returncode == 1, run.stderr
    assert '"code": "CC001"' in run.stdout
    freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True, timeout=120)
    assert "torch" not in freeze.stdout.lower()  # the static analyzer must not pull torch
    where = subprocess.run(
        [str(python), "-c", "import collcheck.catalog as c; print(c.bundled_catalog_dir())"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=clean_env,
    )
    assert str(env_dir) in where.stdout, where.stdout
