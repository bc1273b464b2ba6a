"""Stage `loader`: a parsed module -> its model (`build_module` -> `ModuleInfo`, `ClassInfo`),
and other files of the run modelled on demand (`Loader.load`, `remote_function`)."""

from __future__ import annotations

import ast
from pathlib import Path

from collcheck.config import Settings
from collcheck.findings import FileError
from collcheck.source import SourceFile
from collcheck.static.loader import Loader, ModuleInfo, build_module, module_body, parse, remote_function
from collcheck.static.module_values import complete_loaded_module
from collcheck.static.project import Project
from collcheck.static.symbolic import Const

from .conftest import catalog, module_of, source_of

SNIPPET = """
import torch.multiprocessing as mp
class Base:
    LEADER = -1
    NAME = "base"
    def forward(self, t):
        dist.all_reduce(t)
    @property
    def size(self):
        return 2
class Child(Base):
    def run(self, t):
        return self.size
def direct(t):
    dist.barrier()
def through(t):
    direct(t)
def handed(t):
    apply(direct, t)
def builds():
    model = Base()
    return model(1)
def quiet(x):
    return x + 1
def main(gpu):
    pass
mp.spawn(main, nprocs=2)
if __name__ == "__main__":
    main(0)
"""


def names(functions: set[ast.FunctionDef | ast.AsyncFunctionDef]) -> set[str]:
    return {function.name for function in functions}


def test_the_model_holds_the_files_functions_and_classes() -> None:
    module = module_of(SNIPPET)
    assert isinstance(module, ModuleInfo) and module.loader is None and module.project is None
    assert set(module.functions) == {"direct", "through", "handed", "builds", "quiet", "main"}
    base, child = module.classes["Base"], module.classes["Child"]
    assert set(base.methods) == {"forward", "size"} and set(base.properties) == {"size"}
    assert child.bases == ["Base"]
    assert base.attributes == {"LEADER": Const(-1), "NAME": Const("base")}  # class-body literals
    assert module.globals == {}  # filled by module_values, not by the model


def test_communicating_functions_are_a_fixed_point_over_the_files_calls() -> None:
    module = module_of(SNIPPET)
    # `handed` hands `direct` to unknown code, which may call it (calls.py makes it a callback):
    # walked or read from its words, it reaches the collective.
    tree = ast.parse(source_of(SNIPPET))
    walked = names(build_module(tree, "m.py", catalog()).communicating)
    assert walked == {"forward", "direct", "through", "handed", "builds"}
    assert names(module.communicating) == walked


THREADS = """
import threading
import multiprocessing
def work(t):
    dist.all_reduce(t)
def in_a_thread(t):
    threading.Thread(target=work, args=(t,)).start()
def in_a_process(t):
    multiprocessing.Process(target=work, args=(t,)).start()
"""


def test_a_thread_target_reaches_its_collectives_and_a_process_target_does_not() -> None:
    # Walked (as when another file of the project names `work`, so the words do not settle it):
    # a thread of this process runs `work`; a new process runs it elsewhere.
    tree = ast.parse(source_of(THREADS))
    walked = names(build_module(tree, "m.py", catalog()).communicating)
    assert walked == {"work", "in_a_thread"}


def test_launched_functions_and_the_main_guard() -> None:
    module = module_of(SNIPPET)
    assert {function.name: value for function, value in module.launched.items()} == {"main": "local_rank"}
    setup, main = module_body(module.tree)
    assert len(main) == 1 and isinstance(main[0], ast.If)
    assert all(not isinstance(node, (ast.FunctionDef, ast.ClassDef)) for node in setup)


def test_a_file_that_does_not_parse_is_a_file_error() -> None:
    error = parse(SourceFile("bad.py", "def f(:\n"))
    assert isinstance(error, FileError) and error.message.startswith("syntax error") and error.line == 1
    assert isinstance(parse(SourceFile("ok.py", "x = 1\n")), ast.Module)


def test_another_file_of_the_run_is_loaded_once_and_its_communicating_helper_found(tmp_path: Path) -> None:
    helper = tmp_path / "comm.py"
    helper.write_text("import torch.distributed as dist\nWORLD = 4\ndef synchronize():\n    dist.barrier()\n")
    project = Project(modules=(("comm", str(helper)),), communicating_names=frozenset({"synchronize"}))
    loader = Loader(catalog(), project, Settings(cache=False), complete_loaded_module)
    text = "from comm import synchronize\ndef f():\n    synchronize()\n"
    importer = build_module(ast.parse(text), str(tmp_path / "train.py"), catalog(), loader, text)
    found = remote_function(importer, "comm.synchronize")
    assert found is not None
    other, function = found
    assert function.name == "synchronize" and other.path == str(helper)
    assert other.globals["WORLD"] == Const(4)  # completed by the function the loader was handed
    assert loader.load(str(helper)) is other  # once per process
    assert remote_function(importer, "comm.missing") is None
    # the importer's function reaches the other file's collective
    assert names(importer.communicating) == {"f"}
