"""Reach over the project index's call graph: which functions reach a seed (a collective, a rank,
a `raise`) through the calls that name them, and which files each file reaches.

In: seeds and calls as (path, top-level function name) pairs; or a graph as successor lists of
node numbers. Out: the functions that reach a seed; each node's reachable set as a bit set.
Plain data and plain functions; `project` builds the index with them.
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


def reach_bits(successors: list[list[int]]) -> list[int]:
    """For each node, the nodes reachable from it through one edge or more, as a bit set: one
    pass over the strongly connected components, each component's set the union of its
    successors' — instead of a walk per selected file (quadratic on a large tree)."""
    component, components = _strong_components(successors)
    reach_of_component = [0] * len(components)
    for which, members in enumerate(components):
        bits = 0
        for member in members:
            for nxt in successors[member]:
                other = component[nxt]
                if other != which:
                    bits |= reach_of_component[other]
                bits |= 1 << nxt  # a member of this component too, when the edge stays inside it
        reach_of_component[which] = bits
    return [reach_of_component[component[node]] for node in range(len(successors))]


def _strong_components(successors: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Tarjan's strongly connected components, iterative: each node's component number, and the
    components' members in reverse topological order (a component's successors come first)."""
    count = len(successors)
    low = [0] * count
    number = [-1] * count
    component = [-1] * count
    stack: list[int] = []
    on_stack = [False] * count
    components: list[list[int]] = []
    counter = 0
    for root in range(count):
        if number[root] != -1:
            continue
        work = [(root, 0)]
        number[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            node, position = work[-1]
            if position < len(successors[node]):
                work[-1] = (node, position + 1)
                nxt = successors[node][position]
                if number[nxt] == -1:
                    number[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack[nxt] = True
                    work.append((nxt, 0))
                elif on_stack[nxt]:
                    low[node] = min(low[node], number[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == number[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    component[member] = len(components)
                    members.append(member)
                    if member == node:
                        break
                components.append(members)
    return component, components


def set_bits(value: int) -> list[int]:
    """The positions of the set bits, lowest first."""
    text = bin(value)[:1:-1]  # lowest bit first
    found = []
    position = text.find("1")
    while position != -1:
        found.append(position)
        position = text.find("1", position + 1)
    return found
