"""Helper calls: inlining a helper of the run, behind one summary cache.

In: a call the resolver matched to a function of the run, the caller's `State` and `Frame`.
Out: the caller's states after the call (`inline`), each with the helper's events and exit, and
the call's value. A helper is executed once per distinct call context and its result reused at
every other call (issue 6). The result of a run is exact for the call that recorded it; it is
reused only where it would come out the same, which the `Summary` checks against what the run
read from outside the helper:

* the arguments and inherited state (`self.*`, declared globals): part of the key;
* the inlining depth and the receiver class: part of the key;
* the caller's path condition: a branch of the helper is not forked when the caller already
  decided its test (`if rank == 0:` twice) — each such lookup is recorded with its answer;
* the call stack, for recursion: how often each function it re-entered was on the caller's
  stack is recorded (recursion is followed MAX_RECURSION levels deep);
* executor state that outlives a call (nested functions, names bound to sets): snapshots.

What the run produced keeps the chain and path condition of the recording call site; `Rebase`
moves it onto the next one. Loop regions the helper added are replayed too, so the regions, the
findings and their counterexample chains are those of plain inlining.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from collcheck.static.collectives import CollectiveEvents
from collcheck.static.declared_types import declared_entry
from collcheck.static.fallback import INERT_PER_STEP
from collcheck.static.gradient_sync import hands_gradients
from collcheck.static.handoff import callback_event
from collcheck.static.inferred_types import infer_parameter
from collcheck.static.loader import (
    FunctionNode,
    ModuleInfo,
    followed_as_communicating,
    inherited,
    is_property,
)
from collcheck.static.names import ImportTable, nodes_under, source_text
from collcheck.static.program import Element, Exit, ExitKind, LoopRange, Path, Rebase, Site
from collcheck.static.raises import may_raise
from collcheck.static.receivers import (
    BOUND,
    EXACT,
    FUNCTION,
    PARTIAL,
    SUBCLASS,
    own_attributes_read,
    writes_own_state,
)
from collcheck.static.state import Frame, PathLimitExceeded, State, collapse_returns
from collcheck.static.symbolic import Atom, Const, Expr, GroupVal, children, is_rank_dependent, negate
from collcheck.static.syntax import free_names, global_names, is_filled_key
from collcheck.static.values import where_of

DELIVERED = "uniform:"  # the atom a collective's `uniform_after` binds (collectives.communicate)

Snapshot = tuple[frozenset[tuple[str, FunctionNode]], frozenset[str]]


@dataclass(frozen=True)
class LoopOp:
    """One loop region update (`Interpreter.add_loop_region`), kept to replay it from a summary."""

    runner: HelperInliner
    stmt: ast.stmt
    chain: tuple[Site, ...]
    function: str
    over_set: bool
    loop_range: LoopRange | None
    paths: tuple[Path, ...]

    def rebased(self, rebase: Rebase) -> LoopOp:
        if rebase.identity:
            return self
        return LoopOp(
            self.runner,
            self.stmt,
            rebase.chain(self.chain),
            self.function,
            self.over_set,
            self.loop_range,
            tuple(rebase.path(p) for p in self.paths),
        )


@dataclass
class Recording:
    """What one helper run read from outside the helper, and the loop regions it touched."""

    prefix: int  # length of the caller's path condition: the helper's own conditions follow it
    outer_stack: int  # length of the caller's call stack
    # (test, its negation among the helper's own conditions, the answer the branch got)
    queries: list[tuple[Expr, bool, bool | None]] = field(default_factory=list)
    recursion: list[tuple[FunctionNode, int]] = field(default_factory=list)
    touched: dict[int, tuple[HelperInliner, Snapshot]] = field(default_factory=dict)
    loops: list[LoopOp] = field(default_factory=list)


@dataclass(frozen=True)
class HelperResult:
    """One final state of a helper run, relative to the call: its own conditions and events."""

    conds: tuple[Expr, ...]
    events: tuple[Element, ...]
    exit: Exit | None
    returned: Expr | None
    env: tuple[tuple[str, Expr], ...]  # only what outlives the call (`self.*`, globals)


@dataclass(frozen=True)
class Summary:
    conds: tuple[Expr, ...]  # the recording caller's path condition
    chain: tuple[Site, ...]  # the helper frame's chain at the recording call site
    results: tuple[HelperResult, ...]
    steps: int
    queries: tuple[tuple[Expr, bool, bool | None], ...]
    recursion: tuple[tuple[FunctionNode, int], ...]
    touched: tuple[tuple[HelperInliner, Snapshot, Snapshot], ...]  # runner, state before, after
    loops: tuple[LoopOp, ...]


@dataclass
class Summaries:
    """Helper summaries of one analysed file, shared by its extractor and those of other files."""

    enabled: bool = True
    entries: dict[tuple[Any, ...], list[Summary]] = field(default_factory=dict)
    recordings: list[Recording] = field(default_factory=list)
    executions: Counter[FunctionNode] = field(default_factory=Counter)  # helper bodies run
    reused: int = 0
    # Roots of the file whose full analysis went over the work budget: a later root that calls
    # one would go over it too (the budget covers what it inlines), so it gives up at the call.
    over_budget: set[FunctionNode] = field(default_factory=set)
    # Roots over it in the plain run that fitted once the paths settings alone part were joined
    # (`HelperInliner.joining`): a later root's plain run gives up at a call to one, its second try runs it.
    over_plain_budget: set[FunctionNode] = field(default_factory=set)
    # Of the root's run going on: the most states a block held, and whether it gave up at a call to
    # a root of `over_plain_budget` (neither: its second try would run unchanged; over_budget.py).
    widest: int = 0
    deferred: bool = False

    def gives_up_at(self, function: FunctionNode, joining: bool) -> bool:
        """A full analysis (`joining`: its second try) would go over the budget at a call to `function`."""
        return function in self.over_budget or (function in self.over_plain_budget and not joining)


MAX_RECURSION = 3  # levels of one function on a call stack: recursion is unrolled this far


MAX_SUMMARIES_PER_KEY = 4  # contexts differing only in the caller's condition or stack


MAX_KEY_NODES = 64  # argument values beyond this are not hashed into a key (they are DAGs)


class HelperInliner(CollectiveEvents):
    """Runs helpers of the run at their call sites. The statement interpreter (a subclass)
    supplies `exec_block`, `function_imports` and `add_loop_region`."""

    def __init__(self, module: ModuleInfo, max_paths: int, max_depth: int, max_steps: int) -> None:
        super().__init__(module)
        self.max_paths = max_paths
        self.max_depth = max_depth
        self.max_steps = max_steps
        self.steps = 0
        # The reduced mode of a function over the budget (fallback.py): paths joined, inert
        # statements cheap. Steps then count in units of 1/INERT_PER_STEP.
        self.reduced = False
        # The last resort: calls into communicating helpers are unknown collectives, not inlined.
        self.opaque_helpers = False
        # The full analysis's second try over the budget (over_budget.py): live paths with the same
        # events and rank decisions are joined once a block holds many (fallback.join_after).
        self.joining = False
        self.children: dict[str, HelperInliner] = {}  # the runners of other files' helpers
        self.raising: dict[FunctionNode, bool] = {}  # `raises.may_raise`, per function
        self.summaries = Summaries()

    def exec_block(self, body: Sequence[ast.stmt], states: list[State], frame: Frame) -> list[State]:
        raise NotImplementedError

    def release(self) -> None:
        """Once its analysis is done: drop the summaries (each names the runners it touched, and
        the runners share them) and the runners of other files, cycles that would otherwise keep
        every runner, its module and its tree alive until a full collection."""
        self.summaries.entries.clear()
        self.summaries.recordings.clear()
        for child in self.children.values():
            child.release()
        self.children.clear()

    @property
    def step_limit(self) -> int:
        """`max_steps`, in the units the current mode counts steps in."""
        return self.max_steps * INERT_PER_STEP if self.reduced else self.max_steps

    def function_imports(self, node: FunctionNode) -> ImportTable:
        raise NotImplementedError

    def add_loop_region(self, op: LoopOp, note: bool = True) -> None:
        raise NotImplementedError

    def inline(
        self,
        call: ast.Call,
        function: FunctionNode,
        class_name: str | None,
        bound_self: bool,
        state: State,
        frame: Frame,
        known: dict[int, Expr],
        receiver: str = "self",
    ) -> list[tuple[State, Expr]]:
        """The caller's states after `call` runs `function`. `bound_self`: a method run on an object,
        held by the dotted name `receiver` (`self`, `s`, `self.ckpt`): the caller's `receiver.*`
        are the method's `self.*`, and what the method stores there outlives the call."""
        if frame.depth >= self.max_depth:
            return [(state, self.pure(call, state, frame, known))]
        if self.summaries.recordings:
            self._note_recursion(function, frame)
        if not self.reduced and self.summaries.gives_up_at(function, self.joining):
            self.summaries.deferred = function not in self.summaries.over_budget
            raise PathLimitExceeded(f"calls {function.name}, itself over the budget")
        if frame.stack.count(function) >= MAX_RECURSION:
            # Bounded: deeper levels are not followed (their collectives are not seen).
            return [(state, self.pure(call, state, frame, known))]
        owner_module = self.remote_modules.get(function, self.module)
        communicates = (
            followed_as_communicating(owner_module, function, owner_module is self.module)
            or (function in self.nested.values() and self.body_communicates(function))
            or self.passes_typed_object(call, state)
            or (bool(self.catalog.gradient_syncs) and hands_gradients(call, state))
            or (function in owner_module.functions.values() and self.handoff(call, frame) is not None)
        )
        if (
            not communicates
            and not self.returns_matter(function, owner_module)
            and not self._arguments_vary(call, state, frame, known)
            and not (bound_self and self._keeps_rank_state(function, call, state, frame, known))
            and not (bound_self and self._reads_rank_state(function, class_name, state, receiver))
            and not (self.raises_followed and may_raise(function, owner_module, self.raising))
        ):
            return [(state, self.pure(call, state, frame, known))]
        if communicates and self.opaque_helpers:
            # The last resort over the budget (over_budget.py): the helper is a root of its own;
            # here it issues unknown collectives, and nothing at or after it is compared.
            if self.record_events:
                state.events = (*state.events, callback_event(call, self.module.path, frame))
            return [(state, self.pure(call, state, frame, known))]
        env = self.bind_call_arguments(call, function, bound_self, state, frame, known, receiver)
        if function in self.nested.values():
            # A nested function called by its name reads the variables of the function around it.
            for name in free_names(function) & state.env.keys():
                env.setdefault(name, state.env[name])
        site = Site(
            frame.function, function.name, self.module.path, call.lineno, call.col_offset, owner_module.path
        )
        owner = self.owner_class(function, class_name)
        chain, stack = (*frame.chain, site), (*frame.stack, function)
        inner = Frame(function.name, owner, chain, frame.depth + 1, stack, loop=frame.loop)
        # `global` names, and the caches some path filled (interpret._lazy_initialisation): those
        # are the process's, whichever function reads them.
        declared = global_names(function) | {key for key in state.env if is_filled_key(key)}
        for name in declared & set(state.env):
            env[name] = state.env[name]  # module state as the caller last left it
        start = State(env, state.conds, state.events)
        condition = self.decorator_condition(function, owner_module)
        skipped: list[tuple[State, Expr]] = []
        if condition is not None:
            skipped = [(state.fork(negate(condition)), Const(None))]
            start = State(env, (*state.conds, condition), state.events)
        handed = _handed_containers(call, function, bound_self)
        entry = {name: env.get(name) for name in handed}  # the run may change `env` in place
        runner = self._runner_for(function)
        finals = self._run_helper(runner, function, start, inner, state, frame, bound_self, declared)
        results = []
        for final in finals:
            resumed = State(dict(state.env), final.conds, final.events)
            for name, argument in handed.items():
                before = entry[name]
                if before is None or not is_rank_dependent(before):
                    continue  # already the same on every rank: nothing to make uniform (and the
                    # argument keeps its value, so the next call with it reuses this summary)
                if _delivered(final.env.get(name)) and final.env.get(name) != before:
                    # The helper's rooted collective filled the very list the caller handed it
                    # (`share(listing, src=0)` over `broadcast_object_list(objects, src)`): the
                    # caller's list now holds the root's value, as after the collective itself.
                    delivered = Atom(f"uniform:{source_text(argument)}@{where_of(call)}", "shared")
                    self.bind(argument, delivered, resumed)
            for key, value in final.env.items():
                if key.startswith("self.") and bound_self:
                    resumed.env[receiver + key[4:]] = value  # attribute writes outlive the call
                elif key in declared or is_filled_key(key):
                    resumed.env[key] = value  # and so do `global` ones and filled caches
            if final.exit is not None and final.exit.kind in (ExitKind.RAISE, ExitKind.EXIT):
                resumed.exit = final.exit
            results.append((resumed, final.returned if final.returned is not None else Const(None)))
        collapsed = collapse_returns(state, results)
        return [*collapsed, *skipped]

    def _arguments_vary(self, call: ast.Call, state: State, frame: Frame, known: dict[int, Expr]) -> bool:
        """Some argument the caller passes differs between ranks (or processes): what the helper
        returns may then differ too, whatever its parameters are called (`my_slice(items,
        dist.get_rank(), n)`), so its body is run with those values (and its run kept as a summary
        for the next call with the same values)."""
        arguments = [*call.args, *(keyword.value for keyword in call.keywords)]
        return any(
            is_rank_dependent(
                self.pure(
                    argument.value if isinstance(argument, ast.Starred) else argument, state, frame, known
                )
            )
            for argument in arguments
        )

    def _keeps_rank_state(
        self, function: FunctionNode, call: ast.Call, state: State, frame: Frame, known: dict[int, Expr]
    ) -> bool:
        """A quiet method that stores attributes of its object, called on some ranks only or with a
        per-rank argument: what it stores differs between ranks, and another method of the object
        may read it (`if not self.seen: return` before a collective), so it is run."""
        if not writes_own_state(function):
            return False
        if is_property(function, self.remote_modules.get(function, self.module).imports):
            # A getter that stores (`if self._pg is None: self._pg = new_group()`) is run on every
            # read: a later read must see what an earlier one stored, or two reads of one
            # attribute (a guard's and a collective's) would name two different values.
            return True
        if any(is_rank_dependent(cond) for cond in state.conds):
            return True
        arguments = [*call.args, *(keyword.value for keyword in call.keywords)]
        return any(is_rank_dependent(self.pure(a, state, frame, known)) for a in arguments)

    def _reads_rank_state(
        self, function: FunctionNode, class_name: str | None, state: State, receiver: str
    ) -> bool:
        """A method (or `@property` getter) that reads an attribute of its object holding a per-rank
        value (`return self.pp_rank == self.pp_size - 1`, with `self.pp_rank` the rank): what it
        returns may differ between ranks, so it is run."""
        owner = self.owner_class(function, class_name)
        for attribute in own_attributes_read(function):
            value = state.env.get(f"{receiver}.{attribute}")
            if value is None and owner is not None:  # the file's classes only: loads no other file
                value = inherited(self.module, owner, attribute, lambda info: info.attributes)
            if value is not None and is_rank_dependent(value):
                return True
        return False

    def _run_helper(
        self,
        runner: HelperInliner,
        function: FunctionNode,
        start: State,
        inner: Frame,
        caller: State,
        frame: Frame,
        bound_self: bool,
        declared: frozenset[str],
    ) -> list[State]:
        """The helper's final states: from a summary that holds here, or by running its body once
        (and keeping the run as a summary for the next call that agrees on what it read)."""
        summaries = self.summaries
        flags = (runner.record_events, self.reduced, self.joining, self.opaque_helpers)
        mode = (*flags, inner.loop, self.raises_followed > 0)
        key = _summary_key(function, inner, bound_self, start.env, mode)
        if key is not None and summaries.enabled:
            for summary in summaries.entries.get(key, ()):
                if _summary_holds(summary, caller, frame):
                    summaries.reused += 1
                    return self._apply_summary(summary, caller, inner, frame)
        else:
            key = None
        summaries.executions[function] += 1
        if key is None:
            _touch(summaries.recordings, runner)
            return self._execute_helper(runner, function, start, inner)
        recording = Recording(len(caller.conds), len(frame.stack))
        summaries.recordings.append(recording)
        steps = self.steps
        try:
            _touch(summaries.recordings, runner)
            finals = self._execute_helper(runner, function, start, inner)
        finally:
            summaries.recordings.pop()
        summary = _summarise(recording, finals, caller, inner, self.steps - steps, bound_self, declared)
        if summaries.recordings:  # a helper run being recorded around this call read it all too
            _pass_on(summary, summaries.recordings[-1], caller, frame, summary.loops)
        stored = summaries.entries.setdefault(key, [])
        if len(stored) < MAX_SUMMARIES_PER_KEY:
            stored.append(summary)
        return finals

    def _execute_helper(
        self, runner: HelperInliner, function: FunctionNode, start: State, inner: Frame
    ) -> list[State]:
        saved_imports = runner.local_imports
        runner.local_imports = runner.function_imports(function)
        runner.steps = self.steps  # one work budget for the whole analysed function
        runner.reduced = self.reduced
        runner.opaque_helpers = self.opaque_helpers
        runner.joining = self.joining
        runner.raises_followed = self.raises_followed
        try:
            return runner.exec_block(function.body, [start], inner)
        finally:
            runner.local_imports = saved_imports
            self.steps = runner.steps

    def _apply_summary(self, summary: Summary, caller: State, inner: Frame, frame: Frame) -> list[State]:
        """Replay a recorded helper run at this call: its work, the dependencies it passes on to
        helper runs being recorded around this call, its loop regions and its final states.
        The replay is charged what it does (`replay_cost`), never more than running the body
        again would cost: a helper replayed at every call site of a long function (a step
        method called from each arm of a loop) costs its events, not its statements, each time."""
        self.steps += min(summary.steps, replay_cost(summary) * (INERT_PER_STEP if self.reduced else 1))
        if self.steps > self.step_limit:
            raise PathLimitExceeded(f"more than {self.max_steps} statements executed")
        rebase = Rebase(summary.chain, inner.chain, summary.conds, caller.conds)
        loops = tuple(op.rebased(rebase) for op in summary.loops)
        if self.summaries.recordings:
            _pass_on(summary, self.summaries.recordings[-1], caller, frame, loops)
        for runner, _, after in summary.touched:
            runner.nested = dict(after[0])
            runner.set_names = set(after[1])
        for op in loops:
            op.runner.add_loop_region(op, note=False)  # passed on above
        finals = []
        for result in summary.results:
            events = result.events if rebase.identity else tuple(rebase.element(e) for e in result.events)
            final = State(dict(result.env), (*caller.conds, *result.conds), (*caller.events, *events))
            final.exit = rebase.exit(result.exit)
            final.returned = result.returned
            finals.append(final)
        return finals

    def note_query(self, test: Expr, truth: bool | None, conds: tuple[Expr, ...]) -> None:
        """A branch test looked up in the path condition: the answer may come from a caller."""
        # Only the innermost recording: it passes what it read on to the enclosing one when done.
        recording = self.summaries.recordings[-1]
        own = conds[recording.prefix :]
        if test not in own:
            recording.queries.append((test, negate(test) in own, truth))

    def _note_recursion(self, function: FunctionNode, frame: Frame) -> None:
        """How deep `function` already is outside the run being recorded decides how far its
        recursion is followed inside: the summary holds only for the same depth."""
        recording = self.summaries.recordings[-1]
        recording.recursion.append((function, frame.stack[: recording.outer_stack].count(function)))

    def _runner_for(self, function: FunctionNode) -> HelperInliner:
        """The extractor of the module that defines `function` (another file for imported helpers)."""
        other = self.remote_modules.get(function)
        if other is None:
            return self
        child = self.children.get(other.path)
        if child is None:
            child = type(self)(other, self.max_paths, self.max_depth, self.max_steps)
            child.record_events = self.record_events
            child.summaries = self.summaries  # one cache and one set of recordings per analysis
            child.conditions = self.conditions  # and one record of where branch tests came from
            self.children[other.path] = child
        return child

    def bind_call_arguments(
        self,
        call: ast.Call,
        function: FunctionNode,
        bound_self: bool,
        state: State,
        frame: Frame,
        known: dict[int, Expr],
        receiver: str = "self",
    ) -> dict[str, Expr]:
        params = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
        env: dict[str, Expr] = {}
        if bound_self and params:
            # Another object than the caller's `self`: its own value, so that what its method reads
            # of it is named after it (two objects' `self.flag` are two values).
            held = None if receiver == "self" else self.held_value(receiver.split("."), state, frame)
            env[params[0]] = held or Atom("self", "shared")
            prefix = receiver + "."
            for key, value in state.env.items():
                if key.startswith(prefix):
                    env["self." + key[len(prefix) :]] = value
            params = params[1:]
        defaults = function.args.defaults
        offset = len(params) - len(defaults)
        for index, name in enumerate(params):
            if index >= offset:
                env[name] = self.pure(defaults[index - offset], State({}), frame)
            else:
                env[name] = Atom(f"param:{name}@{where_of(call)}", "shared")
        for kwarg, default in zip(function.args.kwonlyargs, function.args.kw_defaults, strict=False):
            env[kwarg.arg] = (
                self.pure(default, State({}), frame) if default is not None else Atom(kwarg.arg, "shared")
            )
        for index, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                break
            if index < len(params):
                env[params[index]] = self.pure(arg, state, frame, known)
        for keyword in call.keywords:
            if keyword.arg is not None:
                env[keyword.arg] = self.pure(keyword.value, state, frame, known)
        if function not in self.remote_modules:
            self._infer_handed(function, env)
        owner = self.remote_modules.get(function, self.module)
        return declared_entry(function, env, owner.tree)

    def _infer_handed(self, function: FunctionNode, env: dict[str, Expr]) -> None:
        """An object of unknown class handed to a function of the file takes the one framework
        class its use on both sides of the call fits (`inferred_types.handed_uses`): the caller's
        `self.engine.backward(loss)` and the callee's `engine.save_checkpoint(d)` are one object."""
        for arg in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]:
            value = env.get(arg.arg)
            if _untyped(value):
                inferred = infer_parameter(self.module, function, arg)
                if inferred is not None:
                    env[arg.arg] = inferred


