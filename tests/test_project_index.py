"""The run's cross-file index: which files are parsed, and which edits re-check which files."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from collcheck import api, index_facts
from collcheck.catalog import load_catalog
from collcheck.config import Settings

HELPER_QUIET = "def synchronize():\n    return None\n"
HELPER_BARRIER = "import torch.distributed as dist\n\n\ndef synchronize():\n    dist.barrier()\n"
TRAIN = """\
import torch.distributed as dist
from comm_utils import synchronize


def step():
    if dist.get_rank() == 0:
        synchronize()
"""


def write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def codes(folder: Path, settings: Settings) -> list[tuple[str, str, int]]:
    result = api.check_paths([folder], settings)
    assert not [file.error for file in result.files if file.error]
    return [
        (Path(finding.location.path).name, finding.code, finding.location.line)
        for file in result.files
        for finding in file.findings
    ]


def bump(path: Path, text: str) -> None:
    """Rewrite a file so that its size or modification time surely changes."""
    stat = path.stat()
    path.write_text(text)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(root=str(tmp_path), cache_dir=str(tmp_path / "cache"), jobs=1)


def test_a_helper_that_starts_communicating_rechecks_its_importer(tmp_path: Path, settings: Settings) -> None:
    project = tmp_path / "project"
    write(project, {"comm_utils.py": HELPER_QUIET, "train.py": TRAIN})
    assert codes(project, settings) == []
    bump(project / "comm_utils.py", HELPER_BARRIER)
    assert codes(project, settings) == [("train.py", "CC001", 7)]
    bump(project / "comm_utils.py", HELPER_QUIET + "\n")
    assert codes(project, settings) == []


def test_an_edit_two_files_away_rechecks_the_caller(tmp_path: Path, settings: Settings) -> None:
    project = tmp_path / "project"
    once = "import torch.distributed as dist\n\n\ndef synchronize():\n    dist.barrier()\n"
    twice = once + "    dist.barrier()\n"
    outer = "from inner import synchronize\n\n\ndef save():\n    synchronize()\n"
    train = """\
    import torch.distributed as dist
    from outer import save


    def step():
        if dist.get_rank() == 0:
            save()
        else:
            dist.barrier()
    """
    # Every file communicates before and after the edit: only the index's transitive
    # dependencies (train -> outer -> inner) can tell that train.py must be analysed again.
    write(project, {"inner.py": once, "outer.py": outer, "train.py": train})
    assert codes(project, settings) == []
    bump(project / "inner.py", twice)
    assert [code for name, code, _ in codes(project, settings) if name == "train.py"] == ["CC001"]


def test_an_edit_of_a_raising_helper_in_another_file_rechecks_the_caller(
    tmp_path: Path, settings: Settings
) -> None:
    """A helper of another file that neither communicates nor reads a rank decides, by what its
    `raise` tests, whether the caller's `except` is entered on every rank or on one alone: the
    index follows it inside such a `try`, and an edit of it checks the caller again."""
    project = tmp_path / "project"
    on_settings = """\
    def check(record, size):
        if record.size != size:
            raise ValueError("another layout")
    """
    on_own_data = """\
    def check(record, size):
        if record.checksum() != size:
            raise ValueError("a corrupt copy")
    """
    grow = """\
    import torch.distributed as dist
    from checks import check


    def grow(record, size):
        try:
            check(record, size)
        except ValueError:
            return False
        dist.barrier()
        return True
    """
    write(project, {"checks.py": on_settings, "grow.py": grow})
    assert codes(project, settings) == []
    bump(project / "checks.py", textwrap.dedent(on_own_data))
    assert codes(project, settings) == [("grow.py", "CC003", 9)]


def test_relative_import_of_a_helper_in_a_package(tmp_path: Path, settings: Settings) -> None:
    package = tmp_path / "project" / "pkg"
    write(
        package,
        {
            "__init__.py": "",
            "comm_utils.py": HELPER_BARRIER,
            "train.py": TRAIN.replace("from comm_utils", "from .comm_utils"),
        },
    )
    assert codes(package.parent, settings) == [("train.py", "CC001", 7)]


def test_an_absolute_import_through_a_namespace_folder_inside_a_package(
    tmp_path: Path, settings: Settings
) -> None:
    """PEP 420: `pkg/srt/` has no `__init__.py` but `pkg/` has one, so `pkg.srt.comm.helpers` is
    importable and the helper that communicates is followed across files."""
    package = tmp_path / "project" / "pkg"
    write(
        package,
        {
            "__init__.py": "",
            "srt/comm/helpers.py": HELPER_BARRIER,
            "srt/train.py": TRAIN.replace("from comm_utils", "from pkg.srt.comm.helpers"),
        },
    )
    assert codes(package.parent, settings) == [("train.py", "CC001", 7)]


def test_a_loose_folder_of_scripts_gets_no_dotted_names(tmp_path: Path) -> None:
    """Only a folder some package encloses is a namespace folder: scripts outside any package
    keep their bare names, and a namespace file keeps its name from its own folder too."""
    from collcheck.static.project import module_names

    write(tmp_path, {"scripts/tool.py": "", "pkg/__init__.py": "", "pkg/ns/deep/mod.py": ""})
    names = module_names([tmp_path / "scripts" / "tool.py", tmp_path / "pkg" / "ns" / "deep" / "mod.py"])
    assert [name for name, _ in names] == ["tool", "mod", "pkg.ns.deep.mod"]


def test_only_edited_files_are_read_again_for_the_index(
    tmp_path: Path, settings: Settings, facts_reads: list[str]
) -> None:
    project = tmp_path / "project"
    write(project, {"comm_utils.py": HELPER_BARRIER, "train.py": TRAIN, "quiet.py": "x = 1\n"})
    read = facts_reads
    codes(project, settings)
    assert sorted(read) == ["comm_utils.py", "quiet.py", "train.py"]
    read.clear()
    codes(project, settings)
    assert read == []  # nothing changed: the index itself is cached
    bump(project / "quiet.py", "x = 2\n")
    codes(project, settings)
    assert read == ["quiet.py"]


SELECTION = {
    "calls_collective.py": "import torch.distributed as dist\n\n\ndef f():\n    dist.barrier()\n",
    "prose.py": '"""A low barrier to entry; all_reduce is explained elsewhere."""\n\nX = 1\n',
    "foreign_receiver.py": "import functools\nimport torch.distributed\n\nY = functools.reduce(max, [1])\n",
    "calls_helper.py": "from comm_utils import synchronize\n\n\ndef g():\n    synchronize()\n",
    "names_helper_in_comment.py": "# synchronize() is called by the trainer\nZ = 3\n",
    "comm_utils.py": HELPER_BARRIER,
}


def test_the_index_selects_files_that_use_communication_as_code(tmp_path: Path) -> None:
    write(tmp_path, SELECTION)
    settings = Settings(cache=False)
    project = api._project(sorted(tmp_path.iterdir()), load_catalog().fingerprint, settings)
    selected = sorted(Path(path).name for path in project.selected)
    assert selected == ["calls_collective.py", "calls_helper.py", "comm_utils.py"]
    assert project.communicating_names == frozenset({"f", "g", "synchronize"})


def test_selection_does_not_depend_on_the_number_of_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for index in range(120):  # enough files for the index to be built by worker processes
        write(tmp_path, {f"filler_{index}.py": f"V = {index}\n"})
    write(tmp_path, SELECTION)
    files = sorted(tmp_path.iterdir())
    fingerprint = load_catalog().fingerprint
    monkeypatch.setattr(index_facts, "PARALLEL_FACTS_FROM", 100)
    serial = api._project(files, fingerprint, Settings(cache=False), jobs=1)
    parallel = api._project(files, fingerprint, Settings(cache=False), jobs=2)
    assert serial == parallel


def test_files_with_the_same_module_name_are_each_found_beside_their_importers(
    tmp_path: Path, settings: Settings
) -> None:
    # Two scripts folders (no packages), each with its own comm_utils.py: `from comm_utils import`
    # must reach the one beside the importer, whichever the module table lists for the name.
    write(tmp_path / "project" / "a", {"comm_utils.py": HELPER_QUIET, "train.py": TRAIN})
    write(tmp_path / "project" / "b", {"comm_utils.py": HELPER_BARRIER, "train.py": TRAIN})
    assert codes(tmp_path / "project", settings) == [("train.py", "CC001", 7)]
    write(tmp_path / "project" / "a", {"comm_utils.py": HELPER_BARRIER})
    write(tmp_path / "project" / "b", {"comm_utils.py": HELPER_QUIET})
    settings = Settings(root=settings.root, cache=False, jobs=1)
    found = api.check_paths([tmp_path / "project"], settings)
    paths = [f.location.path for r in found.files for f in r.findings]
    assert len(paths) == 1 and Path(paths[0]).parent.name == "a"


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_the_index_loses_no_finding_of_the_fixtures(monkeypatch: pytest.MonkeyPatch) -> None:
    """All fixtures as one run (names clash across folders): the same findings as parsing every file."""
    from collcheck.static import engine

    settings = Settings(root=str(FIXTURES), cache=False, jobs=1)

    def found() -> list[tuple[str, int, str]]:
        result = api.check_paths([FIXTURES], settings)
        return sorted((f.location.path, f.location.line, f.code) for r in result.files for f in r.findings)

    selected = found()
    monkeypatch.setattr(api, "_ruled_out", lambda project, path: False)
    monkeypatch.setattr(engine, "mentions_communication", lambda *args, **kwargs: True)
    assert selected == found()
    assert len(selected) > 90


IMPORTS = """\
import os
import torch.distributed as dist
import a.b.c
import x, y as z
from torch.distributed import all_reduce as ar, barrier
from . import sibling
from .utils import sync as s
from ..pkg.mod import thing
from listed import (
    first,
    second as other,  # a comment inside the parentheses
)
from star import *
if TYPE_CHECKING:
    from typing import Any
