"""Stage `project`: the run's index built from text alone — each file's facts (`file_facts` ->
`FileFacts`) and the fixed point over them (`build_project` -> `Project`): the functions that may
communicate or compute a rank, the files worth parsing, where names land, what a file depends on.
(On-disk runs, caching and the scanners' edge cases are in tests/test_project_index.py.)"""

from __future__ import annotations

from collcheck import index_facts
from collcheck.static.prefilter import trigger_pattern
from collcheck.static.project import (
    FileFacts,
    Project,
    build_project,
    file_facts,
    index_key,
    read_digest,
    unreadable_facts,
)
from collcheck.static.reads import recording

from .conftest import catalog

COMM = """\
import torch.distributed as dist
LEVEL = 3
def synchronize():
    dist.barrier()
def rank_of():
    return dist.get_rank()
def quiet():
    return 1
"""
TRAIN = """\
from comm import synchronize, LEVEL
import comm
def step():
    synchronize()
def other():
    comm.rank_of()
def idle():
    print(LEVEL)
"""
LONE = "def f():\n    return 2\n"
MODULES = (("comm", "/p/comm.py"), ("train", "/p/train.py"), ("lone", "/p/lone.py"))


def facts(text: str) -> FileFacts:
    return file_facts(text, trigger_pattern(catalog()), index_facts.rank_words(catalog()))


def project(comm: str = COMM, lone: str = LONE) -> Project:
    files = {"/p/comm.py": facts(comm), "/p/train.py": facts(TRAIN), "/p/lone.py": facts(lone)}
    return build_project(files, MODULES)


def test_a_files_facts_name_its_communicating_and_rank_reading_functions() -> None:
    found = facts(COMM)
    assert found.readable and found.triggered
    assert found.hits == ("synchronize",) and found.rank_hits == ("rank_of",)
    assert found.assigned == ("LEVEL",) and found.functions == ("quiet", "rank_of", "synchronize")
    assert dict((name, calls) for name, calls, _ in found.references)["synchronize"] == (
        "torch.distributed",
        "torch.distributed.barrier",
    )
    importer = facts(TRAIN)
    assert not importer.triggered and importer.hits == ()
    assert set(importer.imports) == {"comm", "comm.synchronize", "comm.LEVEL"}
    assert facts(LONE).digest != facts(LONE + "\n").digest


def test_a_backward_in_a_docstring_is_no_hit() -> None:
    """`.backward()` quoted in prose, in a file that names a distributed library, neither triggers the
    file nor makes its function a hit; the call in code does."""
    prose = 'import torch.distributed as dist\n\n\ndef train(loss):\n    """Then `loss.backward()`."""\n'
    assert not facts(prose).triggered
    assert facts(prose + "    loss.backward()\n").triggered


def test_the_fixed_point_follows_calls_across_files() -> None:
    index = project()
    assert index.communicating_names == {"synchronize", "step"}  # `step` calls it from train.py
    assert index.rank_names == {"rank_of", "other"}
    assert index.selected == {"/p/comm.py", "/p/train.py"}  # lone.py names nothing that communicates
    assert index.may_follow("synchronize") and index.may_follow("rank_of") and not index.may_follow("quiet")


def test_names_land_in_files_of_the_run() -> None:
    index = project()
    assert index.lookup("comm.synchronize", "/p/train.py") == ("/p/comm.py", "synchronize")
    assert index.lookup("os.path.join", "/p/train.py") is None
    assert index.indexed("/p/comm.py")


def test_an_answer_is_served_again_while_the_files_it_read_are_unchanged() -> None:
    """`still_reads` compares the files an answer read (reads.py) with this run's digests: an
    edit of one of them, or a file the index does not hold, makes the answer stale."""
    before = project()
    comm = {"/p/comm.py": facts(COMM).digest}
    assert before.still_reads(comm) and before.still_reads({})
    edited = COMM.replace("dist.barrier()", "dist.barrier()\n    dist.barrier()")
    assert not project(comm=edited).still_reads(comm)
    assert project(lone=LONE + "# edited\n").still_reads(comm)  # lone.py was not read
    assert not before.still_reads({"/p/gone.py": facts(LONE).digest})
    assert not before.still_reads({"/p/gone.py": read_digest(before, "/p/gone.py")})


def test_a_star_import_is_recorded_as_a_module_the_file_imports() -> None:
    """`from consts import *` binds names the index cannot list: the facts keep the module (found
    beside the importer too), so a partial run indexes it (`files_reached`)."""
    assert facts("from consts import *\n").star_imports == ("consts",)
    assert facts("from .consts import *\n").star_imports == ("consts",)


def test_the_index_key_changes_with_the_names_only() -> None:
    """What every answer may read of the index as a whole, not of a file it opened or a name it
    looked up: which names communicate (or read a rank, or raise)."""
    before = index_key(project())
    assert index_key(project(lone=LONE + "# edited\n")) == before
    assert index_key(project(comm=COMM + "# edited\n")) == before
    communicating = LONE + "import torch.distributed as dist\ndef g():\n    dist.barrier()\n"
    assert index_key(project(lone=communicating)) != before
    files = {"/p/comm.py": facts(COMM), "/p/train.py": facts(TRAIN), "/p/lone.py": facts(LONE)}
    files["/p/new.py"] = facts(LONE)
    assert index_key(build_project(files, (*MODULES, ("new", "/p/new.py")))) == before


def test_a_lookup_is_read_where_it_landed() -> None:
    """A name looked up (`Project.lookup`) is recorded with where it landed; a file added where
    it would land now makes the answer stale, one added elsewhere does not."""
    before = project()
    with recording() as reads:
        assert before.lookup("helpers.sync", "/p/train.py") is None
        assert before.lookup("comm.synchronize", "/p/train.py") == ("/p/comm.py", "synchronize")
    assert len(reads) == 2 and before.still_reads(reads)
    files = {"/p/comm.py": facts(COMM), "/p/train.py": facts(TRAIN), "/p/lone.py": facts(LONE)}
    elsewhere = build_project({**files, "/q/helpers.py": facts(LONE)}, (*MODULES, ("x", "/q/helpers.py")))
    assert elsewhere.still_reads(reads)
    landing = build_project({**files, "/p/helpers.py": facts(LONE)}, (*MODULES, ("helpers", "/p/helpers.py")))
    assert not landing.still_reads(reads)


def test_an_unreadable_file_is_selected_so_the_engine_reports_why() -> None:
    files = {"/p/comm.py": facts(COMM), "/p/bad.py": unreadable_facts()}
    index = build_project(files, (("comm", "/p/comm.py"), ("bad", "/p/bad.py")))
    assert "/p/bad.py" in index.selected
