"""The interpreter: a function's statements and paths to the regions the solver compares.

In: a `ModuleInfo` and one of its functions (or its top-level code). Out: `Region`s — the
function body's paths, each a condition and a sequence of events (`program.Path`), and one region
per communicating loop, compared iteration against iteration.

Every path that matters is followed with its condition (a conjunction of symbolic values) and its
sequence of collectives. Branches that issue no collective and do not exit are merged right away
(their variables become `x if cond else y`), so only branches that matter multiply paths. Loops
are not unrolled: a loop whose body communicates becomes one element with a symbolic trip count,
and its body becomes a region of its own. Values come from the evaluator (`values`), calls are
resolved by `calls`, collectives recorded by `collectives`, helpers run by `helpers`.

Nothing here imports or runs the analysed code.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import replace
from functools import partial

from collcheck.config import Settings
from collcheck.findings import Budget, ConditionKind
from collcheck.static.asserted import checked_once, states_after_assert
from collcheck.static.budget import check_active
from collcheck.static.catalog_values import BIN_OPS, value_from_spec
from collcheck.static.closures import MAX_NESTING, Closure, closure_of, escapes
from collcheck.static.conditions import source_of
from collcheck.static.declared_types import declared_element, declared_entry
from collcheck.static.fallback import INERT_PER_STEP, RankedConditions, is_simple, join_after, join_paths
from collcheck.static.gradient_sync import returned_events
from collcheck.static.group_values import parameters_with_literal_defaults
from collcheck.static.inferred_types import infer_parameter, inferred_result
from collcheck.static.inliner import LoopOp
from collcheck.static.loader import FunctionNode, ModuleInfo
from collcheck.static.loop_shapes import iterations_alike
from collcheck.static.loop_values import is_collection, loop_carried, loop_element, unrolled_loop, while_trips
from collcheck.static.names import ImportTable, add_import, nodes_under, source_text
from collcheck.static.object_protocols import ObjectProtocols
from collcheck.static.object_values import record_container_change, record_keyword_attributes
from collcheck.static.own_data import EntryData, mark_entry, trained_values
from collcheck.static.own_rank import MAX_RANK_HANDOFFS, OWN_RANK_SPECS, OwnRankComparisons
from collcheck.static.program import (
    CommEvent,
    Exit,
    ExitKind,
    LoopEvent,
    LoopRange,
    Region,
    RegionKind,
    Site,
    communicating_conds,
    is_posted,
    path_of,
    unposted,
)
from collcheck.static.raises import data_tests, raised_class
from collcheck.static.receivers import passed_object, used_object
from collcheck.static.slicing import NOTHING_SLICED, sliced_statements
from collcheck.static.state import (
    Frame,
    PathLimitExceeded,
    State,
    attributes_changed,
    kept_sequences,
    merge_branches,
    merge_envs,
)
from collcheck.static.symbolic import (
    TRUE,
    Atom,
    BinOp,
    Compare,
    Const,
    Expr,
    constant_truth,
    is_rank_dependent,
    negate,
    opaque,
)
from collcheck.static.syntax import (
    assigned_names,
    cached_return,
    called_names,
    class_pattern_reads,
    filled_key,
    irrefutable,
    is_set_expr,
    lazy_initialisation,
    memo_lookup,
    mutated_name,
    mutated_names,
    range_loop_call,
)
from collcheck.static.values import where_of

_DEFAULTS = Settings()  # one set of defaults: the bounds a run uses unless configured


class Interpreter(ObjectProtocols):
    """Symbolic execution of one module's functions against the catalog."""

    def __init__(
        self,
        module: ModuleInfo,
        max_paths: int = _DEFAULTS.max_paths,
        max_depth: int = _DEFAULTS.max_inline_depth,
        max_steps: int = _DEFAULTS.max_steps,
    ) -> None:
        super().__init__(module, max_paths, max_depth, max_steps)
        self.regions: list[Region] = []
        self.loop_regions: dict[tuple[int, tuple[Site, ...]], Region] = {}
        self._import_tables: dict[FunctionNode, ImportTable] = {}
        # The states that reached each `def` in the root's own body (not in helpers it inlined).
        self.definitions: dict[FunctionNode, list[State]] = {}
        self.ranked = RankedConditions()  # the reduced mode's judgements, one run at a time
        self._slices: dict[FunctionNode, dict[ast.stmt, tuple[ast.Call, ...]]] = {}  # slicing.py
        self.entry_data: EntryData | None = None  # the root's parameters made its own (own_data.py)

    def run_function(
        self, node: FunctionNode, class_name: str | None, qualname: str, closure: Closure | None = None
    ) -> list[Region]:
        """The regions of `node` run as a root; a nested function runs from its `closure`."""
        self.regions = []
        self.loop_regions = {}
        self.nested = dict(closure.siblings) if closure is not None else {}
        self.definitions = {}
        self.set_names = set()
        self.steps = 0
        self.ranked = RankedConditions()
        self.local_imports = self.function_imports(closure.outer if closure is not None else node)
        env = self.entry_parameters(node, root=True)
        self.entry_data = mark_entry(self.local_data, node, env) if closure is None else None
        self.trained_modules = trained_values(self.local_data, node, env)
        if closure is not None:
            env = {**closure.env, **env}
        frame = Frame(qualname, class_name, (), 0, (node,))
        start = State(env, closure.conds if closure is not None else ())
        condition = self.decorator_condition(node, self.module)
        if condition is not None:
            # `@rank_zero_only`: the body runs on some ranks; the others skip it whole.
            start = State(env, (*start.conds, condition))
        states = self.exec_block(node.body, [start], frame)
        if condition is not None:
            states.append(State(env, (*start.conds[:-1], negate(condition))))
        kept = [s for s in states if s.exit is None or s.exit.kind is not ExitKind.BREAK]
        paths = [path_of(s.conds, s.events, s.exit) for s in kept]
        region = Region(qualname, RegionKind.FUNCTION, paths, node.lineno, path_name=self.module.path)
        return [region, *self.regions]

    def nested_roots(
        self, node: FunctionNode, qualname: str, closure: Closure | None = None
    ) -> list[tuple[FunctionNode, str, Closure]]:
        """After `run_function(node, ...)`: the functions defined in its body that escape it and
        communicate, each with its qualified name and closure (see `closures`)."""
        depth = closure.depth + 1 if closure is not None else 1
        if depth > MAX_NESTING:
            return []
        roots = []
        for inner, states in self.definitions.items():
            if escapes(node, inner) and self.body_communicates(inner):
                siblings = {defined.name: defined for defined in self.definitions}
                found = closure_of(node, inner, states, siblings, depth)
                roots.append((inner, f"{qualname}.{inner.name}", found))
        return roots

    def run_module(self, body: list[ast.stmt]) -> list[Region]:
        self.regions = []
        self.loop_regions = {}
        self.steps = 0
        self.ranked = RankedConditions()
        frame = Frame("<module>", None, (), 0, ())
        states = self.exec_block(body, [State(dict(self.module.globals))], frame)
        paths = [path_of(s.conds, s.events, s.exit) for s in states]
        return [Region("<module>", RegionKind.FUNCTION, paths, 1, path_name=self.module.path), *self.regions]

    def module_environment(self, body: list[ast.stmt]) -> dict[str, Expr]:
        """Module-level constants and groups, without recording events."""
        self.record_events = False
        frame = Frame("<module>", None, (), self.max_depth, ())
        try:
            states = self.exec_block(body, [State({})], frame)
        except PathLimitExceeded:
            states = []
        finally:
            self.record_events = True
        return merge_envs(states) if states else {}

    def function_imports(self, node: FunctionNode) -> ImportTable:
        table = self._import_tables.get(node)
        if table is None:
            table = self.module.imports.child()
            for child in nodes_under(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    add_import(table, child)
            self._import_tables[node] = table
        return table

    def entry_parameters(self, node: FunctionNode, root: bool = False) -> dict[str, Expr]:
        """The values of `node`'s parameters where nothing passes them; `root`: analysed as a root
        (only then is a parameter's class inferred from its use, which walks the function)."""
        env: dict[str, Expr] = {}
        args = node.args
        defaulted = parameters_with_literal_defaults(args)
        method = self.owner_class(node, None) is not None and (args.posonlyargs or args.args)
        positional_self = [*args.posonlyargs, *args.args][0] if method else None
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if arg.arg in defaulted:
                # `def broadcast(obj, *, rank: int = 0)`: a rank chosen by the caller, not this rank.
                env[arg.arg] = self.annotated_type(arg) or Atom(f"param:{arg.arg}@{where_of(node)}", "shared")
                continue
            passed = passed_object(self.module, node, arg.arg)  # `finish(Saver(), t)` in the file
            if passed is None and root and arg is not positional_self:  # the one class that fits its use
                passed = used_object(self.module, node, arg.arg) or infer_parameter(self.module, node, arg)
            env[arg.arg] = self.annotated_type(arg) or passed or self._parameter_value(arg.arg, node)
        for rest in (args.vararg, args.kwarg):
            if rest is not None:
                env[rest.arg] = Atom(f"param:{rest.arg}", "shared")
        env = declared_entry(node, env, self.module.tree)
        launched = self.module.launched.get(node)
        positional = [*args.posonlyargs, *args.args]
        if launched is not None and positional:
            # `mp.spawn(train, ...)` calls `train(i, ...)`: the index is the rank, whatever its name
            # (a name the catalog knows, `rank`, keeps its meaning: the code says it is the global rank).
            first = positional[0].arg
            spec = self.catalog.rank_parameters.get(first, launched)
            env[first] = value_from_spec(spec, f"param:{first}")
        return env

    def _parameter_value(self, name: str, node: FunctionNode) -> Expr:
        """A parameter's value where the function is analysed on its own. A name the catalog
        knows (`rank`, `world_size`) is taken at its word only when no call of the function is
        visible in its file: where callers are, they are analysed with the function inlined, and
        what they pass decides (`publish(t, 0)` hands it no rank)."""
        spec = self.catalog.rank_parameters.get(name)
        if spec is None or node.name in called_names(self.module.tree):
            return Atom(f"param:{name}@{where_of(node)}", "shared")
        chosen = OwnRankComparisons(self.module, self.catalog, self.function_imports)
        if not (spec in OWN_RANK_SPECS and chosen.compared(name, node, MAX_RANK_HANDOFFS)):
            return value_from_spec(spec, f"param:{name}")
        return Atom(f"param:{name}@{where_of(node)}", "shared")

    def exec_block(self, body: Sequence[ast.stmt], states: list[State], frame: Frame) -> list[State]:
        sliced = self._sliced(frame)
        skipping = False
        for index, stmt in enumerate(body):
            if self.entry_data is not None:
                self.entry_data.expire(body, stmt, states)
            live = [state for state in states if state.exit is None]
            if not live:
                break
            calls = sliced.get(stmt)
            if calls is not None and self._quiet(calls, live, frame):
                # Statements that cannot matter to a collective (slicing.py): none of them is
                # executed, and each run of them costs a path what one statement without a call
                # that needs running costs it (a step; in the reduced mode, 1/INERT_PER_STEP).
                if not skipping:
                    self._count(len(live))
                skipping = True
                continue
            skipping = False
            finished = [state for state in states if state.exit is not None]
            produced: list[State] = []
            for state in live:
                shaped = frame.loop.even and isinstance(stmt, ast.If)  # cheap tests first
                cached = self._cached_after_first_call(body, index, state, frame) if shaped else None
                produced.extend(self.exec_stmt(stmt, state, frame) if cached is None else cached)
            states = finished + produced
            if self.reduced and len(produced) > 1:
                states = join_paths(states, self.ranked)
            states = join_after(states, produced, self.ranked, self.max_paths, self.joining)
            self.summaries.widest = max(self.summaries.widest, len(states))
            if len(states) > self.max_paths:
                raise PathLimitExceeded(f"more than {self.max_paths} paths", Budget.PATHS)
        return states

    def _sliced(self, frame: Frame) -> dict[ast.stmt, tuple[ast.Call, ...]]:
        """The statements of the function `frame` runs that may be stepped over (slicing.py)."""
        if not frame.stack:
            return NOTHING_SLICED  # a module body: its names are the module's, read everywhere
        function = frame.stack[-1]
        found = self._slices.get(function)
        if found is None:
            found = self._slices[function] = sliced_statements(function, self.property_names)
        return found

    def _quiet(self, calls: tuple[ast.Call, ...], live: list[State], frame: Frame) -> bool:
        """No call of a sliced statement needs running on any live path (`has_effect`)."""
        return not calls or not any(self.has_effect(call, frame, state) for state in live for call in calls)

    def exec_stmt(self, stmt: ast.stmt, state: State, frame: Frame) -> list[State]:
        check_active()  # the file's safety clock (budget.py)
        handler = getattr(self, f"_stmt_{type(stmt).__name__}", self._stmt_generic)
        if self.reduced and is_simple(stmt):
            # Counted once run: a full step if it ran a call that may communicate (fallback.py).
            before = self.effects
            result: list[State] = handler(stmt, state, frame)
            self._count(1 if self.effects == before else INERT_PER_STEP)
            return result
        # A bound on work, not only on paths: inlining can make a few paths very expensive.
        self._count(INERT_PER_STEP if self.reduced else 1)
        return handler(stmt, state, frame)  # type: ignore[no-any-return]

    def _count(self, steps: int) -> None:
        self.steps += steps
        if self.steps > self.step_limit:
            raise PathLimitExceeded(f"more than {self.max_steps} statements executed")

    def _stmt_generic(self, stmt: ast.stmt, state: State, frame: Frame) -> list[State]:
        # Statements without control flow of interest: evaluate their calls for effects.
        states = [state]
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.expr):
                states = [s for current in states for s, _ in self.eval(child, current, frame)]
        return states

    def _stmt_Pass(self, stmt: ast.Pass, state: State, frame: Frame) -> list[State]:
        return [state]

    _stmt_Assert = states_after_assert  # a group-structure fact holds after it (asserted.py)

    def _stmt_Expr(self, stmt: ast.Expr, state: State, frame: Frame) -> list[State]:
        resumed = self.at_yield(stmt, state, frame) if isinstance(stmt.value, ast.Yield) else None
        if resumed is not None:  # a `with` body runs at its context manager's `yield`
            return resumed
        grown = mutated_name(stmt)
        if grown is None or not is_collection(state.env.get(grown)):
            states = [s for s, _ in self.eval(stmt.value, state, frame)]
            for current in states:
                record_container_change(self, stmt.value, current, frame)  # `self.pending.append(x)`
            return states
        # `xs.append(v)`: a new value of `xs`, from the old one and what was added, so that a list
        # filled on some paths only (or in some iterations) is not the list left as it was.
        results = []
        assert isinstance(stmt.value, ast.Call)
        for current, _ in self.eval(stmt.value, state, frame):
            current.env[grown] = self.mutated(current.env[grown], stmt.value, current, frame, grown)
            record_container_change(self, stmt.value, current, frame)
            results.append(current)
        return results

    def _stmt_Assign(self, stmt: ast.Assign, state: State, frame: Frame) -> list[State]:
        resumed = self.at_yield(stmt, state, frame) if isinstance(stmt.value, ast.Yield) else None
        if resumed is not None:
            return resumed
        results = []
        for current, evaluated in self.eval(stmt.value, state, frame):
            value = inferred_result(self.module, stmt, evaluated, frame.stack)  # `e = make_engine()`
            for target in stmt.targets:
                self.bind(target, value, current, stmt.value)
                self.own_data(target, current, frame, stmt)
            record_keyword_attributes(self, stmt, current, frame)
            results.append(current)
        return results

    def _stmt_AnnAssign(self, stmt: ast.AnnAssign, state: State, frame: Frame) -> list[State]:
        if stmt.value is None:
            return [state]
        results = []
        for current, value in self.eval(stmt.value, state, frame):
            self.bind(stmt.target, value, current, stmt.value)
            self.own_data(stmt.target, current, frame, stmt)
            results.append(current)
        return results

    def _stmt_AugAssign(self, stmt: ast.AugAssign, state: State, frame: Frame) -> list[State]:
        results = []
        for current, value in self.eval(stmt.value, state, frame):
            old = self.pure(stmt.target, current, frame)
            op = BIN_OPS.get(type(stmt.op))
            new = BinOp(op, old, value) if op else opaque(f"aug@{where_of(stmt)}", (old, value))
            self.bind(stmt.target, new, current, stmt.value)
            results.append(current)
        return results

    def _stmt_Return(self, stmt: ast.Return, state: State, frame: Frame) -> list[State]:
        pairs = self.eval(stmt.value, state, frame) if stmt.value is not None else [(state, Const(None))]
        for current, value in pairs:
            if self.record_events and self.catalog.backward_hooks:  # `return loss` of a training hook
                current.events = (*current.events, *returned_events(self, stmt, value, frame))
            current.exit = Exit(ExitKind.RETURN, self.module.path, stmt.lineno, stmt.col_offset, frame.chain)
            current.returned = value
        return [current for current, _ in pairs]

    def _stmt_Raise(self, stmt: ast.Raise, state: State, frame: Frame) -> list[State]:
        raised = raised_class(stmt, self.module.classes)
        on_data = data_tests(state.conds, self._held_by_module)
        where = (self.module.path, stmt.lineno, stmt.col_offset, frame.chain)
        state.exit = Exit(ExitKind.RAISE, *where, raised=raised, data_tests=on_data)
        return [state]

    def _held_by_module(self, name: str) -> bool:
        module = self.module
        if name in ("self", "cls") or name in module.globals or name in module.functions:
            return True
        return name in module.classes or self.local_imports.lookup(name) is not None

    def _stmt_Break(self, stmt: ast.Break, state: State, frame: Frame) -> list[State]:
        state.exit = Exit(ExitKind.BREAK, self.module.path, stmt.lineno, stmt.col_offset, frame.chain)
        return [state]

    def _stmt_Continue(self, stmt: ast.Continue, state: State, frame: Frame) -> list[State]:
        state.exit = Exit(ExitKind.CONTINUE, self.module.path, stmt.lineno, stmt.col_offset, frame.chain)
        return [state]

    def _stmt_FunctionDef(self, stmt: FunctionNode, state: State, frame: Frame) -> list[State]:
        self.nested[stmt.name] = stmt
        if not frame.chain and self.record_events:
            self.definitions.setdefault(stmt, []).append(state.fork())
        state.env.pop(stmt.name, None)
        return [state]

    _stmt_AsyncFunctionDef = _stmt_FunctionDef

    # Statements that change nothing the analysis follows (a class body runs no collective).
    _stmt_ClassDef = _stmt_Import = _stmt_ImportFrom = _stmt_Global = _stmt_Nonlocal = _stmt_Pass

    def _stmt_If(self, stmt: ast.If, state: State, frame: Frame) -> list[State]:
        cache = lazy_initialisation(stmt, self.module.mutable_globals)
        if cache is not None:
            return self._lazy_initialisation(stmt, cache, state, frame)
        if memo_lookup(stmt):
            # `if key in cache: return cache[key]`: a per-process memo, filled the same way on
            # every rank, even when the key is rank-dependent (each rank's own group).
            return self._branch(Atom(f"memo@{stmt.lineno}", "shared"), stmt.body, stmt.orelse, state, frame)
        results: list[State] = []
        for current, test in self.eval(stmt.test, state, frame):
            self.conditions.note(test, source_of(stmt.test, self.module.path))
            current = checked_once(self, stmt, current, frame)  # a memoized check's facts (asserted.py)
            results.extend(self._branch(test, stmt.body, stmt.orelse, current, frame))
        return results

    def _lazy_initialisation(self, stmt: ast.If, cache: str, state: State, frame: Frame) -> list[State]:
        """`if self._group is None: self._group = new_group(...)` creates once per process, on the
        first call; once a path filled the cache (`filled_key`), later tests on it take the cached
        path. The cache test is alike on every rank: outside loops it is an `if` like any other (a
        first call made by some ranks only creates on those alone). Inside loops that run alike on
        every rank (`Frame.loop`), the first call may come in different iterations on different
        ranks (`if peer == rank: continue`): when the creation is the same on every rank (its paths
        issue the same events: "create every group, keep mine"), each rank makes it once in the
        loop, and only the cached path is followed; a body that decides by rank what to create
        splits the ranks on that first call, and its paths are kept under the cache test."""
        filled = filled_key(cache)
        if state.env.get(filled) == TRUE:
            return self.exec_block(stmt.orelse, [state], frame)
        results: list[State] = []
        for current, test in self.eval(stmt.test, state, frame):
            if constant_truth(test) is not None or not frame.loop.even:
                for after in self._branch(test, stmt.body, stmt.orelse, current, frame):
                    if (
                        constant_truth(test) is True
                        or test in after.conds
                        or after.env.get(cache) != current.env.get(cache)  # arms joined, one filled
                    ):
                        after.env[filled] = TRUE
                    results.append(after)
                continue
            created = self.exec_block(stmt.body, [current.fork(test)], frame)
            if len(kept_sequences(created)) <= 1:
                results.extend(self.exec_block(stmt.orelse, [current], frame))
                continue
            results.extend(created)
            results.extend(self.exec_block(stmt.orelse, [current.fork(negate(test))], frame))
        return results

    def _cached_after_first_call(
        self, body: Sequence[ast.stmt], index: int, state: State, frame: Frame
    ) -> list[State] | None:
        """`if CACHE is not None: return CACHE[key]` (`body[index]`) before the rest of the body,
        which fills CACHE, inside loops: the cached return alone when the rest is alike on every
        rank (as in `_lazy_initialisation`)."""
        stmt, rest = body[index], body[index + 1 :]
        if not (isinstance(stmt, ast.If) and cached_return(stmt, rest, self.module.mutable_globals)):
            return None
        if len(kept_sequences(self.exec_block(rest, [state.fork()], frame))) > 1:
            return None
        return self.exec_block(stmt.body, [state], frame)

    def _branch(
        self, test: Expr, body: Sequence[ast.stmt], orelse: Sequence[ast.stmt], state: State, frame: Frame
    ) -> list[State]:
        truth = constant_truth(test)
        if truth is None and test in state.conds:
            truth = True  # the same test already taken on this path (`if rank == 0:` twice)
        elif truth is None and negate(test) in state.conds:
            truth = False
        if self.summaries.recordings and constant_truth(test) is None:
            self.note_query(test, truth, state.conds)
        if truth is True:
            return self.exec_block(body, [state], frame)
        if truth is False:
            return self.exec_block(orelse, [state], frame)
        then_states = self.exec_block(body, [state.fork(test)], frame)
        else_states = self.exec_block(orelse, [state.fork(negate(test))], frame)
        merged = merge_branches(state, test, then_states, else_states)
        return merged if merged is not None else then_states + else_states

    def _stmt_Match(self, stmt: ast.Match, state: State, frame: Frame) -> list[State]:
        results: list[State] = []
        for current, subject in self.eval(stmt.subject, state, frame):
            # Which case runs depends on the subject and on every guard (`case "a" if rank == 0`):
            # a guard read per rank makes the choice per rank even when the subject is shared.
            # A name a pattern captures is a value computed from the subject.
            bound = [self._match_captures(case.pattern, subject, current) for case in stmt.cases]
            guards = tuple(
                self.pure(case.guard, State(env, current.conds, ()), frame)
                for case, env in zip(stmt.cases, bound, strict=True)
                if case.guard is not None
            )
            # `case Config(rank=0):` reads the subject's attributes, which its value may not show.
            read = tuple(self.pure(node, current, frame) for node in class_pattern_reads(stmt))
            choice = opaque(f"match@{where_of(stmt)}", (subject, *read, *guards))
            for index, case in enumerate(stmt.cases):
                taken = Compare("==", choice, Const(index))
                text = f"case {source_text(case.pattern)}"
                text += f" if {source_text(case.guard)}" if case.guard is not None else ""
                self.conditions.note(
                    taken, source_of(case.pattern, self.module.path, ConditionKind.CASE, text)
                )
                branch = current.fork(taken)
                branch.env.update(bound[index])
                results.extend(self.exec_block(case.body, [branch], frame))
            if not (stmt.cases and irrefutable(stmt.cases[-1])):  # else some case always matches
                results.append(current.fork(Compare(">=", choice, Const(len(stmt.cases)))))
        return results

    @staticmethod
    def _match_captures(pattern: ast.pattern, subject: Expr, state: State) -> dict[str, Expr]:
        """The environment of `state` with the names `pattern` captures bound: `case name:` to the
        subject itself, a name inside a pattern to a value computed from the subject."""
        env = dict(state.env)
        for node in ast.walk(pattern):
            name = node.name if isinstance(node, (ast.MatchAs, ast.MatchStar)) else None
            name = node.rest if isinstance(node, ast.MatchMapping) else name
            if name is None:
                continue
            whole = node is pattern and isinstance(node, ast.MatchAs) and node.pattern is None
            env[name] = subject if whole else opaque(f"capture:{name}@{where_of(node)}", (subject,))
        return env

    def _stmt_With(self, stmt: ast.With | ast.AsyncWith, state: State, frame: Frame) -> list[State]:
        return self.with_statement(stmt, state, frame)  # object_protocols.py

    _stmt_AsyncWith = _stmt_With

    def _stmt_For(self, stmt: ast.For | ast.AsyncFor, state: State, frame: Frame) -> list[State]:
        results: list[State] = []
        for current, iterable, known in self.eval_with_calls(stmt.iter, state, frame):
            trip = self.trip_count(stmt.iter, iterable, current, frame, known)
            over_set = is_set_expr(stmt.iter, self.set_names)
            element = loop_element(
                stmt, iterable, partial(self.pure, state=current, frame=frame, known=known)
            )
            element = declared_element(element, stmt.iter, frame, self.module)
            runs = Compare(">=", trip, Const(1))
            text = f"for {source_text(stmt.target)} in {source_text(stmt.iter)}"
            self.conditions.note(runs, source_of(stmt, self.module.path, ConditionKind.LOOP, text))
            body_start = State(dict(current.env), (*current.conds, runs), ())
            self.bind(stmt.target, element, body_start)
            self.own_data(stmt.target, body_start, frame, stmt)
            loop_range = self._loop_range(stmt, element, current, frame)
            after = self._loop(
                stmt,
                body_start,
                current,
                trip,
                frame,
                over_set=over_set,
                inputs=(iterable,),
                loop_range=loop_range,
            )
            results.extend(self.exec_block(stmt.orelse, after, frame) if stmt.orelse else after)
        return results

    _stmt_AsyncFor = _stmt_For

    def _stmt_While(self, stmt: ast.While, state: State, frame: Frame) -> list[State]:
        results: list[State] = []
        for current, test in self.eval(stmt.test, state, frame):
            if constant_truth(test) is False:
                results.extend(self.exec_block(stmt.orelse, [current], frame))
                continue
            body_start = State(dict(current.env), current.conds, ())
            after = self._loop(stmt, body_start, current, None, frame, over_set=False, inputs=(test,))
            results.extend(self.exec_block(stmt.orelse, after, frame) if stmt.orelse else after)
        return results

    def _loop(
        self,
        stmt: ast.For | ast.AsyncFor | ast.While,
        body_start: State,
        outer: State,
        trip: Expr | None,
        frame: Frame,
        *,
        over_set: bool,
        inputs: tuple[Expr, ...],
        loop_range: LoopRange | None = None,
    ) -> list[State]:
        body_states = self.exec_block(stmt.body, [body_start], replace(frame, loop=frame.loop.inside(trip)))
        changed = (
            assigned_names(stmt.body) | mutated_names(stmt.body) | attributes_changed(body_start, body_states)
        )
        if trip is None:  # while: the trip count depends on the test and what the body changes
            test = stmt.test if isinstance(stmt, ast.While) else None
            trip = while_trips(test, body_states, changed, inputs, where_of(stmt), self.length_of)
        after = outer.fork()
        after.env.update(
            loop_carried(
                changed,
                outer.env,
                body_states,
                len(body_start.conds),
                trip,
                inputs,
                where_of(stmt),
                self.length_of,
                stmt,
            )
        )
        events = [e for s in body_states for e in s.events]
        if not events:
            return [after]
        unrolled = unrolled_loop(trip, body_states, outer, after, self.record_events)
        if unrolled is not None:
            return unrolled
        body_paths = [path_of(s.conds, s.events, s.exit) for s in body_states]
        if loop_range is not None and not iterations_alike(stmt, body_states, frame):
            loop_range = None
        self.add_loop_region(
            LoopOp(self, stmt, frame.chain, frame.function, over_set, loop_range, tuple(body_paths))
        )
        # A body that also posts transfers is described by its other calls (program.Path.transfers).
        posted_only = all(is_posted(e) for e in events)
        compared = [(s.conds, s.events if posted_only else unposted(s.events)) for s in body_states]
        first_events = next(recorded for _, recorded in compared if recorded)
        first = next((e for e in first_events if isinstance(e, CommEvent)), None)
        if first is None:
            first = next(e for e in first_events if isinstance(e, LoopEvent)).first
        order = source_text(stmt.iter) if isinstance(stmt, (ast.For, ast.AsyncFor)) else "while"
        loop = LoopEvent(
            self.module.path,
            stmt.lineno,
            stmt.col_offset,
            trip,
            tuple(e.op for e in first_events),
            order,
            first,
            frame.chain,
            over_set,
            *communicating_conds(compared),
            posted_only=posted_only,
        )
        if self.record_events:
            after.events = (*outer.events, loop)
        return [after]

    def add_loop_region(self, op: LoopOp, note: bool = True) -> None:
        if note and self.summaries.recordings:
            self.summaries.recordings[-1].loops.append(op)
        # One region per loop, whatever outer path reached it: ranks on different outer paths
        # still run the same iterations against each other.
        key = (id(op.stmt), op.chain)
        region = self.loop_regions.get(key)
        if region is None:
            region = Region(
                op.function,
                RegionKind.LOOP,
                [],
                op.stmt.lineno,
                over_set=op.over_set,
                path_name=self.module.path,
                loop_range=op.loop_range,
                chain=op.chain,
            )
            self.loop_regions[key] = region
            self.regions.append(region)
        elif region.loop_range != op.loop_range:
            region.loop_range = None  # reached from outer paths that disagree on it: no counting
        region.paths.extend(p for p in op.paths if p not in region.paths)

    def _loop_range(
        self, stmt: ast.For | ast.AsyncFor, var: Expr, state: State, frame: Frame
    ) -> LoopRange | None:
        """`for name in range(...)` over bounds that are the same on every rank."""
        node = range_loop_call(stmt)
        if node is None or self.local_imports.lookup("range") is not None or "range" in self.module.functions:
            return None
        if not isinstance(var, Atom) or var.kind != "shared":
            return None
        values = [self.pure(a, state, frame) for a in node.args]
        start, stop = (Const(0), values[0]) if len(values) == 1 else (values[0], values[1])
        step = values[2] if len(values) == 3 else Const(1)
        if not (isinstance(step, Const) and type(step.value) is int and step.value > 0):
            return None
        if is_rank_dependent(start) or is_rank_dependent(stop):
            return None
        return LoopRange(var, start, stop, step.value)
