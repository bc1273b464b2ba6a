"""collcheck.safe_write, the one way collcheck writes a file (docs/security.md, "Writers"): units,
and a property test over generated trees whose links lead outside (issue 27, item 1)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collcheck.cli import main
from collcheck.safe_write import (
    ChangedOnDisk,
    WriteRefused,
    WriteRoots,
    replace_below,
    rewrite_in_place,
    write_output,
)


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path, WriteRoots]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    return root, outside, WriteRoots.of(None, [root])


def test_a_link_as_the_last_component_is_refused_even_inside_the_root(
    layout: tuple[Path, Path, WriteRoots],
) -> None:
    root, _, roots = layout
    (root / "real.py").write_bytes(b"x = 1\n")
    (root / "alias.py").symlink_to("real.py")
    with pytest.raises(WriteRefused, match="symbolic link"):
        rewrite_in_place(root / "alias.py", b"x = 2\n", roots, b"x = 1\n")
    with pytest.raises(WriteRefused, match="symbolic link"):
        write_output(root / "alias.py", b"x = 2\n", roots)
    assert (root / "real.py").read_bytes() == b"x = 1\n" and (root / "alias.py").is_symlink()


def test_a_folder_link_out_of_the_root_is_refused(layout: tuple[Path, Path, WriteRoots]) -> None:
    root, outside, roots = layout
    (outside / "a.py").write_bytes(b"x = 1\n")
    (root / "lib").symlink_to(outside)
    with pytest.raises(WriteRefused, match="outside the project"):
        rewrite_in_place(root / "lib" / "a.py", b"x = 2\n", roots, b"x = 1\n")
    with pytest.raises(WriteRefused, match="outside the project"):
        write_output(root / "lib" / "new.json", b"{}", roots)
    assert sorted(p.name for p in outside.iterdir()) == ["a.py"]


def test_a_folder_link_that_stays_inside_the_root_is_followed(layout: tuple[Path, Path, WriteRoots]) -> None:
    root, _, roots = layout
    (root / "src").mkdir()
    (root / "src" / "a.py").write_bytes(b"x = 1\n")
    (root / "alias").symlink_to("src")
    rewrite_in_place(root / "alias" / "a.py", b"x = 2\n", roots, b"x = 1\n")
    assert (root / "src" / "a.py").read_bytes() == b"x = 2\n"


def test_outputs_outside_every_root_are_the_user_s_choice(layout: tuple[Path, Path, WriteRoots]) -> None:
    _, outside, roots = layout
    write_output(outside / "report.json", b"{}", roots)
    assert (outside / "report.json").read_bytes() == b"{}"
    with pytest.raises(WriteRefused):  # in place: only inside a root
        rewrite_in_place(outside / "report.json", b"[]", roots, b"{}")


def test_a_rewrite_checks_the_bytes_it_read(layout: tuple[Path, Path, WriteRoots]) -> None:
    root, _, roots = layout
    path = root / "a.py"
    path.write_bytes(b"x = 1\n# saved meanwhile\n")
    with pytest.raises(ChangedOnDisk):
        rewrite_in_place(path, b"x = 2\n", roots, b"x = 1\n")
    assert path.read_bytes() == b"x = 1\n# saved meanwhile\n"
    path.unlink()
    with pytest.raises(ChangedOnDisk):
        rewrite_in_place(path, b"x = 2\n", roots, b"x = 1\n")
    assert not path.exists()


def test_modes_kept_and_new_files_follow_the_umask(layout: tuple[Path, Path, WriteRoots]) -> None:
    root, _, roots = layout
    path = root / "a.py"
    path.write_bytes(b"x = 1\n")
    path.chmod(0o604)
    rewrite_in_place(path, b"x = 2\n", roots, b"x = 1\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o604
    old = os.umask(0o027)
    try:
        write_output(root / "new.json", b"{}", roots)
    finally:
        os.umask(old)
    assert stat.S_IMODE((root / "new.json").stat().st_mode) == 0o640
    assert sorted(p.name for p in root.iterdir()) == ["a.py", "new.json"]  # no temporary left


def test_anything_but_a_regular_file_is_refused(layout: tuple[Path, Path, WriteRoots]) -> None:
    root, _, roots = layout
    os.mkfifo(root / "pipe.json")
    (root / "folder.json").mkdir()
    for name in ("pipe.json", "folder.json"):
        with pytest.raises(WriteRefused, match="not a regular file"):
            write_output(root / name, b"{}", roots)


def test_below_a_folder_no_link_is_followed_on_the_way_down(layout: tuple[Path, Path, WriteRoots]) -> None:
    """The folder is opened part by part without following links: a link put in the way after
    the path was checked is refused, not written through (the cache relies on it)."""
    root, outside, _ = layout
    (root / "sub").symlink_to(outside)
    with pytest.raises(WriteRefused, match="symbolic link"):
        replace_below(root, root / "sub" / "entry.json", b"{}")
    assert list(outside.iterdir()) == []
    (root / "entry.json").symlink_to(outside / "target.json")
    replace_below(root, root / "entry.json", b"{}")  # collcheck's own folder: the link is replaced
    assert not (root / "entry.json").is_symlink() and list(outside.iterdir()) == []


def test_roots_are_the_config_folder_and_the_checked_paths(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "one.py").write_bytes(b"")
    roots = WriteRoots.of(tmp_path / "cfg", [tmp_path / "src", tmp_path / "one.py"])
    real = os.path.realpath(tmp_path)
    assert roots.folders == (f"{real}/cfg", f"{real}/src", real)
    assert roots.holding(f"{real}/src/deep") == f"{real}/src"
    assert roots.holding(f"{real}/srcx") == real
    assert WriteRoots.of(None, [tmp_path / "src"]).holding(f"{real}/srcx") is None


# --- property: nothing outside a tree changes, whatever its links -------------------------------

BUGGY = [
    "import torch.distributed as dist\n\n\ndef sync(grads, names):\n"
    "    for name in set(names):\n        dist.all_reduce(grads[name])\n",
    "import torch.distributed as dist\n\n\ndef save(state, path):\n"
    "    if dist.get_rank() == 0:\n        write(state, path)\n        dist.barrier()\n",
    "import torch.distributed as dist\n\n\ndef share(out, k):\n    dist.all_gather_object(out, k)\n",
]
LINK_KINDS = ["outside file", "outside folder", "outside secret", "dangling", "chain", "own file"]
OPERATIONS = ["--fix", "--unsafe-fixes", "--add-ignore", "--write-baseline", "-o"]


def _snapshot(folder: Path) -> dict[str, tuple[str, int, bytes]]:
    found: dict[str, tuple[str, int, bytes]] = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            found[str(path)] = ("link", 0, os.readlink(path).encode())
        elif stat.S_ISDIR(info.st_mode):
            found[str(path)] = ("dir", stat.S_IMODE(info.st_mode), b"")
        else:
            found[str(path)] = ("file", stat.S_IMODE(info.st_mode), path.read_bytes())
    return found


def _links(folder: Path) -> dict[str, str]:
    return {str(p): os.readlink(p) for p in folder.rglob("*") if p.is_symlink()}


def _build(base: Path, entries: list[tuple[str, int, bool, bool]], modes: list[int]) -> tuple[Path, Path]:
    tree, outside = base / "tree", base / "outside"
    (outside / "lib").mkdir(parents=True)
    for index, mode in enumerate(modes):
        path = outside / f"out{index}.py"
        path.write_text(BUGGY[index % len(BUGGY)])
        path.chmod(mode)
    (outside / "lib" / "inner.py").write_text(BUGGY[0])
    (outside / "secret.json").write_bytes(b'{"token": "never overwritten"}\n')
    (outside / "secret.json").chmod(0o600)
    (tree / "deep").mkdir(parents=True)
    (tree / "own.py").write_text(BUGGY[0])
    targets = {
        "outside file": lambda i: outside / f"out{i % len(modes)}.py",
        "outside folder": lambda i: outside / "lib",
        "outside secret": lambda i: outside / "secret.json",
        "dangling": lambda i: outside / f"missing{i}.py",
        "chain": lambda i: tree / f"link{max(i - 1, 0)}.py",
        "own file": lambda i: tree / "own.py",
    }
    for index, (kind, pick, nested, absolute) in enumerate(entries):
        place = (
            tree / "deep" if nested else tree
        ) / f"link{index}{'' if kind == 'outside folder' else '.py'}"
        target = targets[kind](pick + index)
        if place == target or place.exists() or place.is_symlink():
            continue
        place.symlink_to(target if absolute else os.path.relpath(target, place.parent))
    return tree, outside


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=st.lists(
        st.tuples(st.sampled_from(LINK_KINDS), st.integers(0, 3), st.booleans(), st.booleans()),
        min_size=1,
        max_size=5,
    ),
    modes=st.lists(st.sampled_from([0o644, 0o600, 0o755, 0o400]), min_size=1, max_size=3),
    operation=st.sampled_from(OPERATIONS),
    output_pick=st.integers(0, 11),
)
def test_nothing_outside_the_tree_changes(
    entries: list[tuple[str, int, bool, bool]], modes: list[int], operation: str, output_pick: int
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        tree, outside = _build(base, entries, modes)
        before, links = _snapshot(outside), _links(tree)
        argv = ["check", "--no-cache", "-j", "1"]
        if operation in ("--write-baseline", "-o"):
            names = [
                *sorted(links),
                *(f"{link}/new.json" for link in sorted(links)),
                str(tree / "fresh.json"),
            ]
            argv += [operation, names[output_pick % len(names)]]
            if operation == "-o":
                argv += ["--format", "json"]
        elif operation == "--unsafe-fixes":
            argv += ["--fix", "--unsafe-fixes"]
        else:
            argv.append(operation)
        saved = os.environ.get("XDG_CACHE_HOME")
        os.environ["XDG_CACHE_HOME"] = str(base / "user-cache")
        try:
            code = main([*argv, str(tree)])
        finally:
            if saved is None:
                del os.environ["XDG_CACHE_HOME"]
            else:
                os.environ["XDG_CACHE_HOME"] = saved
        assert code in (0, 1, 2)
        assert _snapshot(outside) == before
        assert _links(tree) == links
        if operation not in ("--write-baseline", "-o"):  # the tree's own file is still rewritten
            assert (tree / "own.py").read_text() != BUGGY[0]