try:
    import json
except ImportError:
    import simplejson
"""


def test_the_index_and_the_engine_bind_imports_alike() -> None:
    """The index reads import lines from the text, the engine from the tree: one binding for both."""
    import ast

    from collcheck.static.names import module_imports
    from collcheck.static.project import _import_table

    from_text = _import_table(IMPORTS)
    assert from_text == module_imports(ast.parse(IMPORTS)).names
    assert from_text["dist"] == "torch.distributed"
    assert from_text["a"] == "a" and from_text["z"] == "y"
    assert from_text["ar"] == "torch.distributed.all_reduce"
    assert from_text["sibling"] == "sibling" and from_text["s"] == "utils.sync"
    assert from_text["thing"] == "pkg.mod.thing" and from_text["other"] == "listed.second"
    assert from_text["json"] == "json" and "*" not in from_text
    # Not compared: a name bound by two imports (the readers visit statements in different orders).


def test_two_projects_with_one_digest_keep_their_own_tables_and_loaded_modules(tmp_path: Path) -> None:
    """One process may check two projects whose digests agree (neither has a helper or value
    file) while their module tables differ (an editor, a test run): lookups and modules loaded
    as helpers must answer for the project asked, not the one met first."""
    from collcheck.static.loader import Loader, already_loaded
    from collcheck.static.module_values import complete_loaded_module
    from collcheck.static.project import Project

    helper = tmp_path / "helper.py"
    helper.write_text(HELPER_BARRIER, encoding="utf-8")
    importer = str(tmp_path / "train.py")
    first = Project(modules=(("comm", str(helper)),), digest="same")
    second = Project(modules=(("other.comm", str(helper)),), digest="same")
    assert first.lookup("comm.synchronize", importer) == (str(helper), "synchronize")
    assert second.lookup("other.comm.synchronize", importer) == (str(helper), "synchronize")
    assert second.lookup("comm.synchronize", importer) is None
    catalog = load_catalog()
    loaded = Loader(catalog, first, Settings(cache=False), complete_loaded_module).load(str(helper))
    assert loaded is not None and already_loaded(str(helper), catalog, first) is loaded
    assert already_loaded(str(helper), catalog, second) is None


def test_line_anchored_facts_are_found_at_line_starts_only() -> None:
    """The index's patterns start with a keyword or a newline, not `^`: what they find must be
    what `^` would find (the text's first line, indented imports, prose that names a keyword)."""
    from collcheck.static.project import _ASSIGNED, _column_zero_matches, _import_table, _segments

    text = (
        "def first():\n"
        '    """Copied from a import (see below) and reimport b."""\n'
        "    from .comm import (\n"
        "        sync,\n"
        "    )\n"
        "RANK = 0\n"
        "  import torch.distributed as dist\n"
        "x = 1  # from nowhere import nothing\n"
        "class Holder:\n"
        "    inner = 2\n"
    )
    starts, names = _segments(text)
    assert names[:2] == ["", "first"] and starts[1] == 0
    assert _import_table(text) == {"sync": "comm.sync", "dist": "torch.distributed"}
    assigned = {match.group(1) for _, match in _column_zero_matches(text, _ASSIGNED)}
    assert assigned == {"RANK", "x", "Holder"}


def test_whole_words_skips_words_inside_other_words() -> None:
    from collcheck.static.prefilter import whole_words, word_pattern

    text = "xall_reduce(t); all_reduce(t); _barrier(); barrier_fn(); barrier()"
    found = [(m.start(), m.group()) for m in whole_words(word_pattern({"all_reduce", "barrier"}), text)]
    assert found == [(16, "all_reduce"), (57, "barrier")]


def test_only_spaces_and_tabs_may_precede_an_import() -> None:
    """As `^[ \\t]*import` meant: a form feed or another space character is not a blank here."""
    from collcheck.static.project import _import_table

    assert _import_table("\x0cimport os\n\xa0from torch import distributed as dist\n") == {}
    assert _import_table("\t import os\n") == {"os": "os"}


def test_a_pattern_of_no_words_finds_nothing_and_ends() -> None:
    from collcheck.static.prefilter import whole_words, word_pattern

    assert list(whole_words(word_pattern([]), "all_reduce(t)")) == []


def test_module_names_normalise_paths_as_path_does(tmp_path: Path) -> None:
    from collcheck.static.project import module_names

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    inside = str(tmp_path / "pkg" / "." / "x.py")
    assert module_names([inside]) == [("pkg.x", str(tmp_path / "pkg" / "x.py"))]


def test_import_before_a_position_is_what_the_line_says() -> None:
    from collcheck.static.prefilter import _ImportBefore

    text = "from m import gather, reduce\nx.gather(y) import\n  import a; gather\nimpo\nrt gather"
    carried = _ImportBefore(text)
    for position in range(len(text) + 1):
        line = text[text.rfind("\n", 0, position) + 1 : position]
        assert carried(position) == ("import" in line), position


@pytest.mark.parametrize(
    "text",
    [
        "xall_reduce all_reduce " * 90_000,  # many matches on one 2 MB line
        "y = 1; from a import (b\n" * 80_000,  # parenthesised lists that never close
        "x import a " * 200_000,  # the keyword in prose
    ],
    ids=["trigger words on one line", "unclosed from-imports", "prose imports"],
)
def test_hostile_texts_cost_one_pass(text: str) -> None:
    """Each was a scan per match to a line's start or the text's end: 47 s for the first."""
    import time

    from collcheck.static.prefilter import trigger_pattern
    from collcheck.static.project import file_facts

    catalog = load_catalog()
    started = time.perf_counter()
    file_facts(text, trigger_pattern(catalog), index_facts.rank_words(catalog))
    assert time.perf_counter() - started < 10
