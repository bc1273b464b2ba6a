"""A run over some files of a project (pre-commit's staged files) follows helpers and rank
constants into the files around them, and reports for the given files what a whole-tree run does."""

from __future__ import annotations

from pathlib import Path

from collcheck.api import check_paths, project_root
from collcheck.config import load_settings

ENV = "import os\nRANK = int(os.environ['RANK'])\nIS_MAIN = RANK == 0\n"
COMM = "import torch.distributed as dist\ndef sync(t):\n    dist.all_reduce(t)\n"
TRAIN = (
    "import torch.distributed as dist\n"
    "from .env import RANK, IS_MAIN\n"
    "from . import env\n"
    "from .comm import sync\n"
    "def a(t):\n"
    "    if RANK == 0:\n"
    "        dist.barrier()\n"
    "def b(t):\n"
    "    if IS_MAIN:\n"
    "        dist.all_reduce(t)\n"
    "def c(t):\n"
    "    if env.RANK == 0:\n"
    "        sync(t)\n"
    "def quiet(t):\n"
    "    sync(t)\n"
    "    if env.RANK == 0:\n"
    "        print(t)\n"
)


def _project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n", encoding="utf-8")
    package = tmp_path / "pkg"
    package.mkdir()
    for name, text in {"__init__.py": "", "env.py": ENV, "comm.py": COMM, "train.py": TRAIN}.items():
        (package / name).write_text(text, encoding="utf-8")
    return package / "train.py"


def _found(paths: list[Path], root: Path, **overrides: object) -> set[tuple[str, int, str]]:
    settings = load_settings(paths).with_overrides(jobs=1, cache=False, **overrides)
    result = check_paths(paths, settings)
    assert not result.errors
    return {(Path(f.location.path).name, f.location.line, f.code) for f in result.findings}


def test_project_root_is_the_nearest_pyproject(tmp_path: Path) -> None:
    train = _project(tmp_path)
    assert project_root([train]) == tmp_path
    assert project_root([tmp_path / "pkg"]) == tmp_path


def test_one_file_reports_what_the_whole_tree_reports(tmp_path: Path) -> None:
    train = _project(tmp_path)
    whole = {f for f in _found([tmp_path], tmp_path) if f[0] == "train.py"}
    assert whole == {("train.py", 7, "CC001"), ("train.py", 10, "CC001"), ("train.py", 13, "CC001")}
    assert _found([train], tmp_path) == whole


def test_without_project_context_only_the_given_file_is_read(tmp_path: Path) -> None:
    train = _project(tmp_path)
    assert _found([train], tmp_path, project_context=False) == set()


def test_an_edited_constant_file_rechecks_the_file_on_a_warm_cache(tmp_path: Path) -> None:
    train = _project(tmp_path)
    settings = load_settings([train]).with_overrides(jobs=1, cache_dir=str(tmp_path / ".cache"))
    first = check_paths([train], settings)
    assert len(first.findings) == 3
    (tmp_path / "pkg" / "comm.py").write_text("def sync(t):\n    return t\n", encoding="utf-8")
    second = check_paths([train], settings)
    assert {f.location.line for f in second.findings} == {7, 10}


def test_an_edited_rank_constant_rechecks_its_importers_on_a_warm_cache(tmp_path: Path) -> None:
    """train.py's findings come from constants of env.py (no call reaches env.py): an edit of
    env.py must still re-check train.py, both ways."""
    train = _project(tmp_path)
    env = tmp_path / "pkg" / "env.py"
    settings = load_settings([train]).with_overrides(jobs=1, cache_dir=str(tmp_path / ".cache"))
    assert {f.location.line for f in check_paths([train], settings).findings} == {7, 10, 13}
    env.write_text("RANK = 0\nIS_MAIN = True\n", encoding="utf-8")
    assert {f.location.line for f in check_paths([train], settings).findings} == set()
    env.write_text(ENV, encoding="utf-8")
    assert {f.location.line for f in check_paths([train], settings).findings} == {7, 10, 13}
