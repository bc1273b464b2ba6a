"""Switch the tracer on from environment variables, without importing torch.

Imported by the `sitecustomize` that `collcheck run` puts first on PYTHONPATH. It waits for
`torch.distributed.distributed_c10d` to be imported (an import hook, so torch is never imported by
collcheck into a process that does not use it) and wraps `init_process_group`, starting the tracer
once the default process group exists, and `destroy_process_group`, stopping it first.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from collcheck.runtime.importhook import PatchingLoader

C10D_MODULE = "torch.distributed.distributed_c10d"
ELASTIC_MODULE = "torch.distributed.elastic.multiprocessing.api"  # exits.ELASTIC_MODULE
_WRAPPED = "__collcheck_wrapped__"


def arm() -> None:
    """Start tracing after `init_process_group` in this process (idempotent)."""
    elastic = sys.modules.get(ELASTIC_MODULE)
    if elastic is not None:  # torchrun's agent: note how its workers end (exits.py)
        _patch_elastic(elastic)
    module = sys.modules.get(C10D_MODULE)
    if module is not None:
        _patch(module)
    if not any(isinstance(finder, _C10dFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _C10dFinder())


def arm_adapters() -> None:
    """Wrap communicators that bypass c10d (vLLM's PyNccl, vllm-ascend's PyHccl; see adapters.py),
    unless COLLCHECK_ADAPTERS=0. Called when the tracer starts, not at interpreter start: classes
    are patched in place, so one imported (or instantiated) earlier is covered all the same, and
    processes that never initialise torch.distributed do not pay for the import."""
    if os.environ.get("COLLCHECK_ADAPTERS", "1").strip() == "0":
        return
    try:
        from collcheck.runtime.adapters import install

        install()
    except Exception as error:  # tracing c10d collectives does not depend on it
        sys.stderr.write(f"collcheck: adapters not installed: {type(error).__name__}: {error}\n")


class _C10dFinder(importlib.abc.MetaPathFinder):
    """Finds distributed_c10d (and torchrun's process API) like the normal path finder would, then
    patches it after it runs."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patch = _patch if fullname == C10D_MODULE else _patch_elastic if fullname == ELASTIC_MODULE else None
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        # Patched before torch.distributed's `from .distributed_c10d import *` copies the names.
        spec.loader = PatchingLoader(spec.loader, patch)
        return spec


def _patch(module: ModuleType) -> None:
    _patch_creators(module)
    init = getattr(module, "init_process_group", None)
    destroy = getattr(module, "destroy_process_group", None)
    if init is None or getattr(init, _WRAPPED, False):
        return
    module.init_process_group = _after(init, _start)  # type: ignore[attr-defined]
    if destroy is not None:
        module.destroy_process_group = _before(destroy, _stop)  # type: ignore[attr-defined]
    parent = sys.modules.get("torch.distributed")
    if parent is not None and hasattr(parent, "init_process_group"):  # already imported: patch there too
        parent.init_process_group = module.init_process_group  # type: ignore[attr-defined]
        if destroy is not None:
            parent.destroy_process_group = module.destroy_process_group  # type: ignore[attr-defined]


def _patch_elastic(module: ModuleType) -> None:
    try:
        from collcheck.runtime.exits import patch_elastic

        patch_elastic(module)
    except Exception as error:  # only the closing verdict's signal numbers depend on it
        sys.stderr.write(f"collcheck: worker exits not recorded: {type(error).__name__}: {error}\n")


def _patch_creators(module: ModuleType) -> None:
    """Group creation (new_group, split_group, ...) is recorded and verified too (groups.py), and
    so are registered backends' own methods (backends.py); the wrappers are in place from the
    start, as names are copied from this module right away and backends register on import."""
    try:
        from collcheck.runtime.groups import patch

        patch(module)
    except Exception as error:  # tracing collectives does not depend on it
        sys.stderr.write(f"collcheck: group creation not traced: {type(error).__name__}: {error}\n")
    try:  # and third-party backends' methods, called past the c10d operators (backends.py)
        from collcheck.runtime.backends import patch as patch_backends

        patch_backends(module)
    except Exception as error:
        sys.stderr.write(f"collcheck: backend calls not traced: {type(error).__name__}: {error}\n")


def _after(function: Callable[..., Any], hook: Callable[[], None]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = function(*args, **kwargs)
        hook()
        return result

    setattr(wrapper, _WRAPPED, True)
    return wrapper


def _before(function: Callable[..., Any], hook: Callable[[], None]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not args and kwargs.get("group") is None:  # only the default group ends tracing
            hook()
        return function(*args, **kwargs)

    setattr(wrapper, _WRAPPED, True)
    return wrapper


def _start() -> None:
    arm_adapters()
    try:
        from collcheck.runtime.tracer import config_from_env, start

        start(config_from_env())
    except Exception as error:  # tracing is a debugging aid: never fail the job for it
        sys.stderr.write(f"collcheck: tracer not started: {type(error).__name__}: {error}\n")


def _stop() -> None:
    try:
        from collcheck.runtime.tracer import stop

        stop()
    except Exception as error:
        sys.stderr.write(f"collcheck: tracer stop failed: {type(error).__name__}: {error}\n")