def _untyped(value: Expr | None) -> bool:
    """An object the caller holds of no known class (not a catalogued type, nor one of the file's
    classes or functions)."""
    return (
        isinstance(value, Atom)
        and value.kind == "shared"
        and not value.synced
        and not value.name.startswith(("type:", EXACT, SUBCLASS, FUNCTION, PARTIAL, BOUND))
    )


def _delivered(value: Expr | None) -> bool:
    """A value a collective made the same on every rank of its group (`uniform_after`)."""
    return isinstance(value, Atom) and value.name.startswith(DELIVERED)


def _handed_containers(call: ast.Call, function: FunctionNode, bound_self: bool) -> dict[str, ast.expr]:
    """The helper's parameters that hold, for the whole call, the object the caller names by the
    argument (a name or an attribute): what a collective fills in place through the parameter, it
    fills in the caller's object. A parameter the helper rebinds holds another object after that."""
    params = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    if bound_self:
        params = params[1:]
    passed: dict[str, ast.expr] = {}
    for index, argument in enumerate(call.args):
        if isinstance(argument, ast.Starred):
            break
        if index < len(params):
            passed[params[index]] = argument
    keywords = {a.arg for a in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]}
    passed.update({k.arg: k.value for k in call.keywords if k.arg is not None and k.arg in keywords})
    rebound = _rebound_names(function)
    return {
        name: argument
        for name, argument in passed.items()
        if isinstance(argument, (ast.Name, ast.Attribute)) and name not in rebound
    }


