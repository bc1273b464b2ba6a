"""Which files an edit re-checks (issue 26): a cached answer depends on the files its analysis
read (static/reads.py), so an edit re-checks exactly the files that read the edited one, and
each re-checked answer is the one a cold run gives. Each test edits a file in a way that keeps
the index's names the same (no function starts or stops communicating), so only the recorded
reads can tell which answers are stale."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from collcheck import api
from collcheck.config import Settings
from collcheck.findings import FileResult
from collcheck.source import SourceFile


def write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def bump(path: Path, text: str) -> None:
    """Rewrite a file so that its size or modification time surely changes."""
    stat = path.stat()
    path.write_text(textwrap.dedent(text))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


@pytest.fixture
def analysed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files the engine analyses (cache misses), in order."""
    seen: list[str] = []
    original: Callable[..., FileResult] = api._analyze_in_budget

    def counting(source: SourceFile, *args: object, **kwargs: object) -> FileResult:
        seen.append(Path(source.path).name)
        return original(source, *args, **kwargs)

    monkeypatch.setattr(api, "_analyze_in_budget", counting)
    return seen


def check(folder: Path, tmp_path: Path) -> list[tuple[str, str, int]]:
    settings = Settings(root=str(tmp_path), cache_dir=str(tmp_path / "cache"), jobs=1)
    result = api.check_paths([folder], settings)
    assert not [file.error for file in result.files if file.error]
    return sorted(
        (Path(finding.location.path).name, finding.code, finding.location.line)
        for file in result.files
        for finding in file.findings
    )


def cold(folder: Path, tmp_path: Path) -> list[tuple[str, str, int]]:
    settings = Settings(root=str(tmp_path), cache=False, jobs=1)
    result = api.check_paths([folder], settings)
    return sorted(
        (Path(finding.location.path).name, finding.code, finding.location.line)
        for file in result.files
        for finding in file.findings
    )


def index_names(folder: Path) -> str:
    """The part of every cache key the index's names and module table make (`index_key`)."""
    from collcheck.catalog import settings_catalog_fingerprint
    from collcheck.static.project import index_key

    settings = Settings(cache=False)
    files = api.collect_files([folder], settings)
    return index_key(api._project(files, settings_catalog_fingerprint(settings), settings))


BALANCED = """\
import torch.distributed as dist
{imports}


def step():
    if dist.get_rank() == 0:
        {call}
    else:
        dist.barrier()
"""
ONCE = "import torch.distributed as dist\n\n\ndef synchronize():\n    dist.barrier()\n"
TWICE = ONCE + "    dist.barrier()\n"
QUIET = "LIMIT = 3\n"


def _edited(
    project: Path, tmp_path: Path, analysed: list[str], edited: str, text: str, dependent: str
) -> None:
    """The edit changes the dependent file's findings: it is analysed again, and its findings
    are the cold run's (nothing stale is served)."""
    before, names_before = check(project, tmp_path), index_names(project)
    analysed.clear()
    bump(project / edited, text)
    after = check(project, tmp_path)
    assert index_names(project) == names_before  # the index alone cannot tell: the reads do
    assert dependent in analysed
    assert after != before and after == cold(project, tmp_path)
    assert {name for name, _, _ in (*before, *after)} == {dependent}


def test_an_edit_of_a_used_helper_rechecks_its_caller(tmp_path: Path, analysed: list[str]) -> None:
    project = tmp_path / "project"
    train = BALANCED.format(imports="from comm import synchronize", call="synchronize()")
    write(project, {"comm.py": ONCE, "train.py": train, "quiet.py": QUIET})
    _edited(project, tmp_path, analysed, "comm.py", TWICE, "train.py")


def test_an_edit_behind_a_reexport_rechecks_the_importer(tmp_path: Path, analysed: list[str]) -> None:
    project = tmp_path / "project"
    train = BALANCED.format(imports="from pkg import synchronize", call="synchronize()")
    files = {"pkg/__init__.py": "from .impl import synchronize\n", "pkg/impl.py": ONCE, "train.py": train}
    write(project, files)
    _edited(project, tmp_path, analysed, "pkg/impl.py", TWICE, "train.py")


def test_an_edit_of_a_base_class_two_files_away_rechecks_the_subclass(
    tmp_path: Path, analysed: list[str]
) -> None:
    """Trainer(Middle) in train.py, Middle(Base) in middle.py, the attribute in base.py: the
    read goes through a model of middle.py, which read base.py when it was built."""
    project = tmp_path / "project"
    base = "class Base:\n    EVERY_RANK = True\n"
    train = """\
    import torch.distributed as dist
    from middle import Middle


    class Trainer(Middle):
        def step(self):
            if self.EVERY_RANK or dist.get_rank() == 0:
                dist.barrier()
    """
    middle = "from base import Base\n\n\nclass Middle(Base):\n    pass\n"
    write(project, {"base.py": base, "middle.py": middle, "train.py": train})
    _edited(project, tmp_path, analysed, "base.py", base.replace("True", "False"), "train.py")


