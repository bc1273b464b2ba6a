"""A framework object's class inferred from the names used on it (collcheck/static/inferred_types.py),
and the member lists it reads (bench/class_members.py)."""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cli_support import fixture_run

from collcheck.catalog import Catalog, load_catalog
from collcheck.static import inferred_types
from collcheck.static.inferred_types import fitting_class, inferred_class, known_classes, names_used
from collcheck.static.names import ImportTable
from collcheck.static.symbolic import Atom

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "CC001"
sys.path.insert(0, str(ROOT / "bench"))

from class_members import Members, SourceTree, families  # noqa: E402


@pytest.fixture(scope="module")
def catalog():  # type: ignore[no-untyped-def]
    return load_catalog()


def test_engine_names_fit_deepspeeds_engine_alone(catalog) -> None:  # type: ignore[no-untyped-def]
    used = frozenset({"backward", "step", "global_rank", "save_checkpoint"})
    called = frozenset({"backward", "step", "save_checkpoint"})
    assert (
        fitting_class(catalog, used, called) == "deepspeed.DeepSpeedEngine"
    )  # not its PipelineEngine subclass


def test_accelerator_names_fit_the_accelerator(catalog) -> None:  # type: ignore[no-untyped-def]
    used = frozenset({"prepare", "backward", "is_main_process", "gather"})
    assert fitting_class(catalog, used, used - {"is_main_process"}) == "accelerate.Accelerator"


@pytest.mark.parametrize(
    "used",
    [
        {"backward", "global_rank", "save_checkpoint"},  # DeepSpeed's engine and Lightning's strategies
        {"to", "cuda", "eval", "state_dict", "__call__"},  # every torch module has these
        {"save_checkpoint", "world_size", "device"},  # one distinctive name only
        {"backward", "step", "save_checkpoint", "flush_metrics"},  # a name no known class has
    ],
)
def test_no_class_is_inferred_where_the_names_say_too_little(catalog, used) -> None:  # type: ignore[no-untyped-def]
    assert fitting_class(catalog, frozenset(used), frozenset(used)) is None


def test_no_class_is_inferred_from_attributes_read_alone(catalog) -> None:  # type: ignore[no-untyped-def]
    """An argparse namespace read for `output_dir`, `save_steps`, `local_rank` fits transformers'
    TrainingArguments; only a distinctive method called on the object tells a class."""
    read = frozenset({"output_dir", "local_rank", "save_steps", "logging_dir"})
    assert fitting_class(catalog, read, frozenset()) is None


def test_generic_names_are_those_of_torch_modules_and_the_widely_shared() -> None:
    known = known_classes()
    assert {"to", "cuda", "state_dict", "eval", "train", "__call__"} <= known.generic
    assert known.sharing["world_size"] > known.most  # on most of the known classes
    assert 0 < known.sharing["save_checkpoint"] <= known.most


def test_the_mark_is_read_back_for_messages() -> None:
    assert (
        inferred_class(Atom("type:deepspeed.DeepSpeedEngine@inferred:engine:9:4", "shared"))
        == "DeepSpeedEngine"
    )
    assert inferred_class(Atom("type:deepspeed.DeepSpeedEngine@9:4", "shared")) is None


def test_names_used_count_a_call_of_the_object_itself() -> None:
    function = ast.parse("def f(e, b):\n    e.backward(e(b))\n    e.step = 1\n").body[0]
    assert isinstance(function, ast.FunctionDef)
    assert names_used(function)["e"] == {"backward", "__call__", "step"}


def test_a_missing_or_malformed_member_file_infers_nothing(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / inferred_types.MEMBERS_FILE).write_text("{not json", encoding="utf-8")
    monkeypatch.setattr(inferred_types, "bundled_catalog_dir", lambda: tmp_path)
    assert known_classes.__wrapped__().classes == ()
    (tmp_path / inferred_types.MEMBERS_FILE).unlink()
    assert known_classes.__wrapped__().classes == ()


def test_the_finding_says_the_class_was_inferred() -> None:
    result = fixture_run(FIXTURES / "inferred_engine_factory_bug.py")
    messages = [finding.message for finding in result.findings]
    assert len(messages) == 1
    assert "(its class inferred from use: DeepSpeedEngine)" in messages[0]


def test_a_typed_engine_is_not_called_inferred() -> None:
    result = fixture_run(ROOT / "fixtures" / "deep" / "frameworks" / "deepspeed_engine_save_bug.py")
    assert result.findings and all("inferred" not in f.message for f in result.findings)


def test_the_generator_reads_members_bases_and_re_exports(tmp_path: Path) -> None:
    """Invented code: a base storing attributes, a subclass, a re-export from the package."""
    package = tmp_path / "kit"
    package.mkdir()
    (package / "__init__.py").write_text("from .engine import Engine, Fancy\n", encoding="utf-8")
    (package / "engine.py").write_text(
        "class Engine:\n"
        "    limit = 3\n"
        "    def __init__(self, cfg):\n        self.cfg = cfg\n"
        "    def run(self):\n        pass\n"
        "    @property\n    def rank(self):\n        return 0\n"
        "class Fancy(Engine):\n    def shine(self):\n        self.glow = 1\n",
        encoding="utf-8",
    )
    members = Members(SourceTree({"kit": package}))
    engine = members.of("kit.Engine")
    fancy = members.of("kit.Fancy")
    assert engine is not None and fancy is not None
    assert engine[0] == {"limit", "__init__", "cfg", "run", "rank"}
    assert fancy[0] == engine[0] | {"shine", "glow"}
    assert "kit.engine.Engine" in fancy[1]
    entries = families({"kit.Engine": engine, "kit.Fancy": fancy}, frozenset())
    by_name = {str(entry["names"]): entry for entry in entries}
    fancy_entry = next(e for e in entries if "kit.Fancy" in e["names"])  # type: ignore[operator]
    assert "kit.engine.Engine" in fancy_entry["ancestors"]  # type: ignore[operator]
    assert len(by_name) == 2


