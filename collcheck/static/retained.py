"""What one process keeps from file to file, and letting it go when it has grown.

In: nothing but the process's own caches. Out: whether the models of other files (and every
cache keyed by their trees' nodes) were dropped before the next file.

A worker keeps the model of every file it met as a helper (`loader._LOADED`) and several caches
keyed by AST nodes or functions of those models (the caches hold the trees alive even once the
models are gone). On a large tree that is hundreds of files, about 1 MB each. Past
`loader.MAX_LOADED_MODULES` the least recently used are dropped between two files. Every one of them is a pure
function of a file's text, so dropping them changes no answer, only what is parsed again.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable

from collcheck.static import inliner, names, object_protocols, receivers, syntax
from collcheck.static.loader import forget_loaded

# The modules whose `functools.lru_cache`s are keyed by nodes of a tree or by functions of a
# model (each checked when added here): all of their caches are cleared together.
_NODE_KEYED_MODULES = (names, syntax, receivers, inliner, object_protocols)


def _node_keyed_caches() -> list[Callable[[], None]]:
    return [
        value.cache_clear
        for module in _NODE_KEYED_MODULES
        for value in vars(module).values()
        if callable(getattr(value, "cache_clear", None))
    ]


def release_between_files() -> bool:
    """Before a file: drop other files' models and the caches that hold their trees, when the
    process keeps more than the bound. Whether it did."""
    if not forget_loaded():
        return False
    for clear in _node_keyed_caches():
        clear()
    # Dropped models, their trees and the interpreters that ran them die by reference count
    # (test_retained: no cycle holds them), so a full collection here mostly scans what is alive
    # (0.05-0.2 s each on torch/distributed). It runs only when the process grew since the last
    # one: cyclic garbage of code not yet freed of cycles is still bounded.
    if _grown_since_last_collection():
        gc.collect()
    return True


# Growth of the process's peak resident set that is worth a full collection between files.
COLLECT_AFTER_GROWTH_BYTES = 64 * 1024 * 1024
_PEAK_AT_LAST_COLLECTION = [0]


def _grown_since_last_collection() -> bool:
    peak = _peak_resident_bytes()
    if peak is None:  # not measurable here: collect every time, as before
        return True
    if peak - _PEAK_AT_LAST_COLLECTION[0] < COLLECT_AFTER_GROWTH_BYTES:
        return False
    _PEAK_AT_LAST_COLLECTION[0] = peak
    return True


def _peak_resident_bytes() -> int | None:
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere
