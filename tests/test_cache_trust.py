"""The cache belongs to the user, not to the repository being checked: a committed or copied cache
is never believed, a pyproject cannot move the cache outside the project or the user's cache
folder, and no symbolic link can lead collcheck's writes elsewhere."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from collcheck import cache, cache_guard
from collcheck.config import ConfigError, Settings, settings_from_table
from collcheck.findings import FileResult

REPO = Path(__file__).resolve().parents[1]
BUG = REPO / "fixtures" / "CC001" / "barrier_rank0_bug.py"


@pytest.fixture(autouse=True)
def user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test runs as a user whose cache folder is a fresh temporary one."""
    home = tmp_path / "user-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home / "collcheck"


def _project(folder: Path, table: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(f"[tool.collcheck]\n{table}\n")
    (folder / "bug.py").write_bytes(BUG.read_bytes())
    return folder


def _check(project: Path, xdg: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(xdg)}
    completed = subprocess.run(
        [sys.executable, "-m", "collcheck", "check", "--format", "json", "-j", "1", *extra, str(project)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=project,
        env=env,
    )
    data = json.loads(completed.stdout) if completed.stdout.strip().startswith("{") else {}
    return completed.returncode, data, completed.stderr


def _reseal_without_findings(folder: Path, secret: bytes) -> int:
    """What an attacker does to their own cache before committing it: drop every finding and seal
    the entries again with their own secret. Returns how many entries were changed."""
    changed = 0
    for entry in folder.rglob("*.json"):
        raw = entry.read_bytes()
        data = json.loads(raw[65:])
        if "variants" in data:  # an answer entry: up to four answers, one per state of the files read
            results = list(data["variants"])
        else:
            results = [data["result"]] if "result" in data else [item[1] for item in data.values()]
        for result in results:
            if isinstance(result, dict) and result.get("findings"):
                result["findings"] = []
                changed += 1
        payload = json.dumps(data).encode()
        name = entry.relative_to(folder).as_posix()
        entry.write_bytes(cache_guard._mac(secret, name, payload) + b"\n" + payload)
    return changed


def test_a_committed_poisoned_cache_does_not_silence_findings(tmp_path: Path) -> None:
    project = _project(tmp_path / "repo")
    attacker, victim = tmp_path / "attacker", tmp_path / "victim"
    code, data, _ = _check(project, attacker)
    assert code == 1 and len(data["findings"]) == 1
    secret = (attacker / "collcheck" / cache_guard.SECRET_NAME).read_bytes().strip()
    assert _reseal_without_findings(project / ".collcheck_cache", secret) > 0
    (project / "bug.py").touch()  # a clone has fresh modification times
    # The poison is real: it fools the run whose secret sealed it ...
    assert _check(project, attacker)[1]["findings"] == []

    # ... and nobody else.
    code, data, stderr = _check(project, victim)

    assert code == 1, stderr
    assert [f["code"] for f in data["findings"]] == ["CC001"]


def test_a_cache_copied_from_another_user_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "train.py"
    source.write_bytes(BUG.read_bytes())
    settings = Settings(cache_dir=str(tmp_path / "cache"))
    calls: list[int] = []

    def compute() -> FileResult:
        calls.append(1)
        return FileResult(str(source))

    cache.cached_analyze(str(source), settings, "cat", compute)
    cache.cached_analyze(str(source), settings, "cat", compute)
    assert len(calls) == 1
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "someone-else"))

    cache.cached_analyze(str(source), settings, "cat", compute)

    assert len(calls) == 2


def test_the_secret_is_private_to_the_user(tmp_path: Path, user_cache: Path) -> None:
    secret = cache_guard.user_secret()
    path = user_cache / cache_guard.SECRET_NAME
    assert secret is not None and path.read_bytes().strip() == secret
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert cache_guard.user_secret() == secret  # made once


def test_a_symlinked_secret_is_not_used(tmp_path: Path, user_cache: Path) -> None:
    planted = tmp_path / "planted.key"
    planted.write_text("0" * 64 + "\n")
    user_cache.mkdir(parents=True)
    (user_cache / cache_guard.SECRET_NAME).symlink_to(planted)

    assert cache_guard.user_secret() is None