def test_an_edit_of_a_class_attribute_rechecks_the_subclass(tmp_path: Path, analysed: list[str]) -> None:
    project = tmp_path / "project"
    base = "class Base:\n    EVERY_RANK = True\n"
    train = """\
    import torch.distributed as dist
    from base import Base


    class Trainer(Base):
        def step(self):
            if self.EVERY_RANK or dist.get_rank() == 0:
                dist.barrier()
    """
    write(project, {"base.py": base, "train.py": train})
    _edited(project, tmp_path, analysed, "base.py", base.replace("True", "False"), "train.py")


def test_an_edit_of_a_module_constant_rechecks_its_importer(tmp_path: Path, analysed: list[str]) -> None:
    """A module-level value of another file is read where it depends on the rank: once it is a
    constant, the test on it no longer tells the ranks apart."""
    project = tmp_path / "project"
    train = """\
    import torch.distributed as dist
    from switches import RANK


    def step():
        if RANK == 0:
            dist.barrier()
    """
    switches = 'import os\n\nRANK = int(os.environ["RANK"])\n'
    write(project, {"switches.py": switches, "train.py": train})
    _edited(project, tmp_path, analysed, "switches.py", "RANK = 0\n", "train.py")


def test_an_edit_of_a_file_no_analysis_read_rechecks_nothing(tmp_path: Path, analysed: list[str]) -> None:
    """train.py imports a class whose file imports a constant of limits.py: the index reaches
    limits.py from train.py (a class is a module-level value), but the analysis of train.py never
    opens either file, so an edit of limits.py re-checks nothing; an edit of the helper it calls
    re-checks train.py alone."""
    project = tmp_path / "project"
    engine = "from limits import LIMIT\n\n\nclass Engine:\n    limit = LIMIT\n"
    train = BALANCED.format(
        imports="from comm import synchronize\nfrom engine import Engine", call="synchronize()"
    )
    other = BALANCED.format(imports="", call="dist.barrier()")
    write(
        project,
        {"limits.py": QUIET, "engine.py": engine, "comm.py": ONCE, "train.py": train, "other.py": other},
    )
    assert check(project, tmp_path) == []
    assert sorted(analysed) == ["comm.py", "other.py", "train.py"]
    analysed.clear()
    bump(project / "limits.py", "LIMIT = 4\n")
    assert check(project, tmp_path) == []
    assert analysed == []
    bump(project / "comm.py", ONCE + "\n# edited\n")
    assert check(project, tmp_path) == []
    assert sorted(analysed) == ["comm.py", "train.py"]


def test_an_added_file_rechecks_the_files_whose_names_land_in_it(tmp_path: Path, analysed: list[str]) -> None:
    """train.py imports a per-rank value from a file that is not there yet: adding it re-checks
    train.py (its name now lands there) and the new file, and nothing else; an added file no
    name lands in re-checks only itself."""
    project = tmp_path / "project"
    train = """\
    import torch.distributed as dist
    from switches import RANK


    def step():
        if RANK == 0:
            dist.barrier()
    """
    other = BALANCED.format(imports="", call="dist.barrier()")
    write(project, {"train.py": train, "other.py": other})
    names_before = index_names(project)
    assert check(project, tmp_path) == []
    analysed.clear()
    write(project, {"switches.py": 'import os\n\nRANK = int(os.environ["RANK"])\n'})
    assert index_names(project) == names_before
    assert check(project, tmp_path) == [("train.py", "CC001", 7)]
    assert analysed == ["train.py"]  # switches.py names no collective: never analysed
    assert cold(project, tmp_path) == [("train.py", "CC001", 7)]
    analysed.clear()
    write(project, {"unrelated.py": "import torch.distributed as dist\n\ndist.barrier()\n"})
    assert index_names(project) == names_before
    check(project, tmp_path)
    assert analysed == ["unrelated.py"]


def test_an_edit_undone_finds_the_answers_from_before_it(tmp_path: Path, analysed: list[str]) -> None:
    """An answer is kept per state of the files it read (`cache.MAX_VARIANTS`): undoing an edit
    (a branch checked out and back) serves the answers computed before it again."""
    project = tmp_path / "project"
    train = BALANCED.format(imports="from comm import synchronize", call="synchronize()")
    write(project, {"comm.py": ONCE, "train.py": train})
    assert check(project, tmp_path) == []
    bump(project / "comm.py", TWICE)
    assert check(project, tmp_path) == [("train.py", "CC001", 7)]
    analysed.clear()
    bump(project / "comm.py", ONCE)
    assert check(project, tmp_path) == []
    assert analysed == []
