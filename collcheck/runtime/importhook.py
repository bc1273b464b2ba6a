"""A loader that runs a module as usual, then hands it to a patch function (post-import hook).

Used to patch `distributed_c10d` and communicator modules as they are imported, without
importing them first. Cheap to import: the runtime's bootstrap loads it at interpreter start.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
from collections.abc import Callable
from types import ModuleType
from typing import Any


class PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: Any, patch: Callable[[ModuleType], None]) -> None:
        self._inner = inner
        self._patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._patch(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... for tracebacks
        return getattr(self._inner, name)
