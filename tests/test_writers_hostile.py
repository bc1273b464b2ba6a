"""What collcheck writes, on hostile trees (issue 27, items 1, 2, 6 and 7; docs/security.md).

End to end through `main(argv)`: `--fix`, `--unsafe-fixes`, `--add-ignore`, `--write-baseline` and
`-o` never write through a symbolic link nor outside the project, replace files atomically and keep
their mode, never overwrite an edit saved while they were analysing, and keep every line ending.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from collcheck.adopt import fixes as engine
from collcheck.adopt import ignore as ignore_module
from tests.cli_support import run

SET_LOOP = (
    "import torch.distributed as dist\n\n\n"
    "def sync(grads, names):\n"
    "    for name in set(names):\n"
    "        dist.all_reduce(grads[name])\n"
)
RANK_GUARD = (
    "import torch.distributed as dist\n\n\n"
    "def save(state, path):\n"
    "    if dist.get_rank() == 0:\n"
    "        write(state, path)\n"
    "        dist.barrier()\n"
)
FIXED_LOOP = SET_LOOP.replace("set(names)", "sorted(set(names))")
SECRET = b"outside the tree: never to be written\n"


@pytest.fixture(autouse=True)
def user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))


def _snapshot(folder: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry below `folder`: kind, permission bits and bytes (a link: its target)."""
    found: dict[str, tuple[str, int, bytes]] = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            found[str(path)] = ("link", 0, os.readlink(path).encode())
        elif path.is_dir():
            found[str(path)] = ("dir", stat.S_IMODE(info.st_mode), b"")
        else:
            found[str(path)] = ("file", stat.S_IMODE(info.st_mode), path.read_bytes())
    return found


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path]:
    """`tree/` (checked) with a file link and a folder link to `outside/`, which holds fixable code."""
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    (outside / "pkg").mkdir(parents=True)
    (outside / "real.py").write_text(SET_LOOP)
    (outside / "guard.py").write_text(RANK_GUARD)
    (outside / "pkg" / "inner.py").write_text(SET_LOOP)
    (outside / "secret.json").write_bytes(SECRET)
    (outside / "secret.json").chmod(0o600)
    tree.mkdir()
    (tree / "own.py").write_text(SET_LOOP)
    (tree / "link.py").symlink_to(outside / "real.py")
    (tree / "guard_link.py").symlink_to(outside / "guard.py")
    (tree / "pkg").symlink_to(outside / "pkg")
    return tree, outside


@pytest.mark.parametrize(
    "flags",
    [("--fix",), ("--fix", "--unsafe-fixes"), ("--add-ignore",), ("--add-ignore=reviewed",)],
)
def test_rewrites_never_follow_a_link_out_of_the_tree(
    hostile: tuple[Path, Path], capsys: pytest.CaptureFixture[str], flags: tuple[str, ...]
) -> None:
    tree, outside = hostile
    before = _snapshot(outside)
    code, _, err = run(capsys, "check", "--no-cache", *flags, str(tree))
    assert _snapshot(outside) == before
    assert (tree / "link.py").is_symlink() and (tree / "pkg").is_symlink()
    assert "symbolic link" in err and "Traceback" not in err
    assert (tree / "own.py").read_text() != SET_LOOP  # the tree's own file is still rewritten
    assert code == 1  # the findings behind the links remain


def test_a_hard_link_to_a_file_outside_is_not_written_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hard link cannot be told from the file itself: replacing the file (a new inode) instead
    of writing into it leaves the other name's bytes alone."""
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (outside / "shared.py").write_text(SET_LOOP)
    os.link(outside / "shared.py", tree / "shared.py")
    code, _, _ = run(capsys, "check", "--no-cache", "--fix", str(tree))
    assert code == 0
    assert (tree / "shared.py").read_text() == FIXED_LOOP
    assert (outside / "shared.py").read_text() == SET_LOOP


def test_fix_keeps_the_file_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "train.py"
    path.write_text(SET_LOOP)
    path.chmod(0o751)
    assert run(capsys, "check", "--no-cache", "--fix", str(path))[0] == 0
    assert path.read_text() == FIXED_LOOP
    assert stat.S_IMODE(path.stat().st_mode) == 0o751
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]  # no temporary file left


def test_write_baseline_never_writes_through_a_link(
    hostile: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    tree, outside = hostile
    (tree / "baseline.json").symlink_to(outside / "secret.json")
    before = _snapshot(outside)
    code, _, err = run(
        capsys, "check", "--no-cache", "--write-baseline", str(tree / "baseline.json"), str(tree)
    )
    assert code == 2 and "symbolic link" in err and "Traceback" not in err
    assert _snapshot(outside) == before
    assert (tree / "baseline.json").is_symlink()


def test_outputs_never_leave_the_tree_through_a_folder_link(
    hostile: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    tree, outside = hostile
    before = _snapshot(outside)
    for option in ("--write-baseline", "-o"):
        code, _, err = run(capsys, "check", "--no-cache", option, str(tree / "pkg" / "out.json"), str(tree))
        assert code == 2 and "outside the project" in err, (option, err)
    assert _snapshot(outside) == before


def test_report_output_never_writes_through_a_link(
    hostile: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    tree, outside = hostile
    (tree / "report.sarif").symlink_to(outside / "secret.json")
    before = _snapshot(outside)
    code, out, err = run(
        capsys, "check", "--no-cache", "--format", "sarif", "-o", str(tree / "report.sarif"), str(tree)
    )
    assert code == 2 and "symbolic link" in err and out == ""
    assert _snapshot(outside) == before


def test_outputs_named_outside_the_tree_are_written_atomically(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A report or baseline the user names outside the checked tree is theirs to place; an existing
    file there is replaced (its mode kept), not written into."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "own.py").write_text(SET_LOOP)
    reports = tmp_path / "reports"
    reports.mkdir()
    baseline = reports / "baseline.json"
    baseline.write_text("{}")
    baseline.chmod(0o600)
    alias = reports / "alias.json"
    os.link(baseline, alias)
    assert run(capsys, "check", "--no-cache", "--write-baseline", str(baseline), str(tree))[0] == 0
    assert json.loads(baseline.read_text())["collcheck_baseline"] == 1
    assert stat.S_IMODE(baseline.stat().st_mode) == 0o600
    assert alias.read_text() == "{}"  # replaced, not written into
    code, _, _ = run(
        capsys, "check", "--no-cache", "--format", "json", "-o", str(reports / "r.json"), str(tree)
    )
    assert code == 1 and json.loads((reports / "r.json").read_text())["findings"]


def _saving_meanwhile(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, path: Path, edit: str) -> None:
    """While collcheck works on `path` (in `module.name`), the user saves `edit` into it."""
    real: Callable[..., Any] = getattr(module, name)

    def and_then_save(*args: Any, **kwargs: Any) -> Any:
        answer = real(*args, **kwargs)
        path.write_text(edit)
        return answer

    monkeypatch.setattr(module, name, and_then_save)


def test_fix_never_overwrites_an_edit_saved_meanwhile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "train.py"
    path.write_text(SET_LOOP)
    edited = SET_LOOP + "\n\n# saved by the user while collcheck ran\n"
    _saving_meanwhile(monkeypatch, engine.FileFixer, "apply_all", path, edited)
    code, _, err = run(capsys, "check", "--no-cache", "--fix", str(path))
    assert path.read_text() == edited
    assert "changed on disk" in err
    assert "fixed 0 findings in 0 files; 1 file skipped" in err
    assert code == 1  # the finding is still there


def test_add_ignore_never_overwrites_an_edit_saved_meanwhile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "train.py"
    path.write_text(SET_LOOP)
    other = tmp_path / "other.py"
    other.write_text(RANK_GUARD)
    edited = SET_LOOP.replace("names", "keys")
    real = ignore_module.add_ignores

    def and_then_save(text: str, *args: Any, **kwargs: Any) -> Any:
        answer = real(text, *args, **kwargs)
        if text == SET_LOOP:
            path.write_text(edited)  # saved after collcheck read train.py, before it wrote
        return answer

    monkeypatch.setattr(ignore_module, "add_ignores", and_then_save)
    code, _, err = run(capsys, "check", "--no-cache", "--add-ignore", str(path), str(other))
    assert path.read_text() == edited
    assert "collcheck: ignore[CC001]" in other.read_text()
    assert "changed on disk" in err and "1 file skipped" in err
    assert code == 1


CR_ONLY_LOOP = SET_LOOP.replace("\n", "\r").encode()


def test_add_ignore_on_a_file_of_cr_line_endings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "train.py"
    path.write_bytes(CR_ONLY_LOOP)
    code, _, err = run(capsys, "check", "--no-cache", "--add-ignore", str(path))
    assert "added suppressions for 1 finding in 1 file" in err
    assert path.read_bytes() == CR_ONLY_LOOP.replace(
        b"set(names):\r", b"set(names):  # collcheck: ignore[CC007]\r"
    )
    assert code == 0


@pytest.mark.parametrize("ending", [b"\r", b"\r\n", b"\n"])
def test_fix_keeps_every_line_ending(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ending: bytes
) -> None:
    path = tmp_path / "train.py"
    original = SET_LOOP.encode().replace(b"\n", ending)
    path.write_bytes(original)
    assert run(capsys, "check", "--no-cache", "--fix", str(path))[0] == 0
    assert path.read_bytes() == original.replace(b"set(names)", b"sorted(set(names))")


def test_diff_of_a_file_of_cr_line_endings_marks_no_missing_newline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "train.py"
    path.write_bytes(CR_ONLY_LOOP)
    code, out, _ = run(capsys, "check", "--no-cache", "--diff", str(path))
    assert code == 1
    assert "+    for name in sorted(set(names)):\r" in out and "No newline" not in out


@pytest.mark.parametrize("version", ["true", "1.0", '"1"'])
def test_a_baseline_version_must_be_the_integer_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    path = tmp_path / "train.py"
    path.write_text(SET_LOOP)
    baseline = tmp_path / "baseline.json"
    baseline.write_text(f'{{"collcheck_baseline": {version}, "entries": []}}')
    code, _, err = run(capsys, "check", "--no-cache", "--baseline", str(baseline), str(path))
    assert code == 2 and "not a collcheck baseline" in err


def _project(folder: Path, table: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text(f"[tool.collcheck]\n{table}\n")
    (folder / "src").mkdir()
    (folder / "src" / "train.py").write_text(SET_LOOP)
    return folder


@pytest.mark.parametrize("value", [".", "./", "src/..", "{root}"])
def test_the_project_itself_is_no_cache_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    project = _project(tmp_path / "repo", f'cache-dir = "{value.format(root=tmp_path / "repo")}"')
    monkeypatch.chdir(project)
    code, _, err = run(capsys, "check", "src")
    assert code == 2 and "cache-dir" in err and "Traceback" not in err
    assert not (project / ".gitignore").exists()


def test_a_cache_folder_that_already_holds_code_gets_no_gitignore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cache-dir = "src"`: the `*` .gitignore would hide the sources from git. It is written only
    into a folder collcheck creates for its cache."""
    project = _project(tmp_path / "repo", 'cache-dir = "src"')
    monkeypatch.chdir(project)
    assert run(capsys, "check", "src")[0] == 1
    assert not (project / "src" / ".gitignore").exists()
    fresh = _project(tmp_path / "fresh", 'cache-dir = "build/cc"')
    monkeypatch.chdir(fresh)
    assert run(capsys, "check", "src")[0] == 1
    assert "*" in (fresh / "build" / "cc" / ".gitignore").read_text().split()


def test_a_link_to_a_file_of_the_tree_reports_and_fixes_under_each_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`alias.py -> own.py`: each name carries its own finding (the alias's model was reused under
    the alias's name before), and --fix rewrites own.py, never the link."""
    (tmp_path / "own.py").write_text(SET_LOOP)
    (tmp_path / "alias.py").symlink_to("own.py")
    code, out, _ = run(capsys, "check", "--no-cache", "--format", "concise", str(tmp_path))
    assert code == 1
    assert sorted(line.split(":")[0].rsplit("/", 1)[-1] for line in out.splitlines() if "CC007" in line) == [
        "alias.py",
        "own.py",
    ]
    code, _, err = run(capsys, "check", "--no-cache", "--fix", str(tmp_path))
    assert code == 0 and "symbolic link" in err
    assert (tmp_path / "own.py").read_text() == FIXED_LOOP and (tmp_path / "alias.py").is_symlink()


def test_the_memory_plot_never_writes_through_a_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    from tests.test_memory_cli import MODELS

    outside = tmp_path / "outside.png"
    outside.write_bytes(SECRET)
    target = tmp_path / "peak.png"
    target.symlink_to(outside)
    model = str(MODELS / "llama-3-8b.json")
    args = ["--model", model, "--seq-len", "131072", "--tp", "8", "--budget", "16GiB", "--plot", str(target)]
    code, _, err = run(capsys, "estimate", *args)
    assert code == 2 and "symbolic link" in err and "Traceback" not in err
    assert outside.read_bytes() == SECRET and target.is_symlink()


def test_the_launcher_s_exit_record_never_appends_through_a_link(tmp_path: Path) -> None:
    from collcheck.runtime import exits

    outside = tmp_path / "outside.txt"
    outside.write_bytes(SECRET)
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / exits.EXITS_FILE).symlink_to(outside)
    with pytest.raises(OSError):
        exits.record(str(traces), 4242, 1, 0)
    assert outside.read_bytes() == SECRET
    (traces / exits.EXITS_FILE).unlink()
    exits.record(str(traces), 4242, 1, 0)
    assert exits.read(str(traces)) == {4242: 1}