@lru_cache(maxsize=4096)
def _rebound_names(function: FunctionNode) -> frozenset[str]:
    # Once per function: a helper is inlined at every call of it.
    return frozenset(
        node.id
        for node in nodes_under(function)
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del))
    )


def _small(value: Expr, limit: int = MAX_KEY_NODES) -> bool:
    """Few enough nodes to hash and compare cheaply (values are DAGs: a tree walk may explode)."""
    stack: list[Expr] = [value]
    seen = 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > limit:
            return False
        if isinstance(node, GroupVal):
            stack.extend(part for part in (node.members, node.color) if part is not None)
        else:
            stack.extend(children(node))
    return True


def replay_cost(summary: Summary) -> int:
    """The work of replaying `summary`, in steps: one for each final state it rebuilds, each
    event it rebases onto the caller, and each loop region it passes on (at least one)."""
    events = sum(len(result.events) for result in summary.results)
    return max(1, len(summary.results) + events + len(summary.loops))


def _summary_key(
    function: FunctionNode, inner: Frame, bound_self: bool, env: dict[str, Expr], mode: tuple[object, ...]
) -> tuple[Any, ...] | None:
    """`mode`: whether events are recorded, whether the reduced mode runs and whether helpers are
    opaque there (steps and paths are counted differently, so its runs are reused only by itself),
    and the loops around the call (a cached first call is followed differently inside them)."""
    if not all(_small(value) for value in env.values()):
        return None
    return (function, inner.class_name, bound_self, inner.depth, tuple(env.items()), mode)


