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
    # The models and trees are cycles (a node's cached walk holds the node): only a full
    # collection frees them, and the interpreter runs one rarely (50 MB of garbage after 100
    # sglang files). One collection per release, a few hundred files apart at most.
    gc.collect()
    return True
