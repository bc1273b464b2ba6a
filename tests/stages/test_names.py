"""Stage `names`: import tables and qualified names, without importing anything."""

from __future__ import annotations

import ast

from collcheck.static.names import (
    ImportTable,
    child_nodes,
    dotted,
    imported_modules,
    module_imports,
    qualified_name,
    resolve_relative,
)

from .conftest import expr


def table(text: str, package: str = "") -> ImportTable:
    return module_imports(ast.parse(text), package)


def test_aliases_and_from_imports_bind_qualified_names() -> None:
    imports = table(
        "import torch.distributed as dist\n"
        "import os.path\n"
        "from torch.distributed import all_reduce as ar, barrier\n"
    )
    assert imports.lookup("dist") == "torch.distributed"
    assert imports.lookup("os") == "os"  # `import os.path` binds `os`
    assert imports.lookup("ar") == "torch.distributed.all_reduce"
    assert imports.lookup("barrier") == "torch.distributed.barrier"
    assert imports.lookup("path") is None


def test_imports_nested_in_module_level_blocks_count_but_not_those_in_functions() -> None:
    imports = table(
        "try:\n    import deepspeed as ds\nexcept ImportError:\n    import json\n"
        "if True:\n    from a import b\n"
        "def f():\n    import secret\n"
    )
    assert imports.lookup("ds") == "deepspeed"
    assert imports.lookup("json") == "json"
    assert imports.lookup("b") == "a.b"
    assert imports.lookup("secret") is None


def test_a_function_scope_shadows_the_module_scope() -> None:
    outer = table("import torch.distributed as dist\n")
    inner = outer.child()
    inner.names["dist"] = "deepspeed.comm"
    assert inner.lookup("dist") == "deepspeed.comm"
    assert outer.lookup("dist") == "torch.distributed"
    assert inner.lookup("missing") is None


def test_relative_imports_resolve_against_the_package() -> None:
    assert resolve_relative("comm", 1, "pkg.sub") == "pkg.sub.comm"
    assert resolve_relative("comm", 2, "pkg.sub") == "pkg.comm"
    assert resolve_relative(None, 1, "pkg") == "pkg"
    assert resolve_relative("abs", 0, "pkg") == "abs"
    assert table("from .utils import sync\n", "pkg.train").lookup("sync") == "pkg.train.utils.sync"


def test_qualified_names_of_dotted_expressions() -> None:
    imports = table("import torch.distributed as dist\n")
    assert dotted(expr("a.b.c")) == ["a", "b", "c"]
    assert dotted(expr("f().b")) is None
    assert qualified_name(expr("dist.all_reduce"), imports) == "torch.distributed.all_reduce"
    assert qualified_name(expr("local.all_reduce"), imports) is None  # the head is no import


IMPORTS_EVERYWHERE = """
import a.top
try:
    import b.tried
except ImportError:
    from c.handled import one
else:
    import d.otherwise
finally:
    import e.lastly
class Model:
    import f.in_class
    def method(self):
        with open(path) as stream:
            for item in stream:
                while item:
                    if item:
                        import g.deep
                    else:
                        from h.branch import two as renamed
match value:
    case 1:
        import i.case
async def run():
    async with lock:
        import j.awaited
from .relative import skipped
"""


def test_imported_modules_finds_every_import_that_a_full_walk_finds() -> None:
    tree = ast.parse(IMPORTS_EVERYWHERE)
    walked: set[str] = set()
    for node in ast.walk(tree):  # what the statement walk must agree with
        if isinstance(node, ast.Import):
            walked.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            walked.add(node.module)
            walked.update(f"{node.module}.{alias.name}" for alias in node.names)
    found = imported_modules(tree)
    assert found == walked
    assert {"g.deep", "h.branch.two", "i.case", "j.awaited", "c.handled.one", "e.lastly"} <= found


def test_child_nodes_are_what_iter_child_nodes_yields_in_its_order() -> None:
    tree = ast.parse(IMPORTS_EVERYWHERE + "x: int = f(a, *b, k=c, **d)[1:2].e if g else lambda h: h\n")
    for node in ast.walk(tree):
        assert child_nodes(node) == list(ast.iter_child_nodes(node))
