"""Receivers' classes (static/receivers.py) tested alone: object values, dispatch with subclass
overrides, factories, annotations, the calls of the file, re-exports in the project index, and
constructor arguments kept as class attributes (module_values)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from collcheck.catalog import load_catalog
from collcheck.static.interpret import Interpreter
from collcheck.static.loader import ModuleInfo, build_module
from collcheck.static.module_values import complete_module
from collcheck.static.receivers import (
    ObjectClass,
    class_named,
    factory_class,
    function_of,
    function_value,
    method_of,
    object_class,
    object_value,
    passed_class,
    writes_own_state,
)
from collcheck.static.reexports import through_reexports
from collcheck.static.symbolic import Atom, is_rank_dependent

SOURCE = """
from typing import Optional
import torch.distributed as dist
from other import Imported


class Saver:
    def save(self, t):
        dist.barrier()

    def note(self):
        self.count = 1


class LocalSaver(Saver):
    def save(self, t):
        return t


class Plain:
    def run(self):
        return None


def make() -> Saver:
    return LocalSaver()


def built():
    if dist.get_rank():
        return Plain()
    return Plain()


def mixed(flag):
    if flag:
        return Plain()
    return Saver()


def stream():
    yield Plain()


def finish(saver, t):
    saver.save(t)


def main(t):
    keep = Saver()
    finish(keep, t)
    finish(Saver(), t)


def other(t):
    finish(LocalSaver(), t)
"""


def _module(text: str = SOURCE, path: str = "m.py") -> ModuleInfo:
    return build_module(ast.parse(text), path, load_catalog())


def _annotation(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def test_object_values_name_their_file_and_class() -> None:
    module = _module()
    value = object_value(module, "Saver", "3:4", exact=True)
    assert object_class(module, value) == ObjectClass("Saver", True)
    assert object_class(module, object_value(module, "Saver", "3:4", exact=False)) == ObjectClass(
        "Saver", False
    )
    # The same class name in another file is another class.
    assert object_class(_module(path="n.py"), value) is None
    assert object_class(module, Atom("call:Saver()", "shared")) is None
    assert function_of(module, function_value(module, "finish")) is module.functions["finish"]


def test_an_override_in_a_subclass_stops_dispatch_unless_the_class_is_exact() -> None:
    module = _module()
    saver = module.classes["Saver"].methods["save"]
    assert method_of(module, ObjectClass("Saver", True), "save") is saver
    assert method_of(module, ObjectClass("Saver", False), "save") is None  # LocalSaver.save may run
    assert method_of(module, ObjectClass("Saver", False), "note") is module.classes["Saver"].methods["note"]
    assert method_of(module, ObjectClass("LocalSaver", False), "note") is not None  # inherited
    assert method_of(module, ObjectClass("Plain", False), "missing") is None


def test_annotations_name_classes_of_the_file() -> None:
    module = _module()
    imports = module.imports
    for text in ("Saver", "'Saver'", "Optional[Saver]", "Saver | None"):
        assert class_named(module, imports, _annotation(text)) == "Saver", text
    for text in ("Imported", "int", "Saver | Plain", "list[Saver]"):
        assert class_named(module, imports, _annotation(text)) is None, text


def test_factories_return_one_class() -> None:
    module = _module()
    functions = module.functions
    assert factory_class(module, module.imports, functions["make"]) == "Saver"  # as declared
    assert factory_class(module, module.imports, functions["built"]) == "Plain"
    assert factory_class(module, module.imports, functions["mixed"]) is None
    assert factory_class(module, module.imports, functions["stream"]) is None


def test_state_writes_are_stores_to_the_first_parameter() -> None:
    module = _module()
    assert writes_own_state(module.classes["Saver"].methods["note"])
    assert not writes_own_state(module.classes["Saver"].methods["save"])


def test_a_parameter_is_an_object_only_when_every_caller_agrees() -> None:
    module = _module()
    finish = module.functions["finish"]
    assert passed_class(module, module.imports, finish, "saver") is None  # main: Saver, other: LocalSaver
    agreed = _module(SOURCE.replace("finish(LocalSaver(), t)", "finish(Saver(), t)"))
    assert passed_class(agreed, agreed.imports, agreed.functions["finish"], "saver") == "Saver"
    assert passed_class(agreed, agreed.imports, agreed.functions["finish"], "t") is None  # no method of it


STAGE = """
import torch.distributed as dist


class Stage:
    def __init__(self, index, size):
        self.index = index
        self.size = size


def build():
    first = Stage(dist.get_rank(), 4)
    return first


def other():
    return Stage(index=dist.get_rank() // 2, size=4)
"""


def test_constructor_arguments_every_construction_agrees_on_are_kept() -> None:
    module = _module(STAGE)
    complete_module(module, Interpreter(module))
    attributes = module.classes["Stage"].attributes
    assert is_rank_dependent(attributes["index"])  # per-rank at both constructions
    assert "size" not in attributes  # the same on every rank: nothing to keep


def test_a_disagreeing_construction_keeps_nothing() -> None:
    module = _module(STAGE.replace("dist.get_rank() // 2", "0"))
    complete_module(module, Interpreter(module))
    assert "index" not in module.classes["Stage"].attributes


@dataclass(frozen=True)
class _Facts:
    functions: tuple[str, ...]
    imports: tuple[str, ...]


class _Resolver:
    def __init__(self, table: dict[str, tuple[str, str]]) -> None:
        self.table = table

    def called_function(self, qualified: str, folder: str) -> tuple[str, str] | None:
        return self.table.get(qualified)


def test_reexports_are_followed_to_the_defining_file() -> None:
    files = {
        "pkg/__init__.py": _Facts((), ("ops.sync_all", "ops.other")),
        "pkg/ops.py": _Facts(("sync_all",), ()),
    }
    resolver = _Resolver({"ops.sync_all": ("pkg/ops.py", "sync_all")})
    assert through_reexports(("pkg/__init__.py", "sync_all"), files, resolver) == ("pkg/ops.py", "sync_all")
    # A name the package neither defines nor imports stays where it landed.
    assert through_reexports(("pkg/__init__.py", "absent"), files, resolver) == ("pkg/__init__.py", "absent")
    cycle = {"a.py": _Facts((), ("b.f",)), "b.py": _Facts((), ("a.f",))}
    looping = _Resolver({"b.f": ("b.py", "f"), "a.f": ("a.py", "f")})
    assert through_reexports(("a.py", "f"), cycle, looping) is not None  # bounded, no endless loop