def _snapshot(runner: HelperInliner) -> Snapshot:
    return frozenset(runner.nested.items()), frozenset(runner.set_names)


def _touch(recordings: list[Recording], runner: HelperInliner) -> None:
    """`runner` is about to run a helper body: its state is an input of the innermost recording
    (which passes it on to the enclosing ones when done)."""
    if recordings and id(runner) not in recordings[-1].touched:
        recordings[-1].touched[id(runner)] = (runner, _snapshot(runner))


def _branch_answer(test: Expr, negated_own: bool, conds: tuple[Expr, ...]) -> bool | None:
    """What `HelperInliner._branch` decides for `test` under the caller's condition `conds`, when the
    helper's own conditions hold the test's negation or not (they never hold the test itself)."""
    if test in conds:
        return True
    if negated_own or negate(test) in conds:
        return False
    return None


def _summary_holds(summary: Summary, caller: State, frame: Frame) -> bool:
    """The recorded run would come out the same if run at this call."""
    for runner, before, _ in summary.touched:
        if _snapshot(runner) != before:
            return False
    for function, outside in summary.recursion:
        if frame.stack.count(function) != outside:
            return False
    return all(
        _branch_answer(test, negated_own, caller.conds) == truth
        for test, negated_own, truth in summary.queries
    )


