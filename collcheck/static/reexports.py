"""Re-exports: `from pkg import f` where `pkg/__init__.py` does not define `f` but imports it.

In: where a called name first lands (a file of the run and a name in it), each file's facts (its
top-level functions, the qualified names it imports) and the resolver of the run's names. Out:
the file and function where `f` is defined, found through at most `MAX_REEXPORTS` packages that
import it under the same name (`from .ops import f`). The engine follows the same chain through
its module models (`model.remote_function`); the project index (`project._resolved_calls`) uses
this one, so that the caller is selected as communicating and its verdict depends on the file
that defines `f` (cache digests, partial runs).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Protocol

MAX_REEXPORTS = 4


class Facts(Protocol):
    """What is read of a file's facts (`project.FileFacts`)."""

    @property
    def functions(self) -> tuple[str, ...]: ...

    @property
    def imports(self) -> tuple[str, ...]: ...


class Resolving(Protocol):
    def called_function(self, qualified: str, folder: str) -> tuple[str, str] | None: ...


def through_reexports(
    found: tuple[str, str] | None, files: Mapping[str, Facts], resolver: Resolving
) -> tuple[str, str] | None:
    """(path, name) where the function a call landed on is defined (see the module docstring)."""
    for _ in range(MAX_REEXPORTS):
        if found is None:
            return None
        path, name = found
        facts = files.get(path)
        if facts is None or name in facts.functions:
            return found
        source = next((q for q in facts.imports if q.rpartition(".")[2] == name and "." in q), None)
        if source is None:
            return found
        found = resolver.called_function(source, os.path.dirname(path))
    return found
