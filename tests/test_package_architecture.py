"""The whole collcheck package has no import circle, counting imports inside functions too; the
static analyzer knows no rule.

tests/test_static_architecture.py checks the stages of collcheck/static/ among themselves; this
checks every module of collcheck/ (static/, runtime/, memory/, adopt/, report/, checks/ and the
top level) against every other. An import made inside a function to defer its cost is still a
dependency: two modules that import each other that way are one module split in two.

Rule policy (which rule a divergence becomes, how its message names ranks, which finding one root
cause explains) lives in the rules and in collcheck.classify, the layer above collcheck.static and
collcheck.checks: no module of collcheck/static names a rule code or imports the rules or
collcheck.classify. The engine calls the `static.rulebook.Rulebook` that collcheck.api hands it
(docs/architecture.md, "Rules own their logic").
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "collcheck"


def module_names(root: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module and package of the tree at `root`."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _longest_known(name: str, known: Iterable[str]) -> str | None:
    modules = set(known)
    parts = name.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts) if parts else None


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of the tree that module `name` imports, at the top, inside functions or under
    `TYPE_CHECKING`; `from package import module` counts as importing that module."""
    top = name.split(".")[0]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                above = package[: len(package) - node.level + 1]
                base = ".".join([*above, base] if base else above)
            if base.split(".")[0] != top:
                continue
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.add(target if target in known else _longest_known(base, known) or base)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == top:
                    found.add(_longest_known(alias.name, known) or alias.name)
    return (found & set(known)) - {name}


def import_circle(root: Path) -> list[str] | None:
    """One import circle among the modules under `root` (first module repeated last), or None."""
    known = module_names(root)
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    done: set[str] = set()

    def visit(name: str, stack: list[str]) -> list[str] | None:
        if name in stack:
            return [*stack[stack.index(name) :], name]
        if name in done:
            return None
        for imported in sorted(graph[name]):
            circle = visit(imported, [*stack, name])
            if circle is not None:
                return circle
        done.add(name)
        return None

    for name in sorted(graph):
        circle = visit(name, [])
        if circle is not None:
            return circle
    return None


def test_no_import_circle_in_the_package() -> None:
    circle = import_circle(PACKAGE)
    assert circle is None, " -> ".join(circle or ())


def test_the_check_sees_a_circle_through_an_import_inside_a_function(tmp_path: Path) -> None:
    """It cannot pass vacuously: a circle closed by a deferred import, through a sub-package and a
    relative import, is found; the same modules without it are not a circle."""
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("", encoding="utf-8")
    (root / "sub" / "__init__.py").write_text("", encoding="utf-8")
    (root / "a.py").write_text("from pkg.sub import b\n", encoding="utf-8")
    (root / "sub" / "b.py").write_text("from .c import thing\n", encoding="utf-8")
    (root / "sub" / "c.py").write_text("thing = 1\n", encoding="utf-8")
    assert import_circle(root) is None
    (root / "sub" / "c.py").write_text("def thing():\n    import pkg.a\n", encoding="utf-8")
    assert import_circle(root) == ["pkg.a", "pkg.sub.b", "pkg.sub.c", "pkg.a"]


RULE_CODE = re.compile(r"\bCC\d{3}\b")


def rule_codes_named(root: Path) -> list[str]:
    """`file:line` of every rule code written under `root`: in code, strings, docstrings or comments."""
    return [
        f"{path.relative_to(root.parent)}:{number}"
        for path in sorted(root.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if RULE_CODE.search(line)
    ]


def rule_imports(root: Path) -> dict[str, set[str]]:
    """The modules under `root` that import the rules or the classification layer, and which."""
    known = module_names(root)
    rules = ("collcheck.checks", "collcheck.classify")
    found = {}
    for name, path in known.items():
        if not name.startswith("collcheck.static"):
            continue
        imported = {
            target for target in imports_of(name, path, known) if target.startswith(rules) or target in rules
        }
        if imported:
            found[name] = imported
    return found


def test_no_module_of_the_static_analyzer_names_a_rule() -> None:
    assert rule_codes_named(PACKAGE / "static") == []


def test_the_static_analyzer_imports_neither_the_rules_nor_classify() -> None:
    """The engine is handed the rules (a `Rulebook`); no module of collcheck/static imports them."""
    assert rule_imports(PACKAGE) == {}


# What a counterexample shows, in words: the model's values, and what each splitting condition
# reads on each rank (`Reason.ranks[i].reads`).
SHOWN_WORDS = re.compile(r"\.model\.values|shown_values|\.reads\b")


def test_no_rule_reads_the_values_a_counterexample_shows() -> None:
    """Rules read a divergence's typed values (`trips`, `argument`, `process_reads`, `per_process`,
    `reads_global_rank`), not the words keyed by rank that a counterexample shows (`model.values`,
    `shown_values()`, a condition's `reads`)."""
    readers = [
        path.name
        for path in sorted((PACKAGE / "checks").glob("*.py"))
        if SHOWN_WORDS.search(path.read_text(encoding="utf-8"))
    ]
    assert readers == []
    assert SHOWN_WORDS.search("for name, _ in item.reads") and not SHOWN_WORDS.search("d.process_reads")


def test_the_rule_checks_see_a_code_and_an_import(tmp_path: Path) -> None:
    """They cannot pass vacuously: a code in a comment and an import of the rules are found."""
    root = tmp_path / "collcheck"
    (root / "static").mkdir(parents=True)
    (root / "checks").mkdir()
    for init in (root / "__init__.py", root / "static" / "__init__.py", root / "checks" / "__init__.py"):
        init.write_text("", encoding="utf-8")
    (root / "classify.py").write_text("", encoding="utf-8")
    (root / "static" / "solve.py").write_text("x = 1\n", encoding="utf-8")
    (root / "static" / "engine.py").write_text("from collcheck import classify\n", encoding="utf-8")
    assert rule_codes_named(root / "static") == []
    assert rule_imports(root) == {"collcheck.static.engine": {"collcheck.classify"}}
    (root / "static" / "solve.py").write_text("x = 1  # as CC003 reports it\n", encoding="utf-8")
    (root / "static" / "engine.py").write_text("from collcheck.checks import x\n", encoding="utf-8")
    assert rule_codes_named(root / "static") == ["static/solve.py:1"]
    assert rule_imports(root) == {"collcheck.static.engine": {"collcheck.checks"}}
