"""Stage `project`: the run's index built from text alone — each file's facts (`file_facts` ->
`FileFacts`) and the fixed point over them (`build_project` -> `Project`): the functions that may
communicate or compute a rank, the files worth parsing, where names land, what a file depends on.
(On-disk runs, caching and the scanners' edge cases are in tests/test_project_index.py.)"""

from __future__ import annotations

from collcheck import index_facts
from collcheck.static.prefilter import trigger_pattern
from collcheck.static.project import FileFacts, Project, build_project, file_facts, unreadable_facts

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


def test_a_files_dependency_digest_changes_with_the_files_it_reaches_only() -> None:
    before = project()
    digest = before.dependency_digest("/p/train.py")
    assert digest
    edited_helper = COMM.replace("dist.barrier()", "dist.barrier()\n    dist.barrier()")
    assert project(comm=edited_helper).dependency_digest("/p/train.py") != digest
    assert project(lone=LONE + "# edited\n").dependency_digest("/p/train.py") == digest


def test_a_star_import_is_an_edge_to_the_module_it_reads() -> None:
    """`from consts import *` binds names the index cannot list: the whole module is a value source,
    so an edit of it re-checks the importer (its cached verdict may read those names)."""
    user = "from consts import *\nimport torch.distributed as dist\ndef f():\n    if LEVEL:\n"
    user += "        dist.barrier()\n"
    modules = (*MODULES, ("consts", "/p/consts.py"), ("user", "/p/user.py"))

    def digest(consts: str) -> str:
        files = {
            "/p/comm.py": facts(COMM),
            "/p/train.py": facts(TRAIN),
            "/p/lone.py": facts(LONE),
            "/p/consts.py": facts(consts),
            "/p/user.py": facts(user),
        }
        return build_project(files, modules).dependency_digest("/p/user.py")

    assert facts(user).star_imports == ("consts",)
    before = digest("LEVEL = 0\n")
    assert before and digest("LEVEL = 1\n") != before
    assert facts("from .consts import *\n").star_imports == ("consts",)  # found beside the importer


def test_a_files_dependency_digest_changes_with_what_the_classes_it_calls_declare() -> None:
    """A class or function of another file called here (no helper: it names no collective) may
    decide an `is None` test on what it made (declared_types.made_never_none): an edit of its
    file re-checks this one; what that file calls in turn does not."""
    stores = "class Store:\n    pass\ndef open_store() -> Store:\n    return Store()\n"
    train = TRAIN + "def load():\n    from stores import open_store\n    return open_store()\n"
    modules = (*MODULES, ("stores", "/p/stores.py"))

    def digest(stores_text: str, lone_text: str = LONE) -> str:
        files = {
            "/p/comm.py": facts(COMM),
            "/p/train.py": facts(train),
            "/p/lone.py": facts(lone_text),
            "/p/stores.py": facts(stores_text + "import lone\nlone.f()\n"),
        }
        return build_project(files, modules).dependency_digest("/p/train.py")

    before = digest(stores)
    assert digest(stores.replace("-> Store", "-> Optional[Store]")) != before
    assert digest(stores, LONE + "# edited\n") == before  # what stores.py calls: not this file's


def test_an_unreadable_file_is_selected_so_the_engine_reports_why() -> None:
    files = {"/p/comm.py": facts(COMM), "/p/bad.py": unreadable_facts()}
    index = build_project(files, (("comm", "/p/comm.py"), ("bad", "/p/bad.py")))
    assert "/p/bad.py" in index.selected