def _pass_on(
    summary: Summary, recording: Recording, caller: State, frame: Frame, loops: tuple[LoopOp, ...]
) -> None:
    """A summary applied inside a run being recorded: what the summary read from outside its call
    is read from outside the recorded run too, unless the recorded run itself decides it."""
    for runner, before, _ in summary.touched:
        recording.touched.setdefault(id(runner), (runner, before))
    own_stack = frame.stack[recording.outer_stack :]
    recording.recursion.extend(
        (function, outside - own_stack.count(function)) for function, outside in summary.recursion
    )
    own = caller.conds[recording.prefix :]
    for test, negated_own, truth in summary.queries:
        if test not in own:
            recording.queries.append((test, negated_own or negate(test) in own, truth))
    recording.loops.extend(loops)  # in this call's terms (rebased when the summary is reused)


def _summarise(
    recording: Recording,
    finals: list[State],
    caller: State,
    inner: Frame,
    steps: int,
    bound_self: bool,
    declared: frozenset[str],
) -> Summary:
    prefix, events = len(caller.conds), len(caller.events)
    results = tuple(
        HelperResult(
            final.conds[prefix:],
            final.events[events:],
            final.exit,
            final.returned,
            tuple(
                (name, value)
                for name, value in final.env.items()
                if (name.startswith("self.") and bound_self)
                or name in declared
                or is_filled_key(name)
                or _delivered(value)  # a parameter a collective filled (see `inline`)
            ),
        )
        for final in finals
    )
    return Summary(
        caller.conds,
        inner.chain,
        results,
        steps,
        tuple(recording.queries),
        tuple(recording.recursion),
        tuple((runner, before, _snapshot(runner)) for runner, before in recording.touched.values()),
        tuple(recording.loops),
    )
