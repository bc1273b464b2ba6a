"""`.pre-commit-hooks.yaml`: valid for pre-commit, and the hook installs and runs offline.

The end-to-end test snapshots this checkout (tracked and untracked, non-ignored files) into a
throwaway git repository, commits it there (pre-commit installs hooks from a revision; `try-repo`
would only carry tracked changes and keeps its environment in a temporary store), and runs
`pre-commit run --all-files` in a small project whose `.pre-commit-config.yaml` points at that
snapshot, exactly as the user snippet in docs/integration.md does with the GitHub URL. Results
come from a pre-filled cache, so the test does not need the static engine; it also shows that the
installed hook environment has z3-solver but no torch, and that the cache folder ignores itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from collcheck import cache
from collcheck.catalog import load_catalog
from collcheck.config import Settings, load_settings
from collcheck.findings import FileResult, Finding, Location, Severity

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / ".pre-commit-hooks.yaml"
PRE_COMMIT = Path(sys.executable).with_name("pre-commit")


def hook(hook_id: str = "collcheck") -> dict[str, object]:
    hooks = yaml.safe_load(MANIFEST.read_text())
    assert isinstance(hooks, list) and [item["id"] for item in hooks] == ["collcheck", "collcheck-fix"]
    entry: dict[str, object] = next(item for item in hooks if item["id"] == hook_id)
    return entry


def test_manifest_passes_pre_commits_own_schema() -> None:
    clientlib = pytest.importorskip("pre_commit.clientlib")
    loaded = clientlib.load_manifest(str(MANIFEST))  # raises InvalidManifestError when malformed
    assert [item["id"] for item in loaded] == ["collcheck", "collcheck-fix"]


def test_manifest_fields() -> None:
    item = hook()
    assert item["id"] == "collcheck"
    assert item["name"]
    assert item["language"] == "python"
    assert item["types"] == ["python"]
    assert item["pass_filenames"] is True
    assert item["require_serial"] is True  # one run sees every staged file: cross-file helpers are followed
    entry = str(item["entry"]).split()
    assert entry[0] == "collcheck"
    assert entry[1:] in ([], ["check"])
    assert "additional_dependencies" not in item  # only the package's core deps: no torch


def test_fix_hook_variant() -> None:
    item = hook("collcheck-fix")
    assert str(item["entry"]).split() == ["collcheck", "check", "--fix"]
    assert item["additional_dependencies"] == ["libcst>=1.1"]  # the fixes rewrite code with libcst
    assert {key: item[key] for key in ("language", "types", "pass_filenames", "require_serial")} == {
        key: hook()[key] for key in ("language", "types", "pass_filenames", "require_serial")
    }


def test_entry_point_and_sdist_match_the_manifest() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'collcheck = "collcheck.cli:run_main"' in pyproject
    assert ".pre-commit-hooks.yaml" in pyproject  # shipped in the sdist
    dependencies = pyproject.split("dependencies = [", 1)[1].split("]", 1)[0]
    assert "torch" not in dependencies


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=collcheck-test", "-c", "user.email=test@invalid", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        timeout=120,
    )


def _snapshot(target: Path) -> str:
    """This checkout as a committed repository, without touching the checkout's own git state."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=120,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    _git(target, "init", "-q", ".")
    _git(target, "add", "-A")
    _git(target, "commit", "-q", "--no-verify", "-m", "snapshot")
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=target, check=True, capture_output=True, text=True, timeout=60
    ).stdout.strip()


FLAGGED = "import torch.distributed as dist\n\ndef f(rank):\n    if rank == 0:\n        dist.barrier()\n"
CLEAN = "def g():\n    return 1\n"


def _prefill(project: Path, monkeypatch: pytest.MonkeyPatch) -> Finding:
    """Store what the engine would say, under the key the hook will compute in `project`."""
    monkeypatch.chdir(project)
    settings, fingerprint = load_settings([project]), load_catalog().fingerprint  # as the CLI does
    finding = Finding(
        code="CC001",
        severity=Severity.ERROR,
        location=Location("flagged.py", 5, 8, 5, 22),
        message_template="collective sequence differs between ranks {a} and {b}",
        message_args=(("a", "0"), ("b", "1")),
    )
    for name, findings in (("flagged.py", [finding]), ("clean.py", [])):
        cache.store(
            cache.cache_folder(settings),
            _key(project / name, name, settings, fingerprint),
            FileResult(name, findings),
        )
    return finding


def _key(path: Path, name: str, settings: Settings, fingerprint: str) -> str:
    return cache.cache_key(path.read_bytes(), name, settings, fingerprint)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None or not PRE_COMMIT.exists(), reason="needs git and pre-commit")
def test_hook_installs_and_runs_from_a_local_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = tmp_path / "snapshot"
    revision = _snapshot(snapshot)
    project = tmp_path / "project"
    project.mkdir()
    (project / "flagged.py").write_text(FLAGGED)
    (project / "clean.py").write_text(CLEAN)
    (project / "notes.txt").write_text("not python: the hook must not see it\n")
    # The rule modules may not be registered yet: select CC001 explicitly so it is reported.
    (project / "pyproject.toml").write_text('[tool.collcheck]\nselect = ["CC"]\n')
    config = {"repos": [{"repo": str(snapshot), "rev": revision, "hooks": [{"id": "collcheck"}]}]}
    (project / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    _git(project, "init", "-q", ".")
    _git(project, "add", "-A")
    finding = _prefill(project, monkeypatch)

    home = tmp_path / "pre-commit-home"
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "PRE_COMMIT_COLOR": "never"}
    completed = subprocess.run(
        [str(PRE_COMMIT), "run", "--all-files", "--verbose"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = completed.stdout + completed.stderr
    if "No matching distribution" in output or "Could not find a version" in output:
        pytest.skip("the hook environment could not be installed offline (no local wheels)")
    loc = finding.location
    assert f"{loc.path}:{loc.line}:{loc.column + 1}: {finding.code}" in output
    assert "clean.py:" not in output and "notes.txt" not in output
    assert "Traceback" not in output

    status = subprocess.run(["git", "status", "--porcelain"], cwd=project, capture_output=True, text=True)
    assert ".collcheck_cache" not in status.stdout  # the cache folder ignores itself

    pythons = sorted(home.glob("*/py_env-*/bin/python"))
    assert pythons, "pre-commit did not create a python hook environment"
    probe = "import importlib.util as u; print(u.find_spec('torch') is None, u.find_spec('z3') is not None)"
    found = subprocess.run([str(pythons[0]), "-c", probe], capture_output=True, text=True, timeout=120)
    assert found.stdout.split() == ["True", "True"], found.stderr

    assert completed.returncode == 1, output  # findings fail the hook