def test_an_object_used_as_a_process_group_is_not_taken_for_a_framework_class(catalog) -> None:  # type: ignore[no-untyped-def]
    """`group.rank()`, `group.size()`, `group.scatter(...)`: torch's ProcessGroup (read from its
    stub) fits as well as vLLM's communicators, so nothing is inferred."""
    used = frozenset({"rank", "size", "scatter", "allgather"})
    assert fitting_class(catalog, used, used) is None


def test_a_local_that_rebinds_a_parameter_is_not_inferred(catalog) -> None:  # type: ignore[no-untyped-def]
    source = (
        "def f(engine, loss, d):\n"
        "    engine = engine or make()\n"
        "    engine.backward(loss)\n    engine.step()\n    engine.save_checkpoint(d)\n"
    )
    function = ast.parse(source).body[0]
    assert isinstance(function, ast.FunctionDef)
    file = File(catalog, ImportTable())
    assert inferred_types.infer_local(file, function, "engine", "2:4") is None
    fresh = ast.parse(
        source.replace("(engine, loss, d)", "(loss, d)").replace("engine or make()", "make()")
    ).body[0]
    assert isinstance(fresh, ast.FunctionDef)
    assert inferred_types.infer_local(file, fresh, "engine", "2:4") is not None


def test_a_file_of_one_framework_has_no_object_of_another_inferred(catalog) -> None:  # type: ignore[no-untyped-def]
    """`self.buffer.dispatch/combine/destroy` in a deepspeed file fit vLLM's GroupCoordinator by
    name; the file imports deepspeed and not vllm: nothing is inferred. A file importing no
    framework (a project's own factory) or vllm itself does get the class."""
    used = frozenset({"dispatch", "combine", "destroy"})
    coordinator = "vllm.distributed.parallel_state.GroupCoordinator"
    assert fitting_class(catalog, used, used) == coordinator
    assert (
        fitting_class(catalog, used, used, ImportTable({"deepspeed": "deepspeed", "torch": "torch"})) is None
    )
    assert fitting_class(catalog, used, used, ImportTable({"torch": "torch"})) == coordinator
    assert (
        fitting_class(catalog, used, used, ImportTable({"ps": "vllm.distributed.parallel_state"}))
        == coordinator
    )


@dataclass(frozen=True)
class File:
    catalog: Catalog
    imports: ImportTable
    tree: ast.Module = field(default_factory=lambda: ast.Module(body=[], type_ignores=[]))


def test_an_engine_is_inferred_from_its_protocol_where_the_file_imports_its_framework(catalog) -> None:  # type: ignore[no-untyped-def]
    """Called (its forward) and its `backward` called: no torch module nor tensor has both, a
    DeepSpeed engine does; fewer distinctive names suffice, but only in a file importing deepspeed."""
    used = frozenset({"__call__", "backward", "step", "device"})
    called = frozenset({"backward", "step"})
    deepspeed = ImportTable({"FlopsProfiler": "deepspeed.profiling.flops_profiler.FlopsProfiler"})
    assert fitting_class(catalog, used, called, deepspeed) == "deepspeed.DeepSpeedEngine"
    assert fitting_class(catalog, used, called, ImportTable({"torch": "torch"})) is None
    assert fitting_class(catalog, used, called) is None
    # not called: a tensor's `backward` and an optimizer's `step` say nothing of an engine
    assert fitting_class(catalog, used - {"__call__"}, called, deepspeed) is None


HANDED = """
class Saver:
    def save(self, engine, folder):
        engine.save_checkpoint(folder)

    @staticmethod
    def quick(folder, engine):
        engine.save_checkpoint(folder)


def publish(engine):
    engine.save_checkpoint("p")


class Trainer:
    def __init__(self, engine, saver):
        self.engine = engine
        self.saver = saver

    def fit(self, batches, folder):
        for batch in batches:
            self.engine.backward(self.engine(batch))
            self.engine.step()
        self.saver.save(self.engine, folder)
        Saver.quick(folder, self.engine)
        publish(self.engine)
"""


@pytest.mark.parametrize("function", ["Saver.save", "Saver.quick", "publish"])
def test_a_parameter_takes_the_uses_of_what_its_callers_hand_it(catalog, function: str) -> None:  # type: ignore[no-untyped-def]
    # `self.engine` of the caller is used as an engine (backward, step); the callee's `engine` only
    # saves: the same object, so the callee's parameter is inferred from the uses of both.
    tree = ast.parse(HANDED)
    functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    node = functions[function.rpartition(".")[2]]
    file = File(catalog, ImportTable({}), tree)
    engine = next(arg for arg in node.args.args if arg.arg == "engine")
    assert inferred_types.handed_uses(file, node, "engine")[1] >= {"backward", "step"}
    assert inferred_class(inferred_types.infer_parameter(file, node, engine)) == "DeepSpeedEngine"
