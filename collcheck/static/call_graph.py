"""Reach over the project index's call graph: which functions reach a seed (a collective, a rank,
a `raise`) through the calls that name them.

In: seeds and calls as (path, top-level function name) pairs. Out: the functions that reach a
seed. Plain data and plain functions; `project` builds the index with them.
"""

from __future__ import annotations

from collections.abc import Mapping

Function = tuple[str, str]  # (path, top-level function name)
MODULE_CODE = ""  # the segment key for text outside top-level functions (classes, module body)


def closure(seeds: set[Function], calls: Mapping[Function, frozenset[Function]]) -> set[Function]:
    """Seeds plus every top-level function that names one of them, transitively."""
    callers: dict[Function, list[Function]] = {}
    for caller, callees in calls.items():
        if caller[1] == MODULE_CODE:
            continue
        for callee in callees:
            callers.setdefault(callee, []).append(caller)
    found = set(seeds)
    pending = list(seeds)
    while pending:
        for caller in callers.get(pending.pop(), ()):
            if caller not in found:
                found.add(caller)
                pending.append(caller)
    return found
