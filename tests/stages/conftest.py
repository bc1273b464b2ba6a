"""A small shared factory for the per-stage unit tests: parse a snippet, model it, build the
minimum context one stage needs (a frame, a state, an interpreter), and read what it gave.

Each test file of this folder drives ONE stage of `collcheck/static/` through its public entry
point and asserts the dataclasses and Enums it returns, not the findings of the whole pipeline.
"""

from __future__ import annotations

import ast
import textwrap

from collcheck.catalog import Catalog, load_catalog
from collcheck.static.interpret import Interpreter
from collcheck.static.loader import FunctionNode, ModuleInfo, build_module
from collcheck.static.module_values import complete_module
from collcheck.static.program import CommEvent, Element, Path, Region
from collcheck.static.state import Frame

PREAMBLE = "import os\nimport torch\nimport torch.distributed as dist\n"


def catalog() -> Catalog:
    return load_catalog()  # cached by the catalog module: cheap after the first test


def source_of(body: str, preamble: bool = True) -> str:
    """`body` dedented, after the usual imports (`dist`, `torch`, `os`) unless `preamble` is False."""
    return (PREAMBLE if preamble else "") + textwrap.dedent(body)


def module_of(body: str, preamble: bool = True, complete: bool = False, path: str = "m.py") -> ModuleInfo:
    """The module model of a snippet (`loader.build_module`); `complete`: with its globals and class
    attributes filled as the engine does (`module_values.complete_module`)."""
    text = source_of(body, preamble)
    module = build_module(ast.parse(text), path, catalog(), text=text)
    if complete:
        complete_module(module, Interpreter(module))
    return module


def interpreter_of(body: str, preamble: bool = True) -> Interpreter:
    """An interpreter over a completed module model of the snippet."""
    module = module_of(body, preamble, complete=True)
    return Interpreter(module)


def function(module: ModuleInfo, qualname: str) -> FunctionNode:
    """A top-level function (`f`) or a method (`Cls.m`) of the module."""
    if "." in qualname:
        class_name, name = qualname.split(".", 1)
        return module.classes[class_name].methods[name]
    return module.functions[qualname]


def regions_of(body: str, qualname: str = "f", preamble: bool = True) -> list[Region]:
    """The regions of one function run as a root (`Interpreter.run_function`)."""
    interpreter = interpreter_of(body, preamble)
    class_name = qualname.split(".", 1)[0] if "." in qualname else None
    return interpreter.run_function(function(interpreter.module, qualname), class_name, qualname)


def ops(path: Path) -> tuple[str, ...]:
    """The ops of a path's events, loops as `loop[...]`."""
    return tuple(event.op for event in path.events)


def op_sequences(region: Region) -> set[tuple[str, ...]]:
    return {ops(path) for path in region.paths}


def comm_events(elements: tuple[Element, ...]) -> list[CommEvent]:
    return [e for e in elements if isinstance(e, CommEvent)]


def expr(text: str) -> ast.expr:
    return ast.parse(textwrap.dedent(text).strip(), mode="eval").body


def call(text: str) -> ast.Call:
    node = expr(text)
    assert isinstance(node, ast.Call)
    return node


def statement(text: str) -> ast.stmt:
    return ast.parse(textwrap.dedent(text)).body[0]


def frame(name: str = "f", class_name: str | None = None, node: FunctionNode | None = None) -> Frame:
    """The frame of a root function (no callers); `node`: the function on its stack."""
    return Frame(name, class_name, (), 0, (node,) if node is not None else ())


def line_of(body: str, fragment: str, preamble: bool = True) -> int:
    """The line (1-based, in the source `source_of` builds) of the first line holding `fragment`."""
    for number, line in enumerate(source_of(body, preamble).splitlines(), start=1):
        if fragment in line:
            return number
    raise AssertionError(f"{fragment!r} is not in the snippet")
