"""Expressions with effects, and the object protocols that run code of the file without a call:
`@property` getters read as attributes, and `@contextlib.contextmanager` generators entered by
`with`.

In: an expression (or a `with` statement), the path's `State` and `Frame`. Out: the states after
it, each with the expression's value (`eval`, `eval_with_calls`), or the states after the whole
`with` statement (`with_statement`).

* A call that may communicate or exit (`calls.CallResolver.has_effect`) is run: a collective is
  recorded, a helper inlined (helpers.py), a callback noted.
* An attribute read that is a `@property` getter of a class of the file (`self.is_last_stage`,
  `trainer.should_stop` where `trainer` holds an object of the file's class) is a call of the
  getter on that object: it runs like a method (`HelperInliner.inline` with the holder as the
  receiver), and what it returns is the attribute's value. Only the builtin `property` (not
  `functools.cached_property`, which runs once per object).
* `with cm(...) as x:` where `cm` is a generator function (or method) of the file decorated with
  `contextlib.contextmanager` runs the generator's code up to its `yield` (with `x` bound to the
  yielded value), then the body in the caller's frame, then the generator's code after the `yield`.
  An exception of the body (a `raise` path) is raised at the `yield`: only the generator's
  `finally` and `except` clauses run; a `return`, `break` or `continue` of the body resumes the
  generator normally (Python calls `__exit__` without an exception) and takes effect after it.
  Supported: every `yield` a statement of its own (`yield v`, `x = yield v`), none inside a loop;
  otherwise, and for generators of other files, the call is run as a plain helper before the body
  (as before).
* `with obj:` / `with Cls(...):` of a class-based context manager: `__enter__` (`__aenter__`) runs
  at the item, before the body, and `__exit__` (`__aexit__`) after it, also on a path that leaves
  the body by `return`, `break` or `continue` (not on one that raises). A class of the file runs
  like a method of the object (the dotted name that holds it is the receiver); a framework class
  whose catalogued (or summarised) method it is issues that method's collectives at the item.

The caller's variables travel through the generator's code in its states, under `CALLER` keys that
no Python name can clash with, so that each path after the `yield` resumes the caller path it
came from.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import lru_cache

from collcheck.findings import Budget
from collcheck.static.calls import NONBLOCKING, CallKind, HeldTarget, Resolution
from collcheck.static.comprehension_loops import ComprehensionLoops, comprehensions, target_names
from collcheck.static.gradient_sync import paused_ops
from collcheck.static.handlers import ExceptionFlow
from collcheck.static.handoff import callback_event
from collcheck.static.loader import FunctionNode, ModuleInfo, property_names
from collcheck.static.method_wrappers import is_original_call, wrapped_methods, wrapper_of
from collcheck.static.module_hooks import CALL, HOOKED_METHODS, ClassHooks, Hook, module_hook_table
from collcheck.static.names import dotted, qualified_name
from collcheck.static.program import Exit, ExitKind, Site
from collcheck.static.receivers import ObjectClass, method_of, object_class
from collcheck.static.state import Frame, PathLimitExceeded, State
from collcheck.static.symbolic import Atom, Const, Expr, opaque
from collcheck.static.syntax import calls_in_order, effects_in_order, global_names, is_filled_key
from collcheck.static.values import where_of

CONTEXT_DECORATORS = frozenset({"contextlib.contextmanager", "contextlib.asynccontextmanager"})
CALLER = "^caller:"  # a caller's variable carried through a generator's code (not a Python name)
RESUMED = "^resumed"  # this path went through the `yield` (the body ran)
PENDING_EXIT = "^exit"  # the body's `return`/`break`/`continue`, taken once the generator is done
ENTER = ("__enter__", "__aenter__")  # the context-manager methods of `with` and `async with`
EXIT = ("__exit__", "__aexit__")
_LEAVES_THROUGH_EXIT = frozenset({ExitKind.RETURN, ExitKind.BREAK, ExitKind.CONTINUE})
MAX_PROPERTY_PARTS = 8  # `a.b.c.prop`: holders this long are read


@dataclass
class GeneratorRun:
    """One `with cm(...):` being run through its generator."""

    stmt: ast.With | ast.AsyncWith
    index: int  # the item of `stmt` this generator entered
    chain: tuple[Site, ...]  # the generator frame's chain: its own `yield`s, not another call's
    caller: Frame
    receiver: str | None  # the dotted name holding the object of a generator method
    declared: frozenset[str]
    entry_env: dict[str, Expr]  # the caller's variables when the `with` was entered
    pending: list[tuple[Exit, Expr | None]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class HookedCall:
    """A call of an entry point (`state_dict`, the object's call) of an object whose class
    registered hooks on it; `receiver`: the dotted name that holds the object."""

    owner: ObjectClass
    receiver: str
    hooks: ClassHooks


class ObjectProtocols(ExceptionFlow):
    """Evaluation with effects: calls, property getters, generator context managers."""

    def __init__(self, module: ModuleInfo, max_paths: int, max_depth: int, max_steps: int) -> None:
        super().__init__(module, max_paths, max_depth, max_steps)
        self.effects = 0  # expressions evaluated that ran a call (the reduced mode's step count)
        self.property_names = property_names(module)
        self.context_generators = _context_generator_names(module)
        self.generator_runs: dict[FunctionNode, list[GeneratorRun]] = {}
        self.module_hooks = module_hook_table(module)
        self.wrapped = wrapped_methods(module)
        self.comprehension_loops = ComprehensionLoops()

    def eval(self, node: ast.expr | None, state: State, frame: Frame) -> list[tuple[State, Expr]]:
        """Evaluate, running the calls that communicate or may (helpers); may fork the state."""
        return [(current, value) for current, value, _ in self.eval_with_calls(node, state, frame)]

    def eval_with_calls(
        self, node: ast.expr | None, state: State, frame: Frame
    ) -> list[tuple[State, Expr, dict[int, Expr]]]:
        """`eval`, with the values of the calls it ran (by node id): a part of `node` evaluated
        again (a `range(...)` argument for the trip count) reads them instead of a black box."""
        if node is None:
            return [(state, Const(None), {})]
        loops = self._posting_loops(node, state, frame) if comprehensions(node) else []
        if loops:  # `[P2POp(dist.isend, t, p) for p in peers]`: run as its loop first
            names = {name: state.env.get(name) for loop in loops for name in target_names(loop)}
            ran = self.exec_block(list(loops), [state], frame)
            for after in ran:  # the comprehension's variables are its own
                after.env.update({name: value for name, value in names.items() if value is not None})
                for name in (name for name, value in names.items() if value is None):
                    after.env.pop(name, None)
            return [result for after in ran for result in self._eval_effects(node, after, frame)]
        return self._eval_effects(node, state, frame)

    def _posting_loops(self, node: ast.expr, state: State, frame: Frame) -> list[ast.For]:
        """The loops of the comprehensions of `node` whose element posts or prepares a transfer."""
        found: list[ast.For] = []
        for comprehension in comprehensions(node):
            posting = any(
                isinstance(call, ast.Call)
                and (spec := self.op_spec(call, state, frame.class_name)) is not None
                and spec.kind == NONBLOCKING
                for call in ast.walk(comprehension.elt)
            )
            loop = self.comprehension_loops.loop(comprehension) if posting else None
            if loop is not None:
                found.append(loop)
        return found

    def _eval_effects(
        self, node: ast.expr, state: State, frame: Frame
    ) -> list[tuple[State, Expr, dict[int, Expr]]]:
        order = effects_in_order(node, self.property_names) if self.property_names else calls_in_order(node)
        steps: list[tuple[ast.Call | ast.Attribute, HeldTarget | None]] = []
        for step in order:
            if isinstance(step, ast.Call):
                if self.has_effect(step, frame, state):
                    steps.append((step, None))
            else:
                getter = self.property_read(step, frame, state)
                if getter is not None:
                    steps.append((step, getter))
        if not steps:
            return [(state, self.pure(node, state, frame), {})]
        self.effects += 1
        pending: list[tuple[State, dict[int, Expr]]] = [(state, {})]
        for step, getter in steps:
            advanced: list[tuple[State, dict[int, Expr]]] = []
            for current, known in pending:
                if getter is None:
                    assert isinstance(step, ast.Call)
                    ran = self.eval_call(step, current, frame, known)
                else:
                    assert isinstance(step, ast.Attribute)
                    ran = self.read_property(step, getter, current, frame, known)
                for after, value in ran:
                    advanced.append((after, {**known, id(step): value}))
            pending = advanced
            if len(pending) > self.max_paths:
                raise PathLimitExceeded(f"more than {self.max_paths} paths", Budget.PATHS)
        return [(current, self.pure(node, current, frame, known), known) for current, known in pending]

    def eval_call(
        self, call: ast.Call, state: State, frame: Frame, known: dict[int, Expr]
    ) -> list[tuple[State, Expr]]:
        wrapped = self.wrapper_at(call, frame, state)
        if wrapped is not None:  # `obj.compute()` of a method `__init__` rebound to a wrapper
            method, owner, receiver = wrapped
            return self.inline(call, method, owner.name, True, state, frame, known, receiver)
        hooked = self.hooks_at(call, frame, state)
        if hooked is not None:
            return self._run_hooked(call, hooked, state, frame, known)
        resolved = self.resolve(call, frame, state)
        results = self._run_call(call, resolved, state, frame, known)
        if resolved.kind in (CallKind.COLLECTIVE, CallKind.HELPER):
            for after, _ in results:
                self.data_combined(call, after, frame)
        return results

    def _run_call(
        self, call: ast.Call, resolved: Resolution, state: State, frame: Frame, known: dict[int, Expr]
    ) -> list[tuple[State, Expr]]:
        if resolved.kind is CallKind.EXIT:
            state.exit = Exit(ExitKind.EXIT, self.module.path, call.lineno, call.col_offset, frame.chain)
            return [(state, Const(None))]
        if resolved.spec is not None:
            return [self.communicate(call, resolved.spec, state, frame, known)]
        self.type_in_place(call, state)
        if resolved.target is None:
            if self.record_events and resolved.kind is CallKind.CALLBACK:
                handed = self.handoff(call, frame)
                ops = handed.ops if handed is not None else None
                sent = callback_event(call, self.module.path, frame, self.remote_call(call), ops)
                state.events = (*state.events, sent)
            return [(state, self.pure(call, state, frame, known))]
        function, class_name, bound_self = resolved.target
        receiver = resolved.receiver or "self"
        if resolved.partial is not None:  # `p(x)` of `p = partial(f, a)` runs `f(a, x)`
            known = {**known, **resolved.partial.values}
            call = resolved.partial.call(call)
        return self.inline(call, function, class_name, bound_self, state, frame, known, receiver)

    # ------------------------------------------------------------------------ module hooks

    def has_effect(self, call: ast.Call, frame: Frame, state: State | None = None) -> bool:
        return (
            super().has_effect(call, frame, state)
            or self.wrapper_at(call, frame, state) is not None
            or self.hooks_at(call, frame, state) is not None
        )

    def wrapper_at(
        self, call: ast.Call, frame: Frame, state: State | None
    ) -> tuple[ast.FunctionDef, ObjectClass, str] | None:
        """The wrapper that `call` (`obj.NAME(...)`) runs, where the object's class rebinds NAME in
        its `__init__` (method_wrappers.py), with the object's class and the name holding it."""
        func = call.func
        if state is None or not self.wrapped or not isinstance(func, ast.Attribute) or is_original_call(call):
            return None
        held = self._held_object(func.value, frame, state)
        wrapped = wrapper_of(self.module, held[0].name, func.attr) if held is not None else None
        return (wrapped.method, *held) if wrapped is not None and held is not None else None

    def hooks_at(self, call: ast.Call, frame: Frame, state: State | None) -> HookedCall | None:
        """The hooks a class of the file registered on the object that `call` runs an entry point
        of (`model.state_dict()`, `model(x)`: module_hooks.py), with the dotted name holding it."""
        if state is None or not self.module_hooks:
            return None
        func = call.func
        hooked_method = isinstance(func, ast.Attribute) and func.attr in HOOKED_METHODS
        holder, entry = (
            (func.value, func.attr) if isinstance(func, ast.Attribute) and hooked_method else (func, CALL)
        )
        held = self._held_object(holder, frame, state)
        hooks = self.module_hooks.get((held[0].name, entry)) if held is not None else None
        if held is None or hooks is None or (hooked_method and method_of(self.module, held[0], entry)):
            return None  # no hooks, or the class's own `state_dict` replaces the one that runs them
        return HookedCall(held[0], held[1], hooks)

    def _held_object(self, holder: ast.expr, frame: Frame, state: State) -> tuple[ObjectClass, str] | None:
        """The class of the file of the object `holder` names (`self` in a method: its class or a
        subclass), and the dotted name."""
        parts = dotted(holder)
        if not parts or len(parts) > MAX_PROPERTY_PARTS:
            return None
        if parts == ["self"]:
            owner = ObjectClass(frame.class_name, False) if frame.class_name else None
        elif self.local_imports.lookup(parts[0]) is None:
            owner = object_class(self.module, self.held_value(parts, state, frame))
        else:
            return None
        return (owner, ".".join(parts)) if owner is not None else None

    def _run_hooked(
        self, call: ast.Call, hooked: HookedCall, state: State, frame: Frame, known: dict[int, Expr]
    ) -> list[tuple[State, Expr]]:
        """The hooks registered to run before the entry point, the call itself, then those after."""
        current: list[tuple[State, Expr]] = [(state, Const(None))]
        for hook in hooked.hooks.before:
            current = self._run_hook(call, hook, hooked, current, frame)
        ran: list[tuple[State, Expr]] = []
        for before, _ in current:
            if before.exit is not None:
                ran.append((before, Const(None)))
            else:
                ran.extend(self._run_call(call, self.resolve(call, frame, before), before, frame, known))
        for hook in hooked.hooks.after:
            ran = self._run_hook(call, hook, hooked, ran, frame)
        return ran

    def _run_hook(
        self, call: ast.Call, hook: Hook, hooked: HookedCall, states: list[tuple[State, Expr]], frame: Frame
    ) -> list[tuple[State, Expr]]:
        """`hook(module, ...)` (a method run on the object, or a function of the file) on each state
        that goes on; the entry point's value is kept."""
        if hook.bound:
            function = method_of(self.module, hooked.owner, hook.name)
        else:
            function = self.module.functions.get(hook.name)
        if function is None:
            return states
        arity = len([*function.args.posonlyargs, *function.args.args]) - hook.bound
        placeholders: list[ast.expr] = [
            ast.copy_location(ast.Constant(None), call) for _ in range(max(arity, 0))
        ]
        where = f"hook@{where_of(call)}"
        known: dict[int, Expr] = {id(p): opaque(f"{where}#{i}", ()) for i, p in enumerate(placeholders)}
        if placeholders:  # the hooked module itself comes first
            held = self.held_value(hooked.receiver.split("."), states[0][0], frame) if states else None
            known[id(placeholders[0])] = held or Atom("self", "shared")
        hook_call = ast.copy_location(ast.Call(ast.Name(function.name, ast.Load()), placeholders, []), call)
        results: list[tuple[State, Expr]] = []
        for state, value in states:
            if state.exit is not None:
                results.append((state, value))
                continue
            owner = hooked.owner.name if hook.bound else None
            for after, _ in self.inline(
                hook_call, function, owner, hook.bound, state, frame, known, hooked.receiver
            ):
                results.append((after, value))
        return results

    # ------------------------------------------------------------------------ property getters

    def property_read(self, node: ast.Attribute, frame: Frame, state: State) -> HeldTarget | None:
        """The `@property` getter of a class of the file that reading `node` runs, with the dotted
        name of the object it is read from; None for any other attribute."""
        parts = dotted(node.value)
        if not parts or len(parts) > MAX_PROPERTY_PARTS or self.local_imports.lookup(parts[0]) is not None:
            return None
        if ".".join((*parts, node.attr)) in state.env:
            return None  # assigned on this path (a plain attribute, or the object's own copy)
        if parts in (["self"], ["cls"]):
            if frame.class_name is None:
                return None
            getter = method_of(self.module, ObjectClass(frame.class_name, True), node.attr, getter=True)
            return HeldTarget(getter, frame.class_name, "self") if getter is not None else None
        owner = object_class(self.module, self.held_value(parts, state, frame))
        if owner is None:
            return None
        getter = method_of(self.module, owner, node.attr, getter=True)
        return HeldTarget(getter, owner.name, ".".join(parts)) if getter is not None else None

    def read_property(
        self, node: ast.Attribute, getter: HeldTarget, state: State, frame: Frame, known: dict[int, Expr]
    ) -> list[tuple[State, Expr]]:
        """The getter run as a method call on its object; where it is not run (a quiet getter
        whose value is the same on every rank) the attribute keeps the value it reads as."""
        call = ast.copy_location(ast.Call(node, [], []), node)
        plain = {**known, id(call): self.pure(node, state, frame, known)}
        receiver = getter.receiver or "self"
        return self.inline(call, getter.function, getter.class_name, True, state, frame, plain, receiver)

    # ------------------------------------------------------------------ generator context managers

    def with_statement(self, stmt: ast.With | ast.AsyncWith, state: State, frame: Frame) -> list[State]:
        return self.with_items(stmt, 0, [state], frame)

    def with_items(
        self, stmt: ast.With | ast.AsyncWith, index: int, states: list[State], frame: Frame
    ) -> list[State]:
        """`stmt`'s items from `index` on entered, then its body."""
        if index == len(stmt.items):
            return self.with_body(stmt, states, frame)
        item = stmt.items[index]
        results: list[State] = []
        for current in states:
            target = self._context_generator(item.context_expr, current, frame)
            if target is not None:
                results.extend(self._enter_generator(stmt, index, target, current, frame))
                continue
            entered = []
            for evaluated, value in self.eval(item.context_expr, current, frame):
                for after in self._context_method(item, stmt, ENTER, value, evaluated, frame):
                    if item.optional_vars is not None:
                        self.bind(
                            item.optional_vars, opaque(f"with@{where_of(item.context_expr)}", (value,)), after
                        )
                    entered.append(after)
            for left in self.with_items(stmt, index + 1, entered, frame):
                pending = left.exit
                if pending is not None and pending.kind not in _LEAVES_THROUGH_EXIT:
                    results.append(left)  # a `raise` or process exit: what `__exit__` does is not followed
                    continue
                left.exit = None  # `return`, `break`, `continue` run `__exit__`, then take effect
                manager = self.pure(item.context_expr, left, frame)
                for after in self._context_method(item, stmt, EXIT, manager, left, frame):
                    if after.exit is None:
                        after.exit = pending
                    results.append(after)
        return results

    def _context_method(
        self,
        item: ast.withitem,
        stmt: ast.With | ast.AsyncWith,
        names: tuple[str, str],
        manager: Expr,
        state: State,
        frame: Frame,
    ) -> list[State]:
        """`__enter__` (or `__exit__`; `names`: of `with` and of `async with`) of the manager, run at
        the `with` item: a framework class's catalogued method (`with GatheredParameters(ps):`, `with
        section:` of a typed `section`) is issued there; a class of the file's own is run like a
        method of the object (`with Section(name):`), the dotted name that holds it its receiver."""
        name = names[isinstance(stmt, ast.AsyncWith)]
        func = ast.copy_location(
            ast.Attribute(value=item.context_expr, attr=name, ctx=ast.Load()), item.context_expr
        )
        call = ast.copy_location(ast.Call(func=func, args=[], keywords=[]), item.context_expr)
        if self.catalog.method_specs(name):
            spec = self.op_spec(call, state, frame.class_name)
            if spec is not None:
                return [self.communicate(call, spec, state, frame, {})[0]]
        owner = object_class(self.module, manager)
        method = method_of(self.module, owner, name) if owner is not None else None
        if owner is None or method is None:
            return [state]
        parts = dotted(item.context_expr)
        receiver = ".".join(parts) if parts else f"{CALLER}with@{where_of(item.context_expr)}"
        known = {id(item.context_expr): manager}
        return [
            after for after, _ in self.inline(call, method, owner.name, True, state, frame, known, receiver)
        ]

    def with_body(self, stmt: ast.With | ast.AsyncWith, states: list[State], frame: Frame) -> list[State]:
        paused = (
            paused_ops(self, stmt.items, states[0], frame) if states and self.catalog.gradient_syncs else None
        )
        if paused:  # `with model.no_sync():` the backward of the wrapped module does not reduce
            before, self.paused_syncs = self.paused_syncs, self.paused_syncs | paused
            try:
                return self.exec_block(stmt.body, states, frame)
            finally:
                self.paused_syncs = before
        if not any(_joins_uneven_inputs(item.context_expr) for item in stmt.items):
            return self.exec_block(stmt.body, states, frame)
        # `with model.join():` / `with Join([model]):` lets ranks run different numbers of forward
        # passes of a wrapped model: the ranks that ran out shadow the others' collectives.
        self.joined += 1
        try:
            return self.exec_block(stmt.body, states, frame)
        finally:
            self.joined -= 1

    def _context_generator(self, node: ast.expr, state: State, frame: Frame) -> Resolution | None:
        """The resolution of `cm(...)` when it runs a `@contextmanager` generator of this file
        whose `yield`s this layer follows."""
        if not isinstance(node, ast.Call) or not self.context_generators:
            return None
        func = node.func
        name = (
            func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        )
        if name not in self.context_generators:
            return None
        resolved = self.resolve(node, frame, state)
        if resolved.kind is not CallKind.HELPER or resolved.target is None or resolved.partial is not None:
            return None
        function = resolved.target[0]
        if function in self.remote_modules or not _is_context_generator(function, self.module):
            return None
        if frame.depth >= self.max_depth or function in frame.stack:
            return None
        return resolved

    def _enter_generator(
        self, stmt: ast.With | ast.AsyncWith, index: int, resolved: Resolution, state: State, frame: Frame
    ) -> list[State]:
        call = stmt.items[index].context_expr
        assert resolved.target is not None and isinstance(call, ast.Call)
        function, class_name, bound_self = resolved.target
        receiver = (resolved.receiver or "self") if bound_self else None
        arguments = ast.copy_location(
            ast.Tuple([*call.args, *(k.value for k in call.keywords)], ast.Load()), call
        )
        results: list[State] = []
        for current, _, known in self.eval_with_calls(arguments, state, frame):
            env = self.bind_call_arguments(
                call, function, bound_self, current, frame, known, receiver or "self"
            )
            declared = global_names(function) | {key for key in current.env if is_filled_key(key)}
            for name in declared & set(current.env):
                env[name] = current.env[name]
            site = Site(
                frame.function,
                function.name,
                self.module.path,
                call.lineno,
                call.col_offset,
                self.module.path,
            )
            owner = self.owner_class(function, class_name)
            inner = Frame(
                function.name,
                owner,
                (*frame.chain, site),
                frame.depth + 1,
                (*frame.stack, function),
                loop=frame.loop,
            )
            run = GeneratorRun(stmt, index, inner.chain, frame, receiver, declared, dict(current.env))
            self.generator_runs.setdefault(function, []).append(run)
            saved = self.local_imports
            self.local_imports = self.function_imports(function)
            try:
                finals = self.exec_block(function.body, [State(env, current.conds, current.events)], inner)
            finally:
                self.local_imports = saved
                self.generator_runs[function].pop()
            results.extend(self._leave_generator(run, final, call) for final in finals)
        return results

    def at_yield(self, stmt: ast.Expr | ast.Assign, state: State, frame: Frame) -> list[State] | None:
        """A `yield` statement of a generator entered by `with`: the body runs here, in the
        caller's frame; None for any other `yield`."""
        runs = self.generator_runs.get(frame.stack[-1]) if frame.stack else None
        if not runs or runs[-1].chain != frame.chain:
            return None
        run = runs[-1]
        assert isinstance(stmt.value, ast.Yield)
        results: list[State] = []
        for current, yielded in self.eval(stmt.value.value, state, frame):
            caller = State(dict(run.entry_env), current.conds, current.events)
            self._carry(current.env, caller.env, "self.", f"{run.receiver}.", run)
            item = run.stmt.items[run.index]
            if item.optional_vars is not None:
                self.bind(item.optional_vars, yielded, caller)
            saved = self.local_imports
            self.local_imports = (
                self.function_imports(run.caller.stack[-1]) if run.caller.stack else self.module.imports
            )
            try:
                after_body = self.with_items(run.stmt, run.index + 1, [caller], run.caller)
            finally:
                self.local_imports = saved
            for after in after_body:
                resumed = State(dict(current.env), after.conds, after.events)
                self._carry(after.env, resumed.env, f"{run.receiver}.", "self.", run)
                resumed.env.update((CALLER + key, value) for key, value in after.env.items())
                resumed.env[RESUMED] = Const(True)
                if after.exit is not None and after.exit.kind in (ExitKind.RAISE, ExitKind.EXIT):
                    resumed.exit = after.exit  # thrown into the generator at its `yield`
                elif after.exit is not None:
                    resumed.env[PENDING_EXIT] = Atom(f"pending:{len(run.pending)}", "shared")
                    run.pending.append((after.exit, after.returned))
                if isinstance(stmt, ast.Assign):
                    for target in stmt.targets:
                        self.bind(target, Const(None), resumed)  # `x = yield`: nothing is sent
                results.append(resumed)
        return results

    def _leave_generator(self, run: GeneratorRun, final: State, call: ast.Call) -> State:
        """The caller's state after the generator ran to its end on one path."""
        carried = {key[len(CALLER) :]: value for key, value in final.env.items() if key.startswith(CALLER)}
        if RESUMED not in final.env and (final.exit is None or final.exit.kind is ExitKind.RETURN):
            # It ended without a `yield`: `with` raises RuntimeError (the generator didn't yield).
            left = State(dict(run.entry_env), final.conds, final.events)
            left.exit = Exit(ExitKind.RAISE, self.module.path, call.lineno, call.col_offset, run.caller.chain)
            return left
        left = State(carried if RESUMED in final.env else dict(run.entry_env), final.conds, final.events)
        self._carry(final.env, left.env, "self.", f"{run.receiver}.", run)
        if final.exit is not None and final.exit.kind in (ExitKind.RAISE, ExitKind.EXIT):
            left.exit = final.exit
            return left
        token = final.env.get(PENDING_EXIT)
        if isinstance(token, Atom) and token.name.startswith("pending:"):
            left.exit, left.returned = run.pending[int(token.name.partition(":")[2])]
        return left

    def _carry(
        self, source: dict[str, Expr], target: dict[str, Expr], prefix: str, to: str, run: GeneratorRun
    ) -> None:
        """The object's attributes (`prefix` there, `to` here) and the declared globals of one side
        of the `yield` handed to the other."""
        if run.receiver is not None:
            for key, value in source.items():
                if key.startswith(prefix):
                    target[to + key[len(prefix) :]] = value
        for key in run.declared:
            if key in source:
                target[key] = source[key]


def _context_generator_names(module: ModuleInfo) -> frozenset[str]:
    """Names of the functions and methods of the file decorated as context managers."""
    functions = [
        *module.functions.values(),
        *(m for info in module.classes.values() for m in info.methods.values()),
    ]
    return frozenset(f.name for f in functions if _decorated_as_context(f, module))


def _decorated_as_context(function: FunctionNode, module: ModuleInfo) -> bool:
    return any(qualified_name(d, module.imports) in CONTEXT_DECORATORS for d in function.decorator_list)


@lru_cache(maxsize=1024)
def _simple_yields(function: FunctionNode) -> bool:
    """Every `yield` of the generator is a statement of its own, outside loops; there is one."""
    found = False
    stack: list[tuple[ast.AST, bool]] = [(statement, False) for statement in function.body]
    while stack:
        node, in_loop = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.YieldFrom):
            return False
        if isinstance(node, (ast.Expr, ast.Assign)) and isinstance(node.value, ast.Yield):
            if in_loop:
                return False
            found = True
            stack.extend((child, in_loop) for child in ast.iter_child_nodes(node.value))
            continue
        if isinstance(node, ast.Yield):
            return False  # inside an expression: not followed
        looping = in_loop or isinstance(node, (ast.For, ast.AsyncFor, ast.While))
        stack.extend((child, looping) for child in ast.iter_child_nodes(node))
    return found


def _is_context_generator(function: FunctionNode, module: ModuleInfo) -> bool:
    return _decorated_as_context(function, module) and _simple_yields(function)


def _joins_uneven_inputs(context: ast.expr) -> bool:
    """`model.join(...)` (DDP's Join context) or `Join([...])` (torch.distributed.algorithms)."""
    if not isinstance(context, ast.Call):
        return False
    func = context.func
    return (isinstance(func, ast.Attribute) and func.attr == "join") or (
        isinstance(func, (ast.Name, ast.Attribute))
        and (func.id if isinstance(func, ast.Name) else func.attr) == "Join"
    )
