"""Per-rank data in a run's values: where the interpreter makes a value this process's own, and
where it stops being so.

In: the running function's `LocalData` (local_data.py: what it combines across ranks, directly or
through its helpers, and the line of that call), a `State`, the statement run. Out: `State.env`
entries changed in place, a per-process (`nondet`) atom whose `why` begins with `OWN_DATA`:

- an assignment to a variable the function combines further down (`mark_assigned`);
- at the entry of a function analysed as a root, a parameter it combines, whole or by an
  attribute path (`batch`, `batch.num_tokens`, `self.pending`, `EntryData`): where nothing passes
  it, its value is the one this rank holds. A caller that passes it is judged on its own
  assignment, as the interpreter inlines the function there;
- after the call that combines it, the value is the same on every rank (`mark_combined`), and
  once the run of the function's body is past the statement that holds that call on every path
  (`EntryData.expire`), also where that call was not made (`if dp > 1: n = agree(n)`): the code
  decided there that it needs no combining, and a decision taken after it is not the one reported
  (a test of the data BEFORE the collective that combines it).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from collcheck.static.loader import FunctionNode
from collcheck.static.local_data import LocalData
from collcheck.static.program import OWN_DATA, is_own_data
from collcheck.static.state import Frame, State
from collcheck.static.symbolic import Atom, Expr, atoms, substitute


def unknown(value: Expr | None) -> bool:
    """An unknown value taken to be the same on every rank that code computed: a call's result,
    an item read from something, a part unpacked, a length. Not an argument of the function, a global, an
    attribute of `self`, a size or rank the model knows, a constant or a value already per-rank
    (where data arrives through a parameter, the caller's own assignment is the one judged)."""
    computed = ("call:", "item@", "item:", "unpack", "len(")
    return isinstance(value, Atom) and value.kind == "shared" and value.name.startswith(computed)


def mark_assigned(data: LocalData, target: ast.expr, state: State, frame: Frame, statement: ast.stmt) -> None:
    """After an assignment: a variable that holds this rank's own data, which the running function
    combines across ranks further down (local_data.py), is a per-process value here, unless its
    value is already known to be more than an unknown."""
    if not frame.stack:
        return
    function = frame.stack[-1]
    held = data.names(function)
    for node in () if not held else (target,) if isinstance(target, ast.Name) else ast.walk(target):
        if not isinstance(node, ast.Name) or node.id not in held:
            continue
        evidence = data.evidence.get((function, node.id))
        value = state.env.get(node.id)
        line = statement.lineno
        derived = isinstance(value, Atom) and is_own_data(value)  # `n = len(batch)`: named `n` here
        if evidence is None or evidence[1] <= line or not (unknown(value) or derived):
            continue
        if not derived and not data.direct(function, node.id):
            continue  # one input of several mixed into what is combined (a world size beside a rank)
        if data.delivered(function, statement):
            continue  # an item of what a collective delivered: the same on every rank
        if not data.reached_from(function, statement, evidence[1]):
            continue
        why = f"{OWN_DATA}, {evidence[0]}"
        name = f"{node.id}@{line}:{node.col_offset}"
        state.env[node.id] = Atom(name, "nondet", why=why, combined_by=evidence[2])


def mark_combined(data: LocalData, call: ast.Call, where: str, state: State, frame: Frame) -> None:
    """After the call (at `where`) that combines this rank's own data across ranks: a decision
    taken on it from here on is taken knowing the others' (`all(f == mine for f in gathered)`), so
    it is no longer reported as one on a per-process value."""
    if not frame.stack:
        return
    for name in data.combined_at(frame.stack[-1], call.lineno):
        value = state.env.get(name)
        if isinstance(value, Atom) and value.kind == "nondet" and value.why.startswith(OWN_DATA):
            state.env[name] = Atom(f"combined:{name}@{where}", "shared")


class EntryData:
    """The parameters (and attribute paths of them) of one root run made this process's own at
    its entry, and when each stops being so: the run's state while it runs, not a result."""

    def __init__(self, function: FunctionNode, pending: list[tuple[int, str]]) -> None:
        self.body = function.body
        self.pending = sorted(pending)  # (line of the first combining call, the atom's `why`)

    def expire(self, body: Sequence[ast.stmt], statement: ast.stmt, states: list[State]) -> None:
        """Before `statement` of the function's own body: the data whose combining call lies
        above it (on every path, or not at all on some) is no longer this process's own."""
        if body is not self.body or not self.pending or self.pending[0][0] >= statement.lineno:
            return
        whys = {why for line, why in self.pending if line < statement.lineno}
        self.pending = [(line, why) for line, why in self.pending if line >= statement.lineno]
        for state in states:
            mapping: dict[Atom, Expr] = {
                atom: Atom(f"combined:{atom.name}", "shared")
                for value in state.env.values()
                for atom in atoms(value)
                if atom.kind == "nondet" and atom.why in whys
            }
            if mapping:
                state.env.update({key: substitute(value, mapping) for key, value in state.env.items()})


def _nothing_trained(_function: FunctionNode) -> frozenset[str]:
    return frozenset()


@dataclass(frozen=True)
class TrainedModules:
    """The modules trained data-parallel by hand in one root's run (`LocalData.trained`): the
    values of the root's parameters that are such modules, so that a helper handed one
    (`evaluate(model, loader)`) knows what the module returns there is this rank's own; and,
    for any function of the run, the dotted names of those it trains itself
    (gradient_sync.py)."""

    values: frozenset[Expr] = frozenset()
    names: Callable[[FunctionNode], frozenset[str]] = _nothing_trained


def trained_values(data: LocalData, function: FunctionNode, env: dict[str, Expr]) -> TrainedModules:
    """At the entry of `function` run as a root (`env`: its parameters' values)."""
    values = frozenset(env[name] for name in data.trained(function) if name in env)
    return TrainedModules(values, data.trained)


def mark_entry(data: LocalData, function: FunctionNode, env: dict[str, Expr]) -> EntryData | None:
    """At the entry of `function` run as a root (`env`: its parameters' values where nothing
    passes them): the parameters and attribute paths of them it combines across ranks, made this
    process's own (see the module); None when there is none."""
    pending: list[tuple[int, str]] = []
    for path, line in data.parameter_paths(function):
        root = path.partition(".")[0]
        holder = env.get(root)
        if not (isinstance(holder, Atom) and holder.kind == "shared" and "param:" in holder.name):
            continue  # a value the model knows more of (a type, a rank, a constant)
        if path in env if path != root else not holder.name.startswith("param:"):
            continue  # an object of a class of the file (`s: Syncer`) is read by its attributes
        evidence = data.evidence[(function, path)]
        why = f"{OWN_DATA}, {evidence[0]}"
        env[path] = Atom(f"{path}@entry:{function.lineno}", "nondet", why=why, combined_by=evidence[2])
        pending.append((line, why))
    return EntryData(function, pending) if pending else None
