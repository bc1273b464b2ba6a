"""raises.py: which class a `raise` names, whether a handler catches it, which tests of a path to a
`raise` read data."""

from __future__ import annotations

import ast

import pytest

from collcheck.static.raises import catches, data_tests, raised_class
from collcheck.static.symbolic import Atom, Compare, Const


def _raise(text: str) -> ast.Raise:
    node = ast.parse(text).body[0]
    assert isinstance(node, ast.Raise)
    return node


def _handler(text: str) -> ast.ExceptHandler:
    node = ast.parse(f"try:\n    pass\n{text}\n    pass\n").body[0]
    assert isinstance(node, ast.Try)
    return node.handlers[0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("raise ValueError('bad')", "ValueError"),
        ("raise errors.Invalid('bad')", "Invalid"),
        ("raise KeyError", "KeyError"),
        ("raise error", ""),  # a value: its class is not written
        ("raise", ""),  # a re-raise of whatever was caught
    ],
)
def test_the_class_a_raise_names(text: str, expected: str) -> None:
    assert raised_class(_raise(text), {}) == expected


@pytest.mark.parametrize(
    ("clause", "raised", "expected"),
    [
        ("except ValueError:", "ValueError", True),
        ("except OSError:", "FileNotFoundError", True),  # a built-in subclass
        ("except ValueError:", "RuntimeError", False),
        ("except (KeyError, IndexError):", "TypeError", False),
        ("except ValueError:", "BadShape", True),  # derives from ValueError in this module
        ("except KeyError:", "BadShape", False),
        ("except ValueError:", "Foreign", True),  # another file's class: it may derive from it
        ("except ValueError:", "", True),  # a class the statement does not say
        ("except:", "RuntimeError", True),
    ],
)
def test_what_a_handler_catches(clause: str, raised: str, expected: bool) -> None:
    assert catches(_handler(clause), raised, {"BadShape": ["ValueError"]}) is expected


def test_tests_that_read_data() -> None:
    module_names = {"platform", "self"}.__contains__
    contents = Compare("<", Atom("call:sample.sum()", "shared"), Const(0))
    loop_item = Compare("==", Atom("item@3:4", "shared"), Const(1))
    setting = Compare("==", Atom("env:MODE", "shared"), Const("pinned"))
    capability = Atom("call:platform.supports(9)", "shared")
    plain = Atom("call:isinstance(group, Group)", "shared")
    conds = (contents, loop_item, setting, capability, plain)
    assert data_tests(conds, module_names) == (contents, loop_item)
