"""Imports read off a file's text (collcheck.import_scan), as the summaries of installed packages
follow them."""

from __future__ import annotations

import time

from collcheck.import_scan import imported_names

TEXT = b"""
import a.b as c, d
from e.f import g, h as i  # comment
from . import sibling
from ..up import (
    one,  # first
    two,
)
if True:
    from .x.y import *
text = "import not_at_line_start"
"""


def test_forms() -> None:
    found = imported_names(TEXT, "pkg.sub")
    assert {"a.b", "d", "e.f", "e.f.g", "e.f.h", "pkg.sub", "pkg.sub.sibling"} <= found
    assert {"pkg.up", "pkg.up.one", "pkg.up.two", "pkg.sub.x.y"} <= found
    assert "not_at_line_start" not in found and "c" not in found and "i" not in found


def test_relative_imports_without_a_package_are_left_out() -> None:
    found = imported_names(TEXT, None)
    assert not any(name.startswith(("pkg", ".")) for name in found)
    assert imported_names(b"from ... import x\n", "a") == set()  # above the top: not resolvable


def test_hostile_texts_stay_linear() -> None:
    texts = [
        b"from " + b"." * 2_000_000 + b" import x\n",
        b"import " + b"a," * 1_000_000 + b"\n",
        b"from m import (" + b"x, " * 500_000,  # never closed
        b"from m import (\n" * 200_000,  # each line a list that never closes
    ]
    for text in texts:
        started = time.perf_counter()
        imported_names(text, "pkg")
        assert time.perf_counter() - started < 5