# --- where the cache may be ----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["../elsewhere", "sub/../../elsewhere", "/tmp/collcheck-elsewhere"])
def test_cache_dir_outside_the_project_is_a_config_error(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match="cache-dir"):
        settings_from_table({"cache-dir": value}, tmp_path / "repo")


def test_cache_dir_outside_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    project = _project(tmp_path / "repo", 'cache-dir = "../elsewhere"')

    code, _, stderr = _check(project, tmp_path / "xdg")

    assert code == 2
    assert "cache-dir" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "elsewhere").exists()


def test_cache_dir_inside_the_project_or_the_user_cache_is_accepted(tmp_path: Path, user_cache: Path) -> None:
    root = tmp_path / "repo"
    assert settings_from_table({"cache-dir": "build/cc"}, root).cache_dir == "build/cc"
    inside_user = str(user_cache / "projects" / "repo")
    assert settings_from_table({"cache-dir": inside_user}, root).cache_dir == inside_user


def test_cache_dir_in_the_user_cache_is_used(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    target = xdg / "collcheck" / "repo"
    project = _project(tmp_path / "repo", f'cache-dir = "{target}"')

    code, _, stderr = _check(project, xdg)

    assert code == 1, stderr
    assert list(target.rglob("*.json"))
    assert not (project / ".collcheck_cache").exists()


def test_symlinked_cache_folder_is_refused(tmp_path: Path) -> None:
    project = _project(tmp_path / "repo")
    outside = tmp_path / "outside"
    outside.mkdir()
    (project / ".collcheck_cache").symlink_to(outside, target_is_directory=True)

    code, _, stderr = _check(project, tmp_path / "xdg")

    assert code == 2
    assert "symbolic link" in stderr and "Traceback" not in stderr
    assert list(outside.iterdir()) == []
    # --no-cache still checks the project.
    assert _check(project, tmp_path / "xdg", "--no-cache")[0] == 1


def test_symlink_inside_the_cache_folder_leads_no_write_outside(tmp_path: Path) -> None:
    project = _project(tmp_path / "repo")
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = project / ".collcheck_cache"
    folder.mkdir()
    for name in (f"v{cache.CACHE_FORMAT}", "runs", "facts", "projects"):
        (folder / name).symlink_to(outside, target_is_directory=True)

    code, data, stderr = _check(project, tmp_path / "xdg")

    assert code == 1, stderr
    assert len(data["findings"]) == 1
    assert list(outside.iterdir()) == []


def test_symlinked_entry_is_a_miss(tmp_path: Path) -> None:
    source = tmp_path / "train.py"
    source.write_bytes(BUG.read_bytes())
    folder = tmp_path / "cache"
    settings = Settings(cache_dir=str(folder))
    calls: list[int] = []

    def compute() -> FileResult:
        calls.append(1)
        return FileResult(str(source))

    cache.cached_analyze(str(source), settings, "cat", compute)
    [entry] = list((folder / f"v{cache.CACHE_FORMAT}").rglob("*.json"))
    copy = tmp_path / "copy.json"
    copy.write_bytes(entry.read_bytes())  # a correctly sealed entry, reached through a link
    entry.unlink()
    entry.symlink_to(copy)

    cache.cached_analyze(str(source), settings, "cat", compute)

    assert len(calls) == 2
    assert not entry.is_symlink()  # replaced by a real entry; the link's target untouched
    assert copy.read_bytes() != b""


def test_dot_dot_through_a_link_stays_inside(tmp_path: Path) -> None:
    """`sub/link/../x` reads as `sub/x`; the OS would resolve it through the link to outside."""
    project = _project(tmp_path / "repo", 'cache-dir = "sub/link/../cc"')
    outside = tmp_path / "outside" / "deeper"
    outside.mkdir(parents=True)
    (project / "sub").mkdir()
    (project / "sub" / "link").symlink_to(outside, target_is_directory=True)

    code, _, stderr = _check(project, tmp_path / "xdg")

    assert code == 1, stderr
    assert list((project / "sub" / "cc").rglob("*.json"))
    assert list((tmp_path / "outside").rglob("*")) == [outside]
