"""The call resolver: what a call is, from the catalog, the module model and known types.

In: an `ast.Call`, the `Frame` it is made in and (where types matter) the path's `State`.
Out: one of `CallKind` (`resolve`) — a catalogued collective (with its `OpSpec`), a helper of the
run to inline (function, class, bound `self`; or a method of another object, a function held as a
value, a `functools.partial`: see `receivers`), an exit of the process, a call that hands a
communicating function to unknown code (a callback), or unknown code — and the facts the
interpreter needs about helpers: does a function communicate, may its return value depend on
the rank, does a decorator run it on some ranks only.
"""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass, replace
from enum import Enum

from collcheck.catalog import OpSpec
from collcheck.static.autograd_functions import APPLY, applied_forward
from collcheck.static.catalog_values import value_from_spec
from collcheck.static.conditions import ConditionSources, source_of
from collcheck.static.gradient_sync import backward_spec
from collcheck.static.group_values import GROUP_PLACES, type_of
from collcheck.static.loader import FunctionNode, ModuleInfo, inherited, remote_function
from collcheck.static.local_data import LocalData, combining_words, delivering_words
from collcheck.static.names import (
    PARTIAL_CALLS,
    dotted,
    nodes_under,
    qualified_name,
    scalar_calls,
    source_text,
    starts_a_process,
)
from collcheck.static.own_data import mark_assigned, mark_combined
from collcheck.static.receivers import (
    Partial,
    call_method,
    class_named,
    function_value,
    held_function,
    kept_function,
    method_of,
    object_class,
    object_value,
)
from collcheck.static.state import Frame, State
from collcheck.static.symbolic import (
    Atom,
    Expr,
)
from collcheck.static.values import ValueEvaluator, where_of
from collcheck.static.wrapped import communicating_types

EXIT_CALLS = frozenset({"sys.exit", "exit", "quit", "os._exit", "os.abort"})


CALLBACK_OP = "callback"
# The catalog kind of `isend`, `irecv`, `batch_isend_irecv`: a posted transfer that the peer's own
# post pairs with, in whatever order the two sides post them. Not an element of the collective
# sequence (collectives.communicate records no event for it), so handing one to unknown code
# (`P2POp(dist.irecv, ...)`) hands nothing the sequences compare.
NONBLOCKING = "p2p_nonblocking"
REMOTE_OP = "remote callback"  # a communicating callable sent to another process (RPC)


class CallKind(Enum):
    COLLECTIVE = "collective"  # a catalogued collective, point-to-point op or group creation
    HELPER = "helper"  # a function of the run, inlined at the call
    EXIT = "exit"  # the process ends (`sys.exit`)
    CALLBACK = "callback"  # unknown code handed a function that communicates
    UNKNOWN = "unknown"  # anything else: only its value matters


MAX_HANDED_DEPTH = 4  # helpers followed to learn what a handed callable issues
MAX_HOLDER_PARTS = 8  # `a.b.c.m()`: receivers this long are read (`held_value` recurses on them)


@dataclass(frozen=True, slots=True)
class Handoff:
    """Unknown code handed a communicating callable; `ops`: the collectives it may issue (None:
    not all known, so it may issue anything)."""

    ops: frozenset[str] | None

    def joined(self, other: Handoff) -> Handoff:
        if self.ops is None or other.ops is None:
            return Handoff(None)
        return Handoff(self.ops | other.ops)


@dataclass(frozen=True, slots=True)
class _Ops:
    ops: frozenset[str]
    communicates: bool  # a catalogued collective or a communicating helper is called
    unknown: bool  # some of what it issues is not known


# A helper to inline: the function, the class it is looked up in, and whether `self` is bound.
Target = tuple[FunctionNode, str | None, bool]


@dataclass(frozen=True, slots=True)
class Resolution:
    kind: CallKind
    spec: OpSpec | None = None  # COLLECTIVE
    target: Target | None = None  # HELPER
    # HELPER on an object other than `self` (`s.push(t)`, `self.ckpt.save()`): the dotted name that
    # holds it, whose attributes are the method's `self.*`
    receiver: str | None = None
    partial: Partial | None = None  # HELPER reached by calling a `functools.partial` of it


@dataclass(frozen=True, slots=True)
class HeldTarget:
    """A function of the file reached through what a name holds: a method of an object
    (`receiver`: the dotted name that holds it), a function handed on as a value (`fn(t)` in
    `def apply(fn, t)`), or a `functools.partial` of one (`partial`)."""

    function: FunctionNode
    class_name: str | None
    receiver: str | None
    partial: Partial | None = None


class CallResolver(ValueEvaluator):
    """Resolves the calls of one module; caches what it learns about its functions."""

    def __init__(self, module: ModuleInfo) -> None:
        super().__init__(module)
        self.nested: dict[str, FunctionNode] = {}  # functions defined inside the one being executed
        self.remote_modules: dict[FunctionNode, ModuleInfo] = {}  # helpers of other files: their module
        self.raises_followed = 0  # depth of `try` bodies whose helpers that may raise are run (handlers.py)
        self.paused_syncs: frozenset[str] = frozenset()  # gradient reductions a `with` suspends here
        self._callback_communicates: dict[FunctionNode, bool] = {}
        self._handed_ops: dict[tuple[FunctionNode, str | None], frozenset[str] | None] = {}
        self._lambda_ops: dict[tuple[ast.Lambda, str | None], _Ops] = {}
        self._returns: dict[FunctionNode, bool] = {}
        self._owners: dict[FunctionNode, str] | None = None
        self.conditions = ConditionSources()  # where each branch test came from (counterexamples)
        # Through a weak reference: bound methods of `self` in its own `local_data` would be a
        # cycle that keeps the resolver, its module and its tree alive until a full collection.
        resolver: CallResolver = weakref.proxy(self)
        self.local_data = LocalData(
            lambda call, function: resolver._combining_spec(call, function),
            lambda call, function: resolver._same_file_helper(call, function),
            lambda func: qualified_name(func, resolver.local_imports),
            combining_words(
                self.catalog.functions, tuple((m.method, m.spec.op) for m in self.catalog.methods)
            ),
            delivering_words(
                [*self.catalog.functions.items(), *((m.method, m.spec) for m in self.catalog.methods)]
            ),
        )

    def _combining_spec(self, call: ast.Call, function: FunctionNode) -> OpSpec | None:
        """The catalogued op of `call` in `function` (its parameters typed as annotated), for
        local_data.py. A summary of an installed package (docs/summaries.md) says which op a
        method issues but not which of its arguments is combined: those of a bundled entry of the
        same method, op and receiver."""
        arguments = [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
        typed = {a.arg: self.annotated_type(a) for a in arguments if a.annotation is not None}
        known = State({name: value for name, value in typed.items() if value is not None})
        spec = self.op_spec(call, known, self.owner_class(function, None))
        if spec is None or spec.operands or not isinstance(call.func, ast.Attribute):
            return spec
        entries = self.catalog.method_specs(call.func.attr)
        receivers = {r for entry in entries if entry.spec is spec for r in entry.receivers}
        for entry in entries:
            other = entry.spec
            alike = other.op == spec.op and bool(receivers & set(entry.receivers))
            if alike and other.operands and set(other.operands) <= set(spec.params):
                return replace(spec, operands=other.operands)
        return spec

    def own_data(self, target: ast.expr, state: State, frame: Frame, statement: ast.stmt) -> None:
        """After an assignment: own_data.mark_assigned."""
        mark_assigned(self.local_data, target, state, frame, statement)

    def data_combined(self, call: ast.Call, state: State, frame: Frame) -> None:
        """After a call that may combine this rank's own data: own_data.mark_combined."""
        mark_combined(self.local_data, call, where_of(call), state, frame)

    def annotated_type(self, arg: ast.arg) -> Expr | None:
        """`accelerator: Accelerator` makes method calls on it resolve through the catalog."""
        if arg.annotation is None:
            return None
        annotation = arg.annotation
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                annotation = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return None
        name = qualified_name(annotation, self.local_imports)
        if name is None:
            owner = class_named(self.module, self.local_imports, annotation)  # `s: Syncer`
            return object_value(self.module, owner, f"param:{arg.arg}", False) if owner else None
        known_types = set(self.catalog.types.values()) | set(self.catalog.types)
        for method in self.catalog.methods:
            known_types.update(method.receivers)
        if name in known_types:
            return Atom(f"type:{self.catalog.types.get(name) or name}@param:{arg.arg}", "shared")
        return None

    def _same_file_helper(self, call: ast.Call, function: FunctionNode) -> FunctionNode | None:
        """The function of this file `call` (in `function`) runs: by name, or `self.method`."""
        func = call.func
        if isinstance(func, ast.Name) and self.local_imports.lookup(func.id) is None:
            return self.module.functions.get(func.id)
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in ("self", "cls")
        ):
            owner = self.owner_class(function, None)
            if owner is None:
                return None
            return self._find_method(owner, func.attr) or kept_function(self.module, owner, func.attr)
        return None

    def resolve(self, call: ast.Call, frame: Frame, state: State | None = None) -> Resolution:
        """What `call` is; asked in this order, the first answer wins."""
        if self.exit_call(call):
            return Resolution(CallKind.EXIT)
        spec = self.op_spec(call, state, frame.class_name) or self._backward(call, frame, state)
        if spec is not None:
            return Resolution(CallKind.COLLECTIVE, spec=spec)
        target = self.local_target(call, frame)
        if target is not None:
            return Resolution(CallKind.HELPER, target=target)
        held = self.held_target(call, frame, state)
        if held is not None:
            bound = held.receiver is not None
            target = (held.function, held.class_name, bound)
            return Resolution(CallKind.HELPER, target=target, receiver=held.receiver, partial=held.partial)
        if self.passes_communicating_callback(call, frame):
            return Resolution(CallKind.CALLBACK)
        return Resolution(CallKind.UNKNOWN)

    def has_effect(self, call: ast.Call, frame: Frame, state: State | None = None) -> bool:
        """The interpreter must run `call` (it may communicate or exit), not only evaluate it: the
        same answer as `resolve(...).kind is not CallKind.UNKNOWN`, without building a Resolution
        (this is asked for every call of every expression evaluated)."""
        if self.op_spec(call, state, frame.class_name) is not None:
            return True
        if self._backward(call, frame, state) is not None:
            return True
        if self.exit_call(call):
            return True
        if qualified_name(call.func, self.local_imports) in self.catalog.types_in_place:
            return True  # `fully_shard(model)` changes what `model` is
        target = self.local_target(call, frame)
        if target is not None or self.held_target(call, frame, state) is not None:
            return True
        return self.passes_communicating_callback(call, frame)

    def _backward(self, call: ast.Call, frame: Frame, state: State | None) -> OpSpec | None:
        """A backward through a wrapped module's output (gradient_sync.py)."""
        if state is None or not self.catalog.gradient_syncs:
            return None
        return backward_spec(self, call, state, frame, self.paused_syncs)

    def held_target(self, call: ast.Call, frame: Frame, state: State | None) -> HeldTarget | None:
        """A function of this file run by a call through what a name holds: a method of an object
        other than `self` (`s.push(t)`, `self.ckpt.save()`, `model(x)` running `forward`), a
        function handed on as a value, a `functools.partial` (see `receivers`)."""
        if state is None:
            return None
        func = call.func
        if isinstance(func, ast.Attribute):
            holder, method_name = func.value, func.attr
        elif isinstance(func, ast.Name):
            holder, method_name = func, ""
        else:
            return None
        root = holder
        while isinstance(root, ast.Attribute):
            root = root.value
        # Most calls are on an imported module (`torch.cat(...)`) or on `self`: rejected first.
        if not isinstance(root, ast.Name) or self.local_imports.lookup(root.id) is not None:
            return None
        if root is holder and root.id in ("self", "cls"):
            kept = kept_function(self.module, frame.class_name, method_name) if frame.class_name else None
            return HeldTarget(kept, None, None) if kept is not None else None
        parts = dotted(holder)
        if not parts or len(parts) > MAX_HOLDER_PARTS:
            return None
        if len(parts) == 1 and parts[0] in self.nested:
            return None
        if method_name == APPLY and len(parts) == 1 and parts[0] in self.module.classes:
            applied = applied_forward(self.module, parts[0], self.class_types(parts[0]), call)
            return HeldTarget(applied[0], parts[0], None, applied[1]) if applied is not None else None
        value = self.held_value(parts, state, frame)
        if not method_name:
            held = held_function(self.module, value)  # a function, or a method with its object
            if held is not None:
                return HeldTarget(held[0], held[1], ".".join(parts) if held[1] else None)
            partial = self.partials.get(value.name) if isinstance(value, Atom) else None
            if partial is not None:
                return HeldTarget(partial.function, None, None, partial)
        owner = object_class(self.module, value)
        if owner is None:
            return None
        if method_name:
            method = method_of(self.module, owner, method_name)
        else:
            method = call_method(self.module, owner, self.class_types(owner.name))
        return HeldTarget(method, owner.name, ".".join(parts)) if method is not None else None

    def held_value(self, parts: list[str], state: State, frame: Frame) -> Expr | None:
        """What a dotted name holds, read without evaluating anything (asked for most calls): the
        path's variables, the module's globals, a function of the file, or an attribute the class
        of the object before it keeps (`self.ckpt`, `s.buffer`, `self.ckpt.store`)."""
        value = state.env.get(".".join(parts))
        if value is not None:
            return value
        if len(parts) == 1:
            name = parts[0]
            if name in self.module.globals:
                return self.module.globals[name]
            return function_value(self.module, name) if name in self.module.functions else None
        if parts[0] == "self" and len(parts) == 2:
            return self.class_attribute(frame.class_name, parts[1]) if frame.class_name else None
        owner = object_class(self.module, self.held_value(parts[:-1], state, frame))
        return self.class_attribute(owner.name, parts[-1]) if owner is not None else None

    def exit_call(self, call: ast.Call) -> bool:
        name = qualified_name(call.func, self.local_imports)
        if name is None and isinstance(call.func, ast.Name):
            name = call.func.id
        return name in EXIT_CALLS

    def passes_communicating_callback(self, call: ast.Call, frame: Frame) -> bool:
        """`study.optimize(objective)`, `pool.submit(sync)`: unknown code receives a function that
        communicates and may call it any number of times."""
        return self.handoff(call, frame) is not None

    def handoff(self, call: ast.Call, frame: Frame) -> Handoff | None:
        """What `call` hands unknown code that communicates: a function of the run by name (or
        `self.method`, `Class.method`), a lambda, a `functools.partial` of one, or a catalogued
        collective itself (`apply(dist.all_reduce, xs)`); None when it hands nothing such."""
        if qualified_name(call.func, self.local_imports) in PARTIAL_CALLS:
            return None  # binding arguments runs nothing: the partial is handed on (or called) later
        if starts_a_process(call):
            return None  # its target runs in a new process: that process's collectives, not this one's
        found: Handoff | None = None
        for argument in [*call.args, *(keyword.value for keyword in call.keywords)]:
            handed = self._handed(argument, call, frame, 0)
            if handed is not None:
                found = handed if found is None else found.joined(handed)
        return found

    def _handed(self, argument: ast.expr, call: ast.Call, frame: Frame, depth: int) -> Handoff | None:
        """The communicating callable `argument` is, if it is one (see `handoff`)."""
        if isinstance(argument, ast.Lambda):
            key = (argument, frame.class_name)
            found = self._lambda_ops.get(key)
            if found is None:  # asked for every evaluation of the call: walked once
                found = self._lambda_ops[key] = self._ops_under(argument, frame.class_name, frozenset())
            return Handoff(found.ops if not found.unknown else None) if found.communicates else None
        if isinstance(argument, ast.Call):
            partial_of = qualified_name(argument.func, self.local_imports) in PARTIAL_CALLS
            if partial_of and argument.args and depth < 3:
                return self._handed(argument.args[0], call, frame, depth + 1)
            return None
        if not isinstance(argument, (ast.Name, ast.Attribute)):
            return None
        function, class_name = self._named_callable(argument, frame.class_name)
        if function is None and self.remote_call(call):
            function = self._remote_callable(argument)
        if function is not None:
            return Handoff(self._function_ops(function, class_name)) if self._communicates(function) else None
        name = qualified_name(argument, self.local_imports)
        spec = self.catalog.functions.get(name) if name is not None else None
        if spec is None or spec.kind == NONBLOCKING:
            return None  # `P2POp(dist.irecv, buf, peer)`: a posted transfer, no element of a sequence
        return Handoff(frozenset({spec.op}))

    def _named_callable(
        self, argument: ast.Name | ast.Attribute, class_name: str | None
    ) -> tuple[FunctionNode | None, str | None]:
        """The function of this file `argument` names (in a method of `class_name`), and the class
        its `self` is then an instance of."""
        if isinstance(argument, ast.Name):
            return self.nested.get(argument.id) or self.module.functions.get(argument.id), class_name
        receiver = argument.value
        if not isinstance(receiver, ast.Name):
            return None, None
        if receiver.id in ("self", "cls") and class_name:
            return self._find_method(class_name, argument.attr), class_name
        if receiver.id in self.module.classes:  # `Trainer.step`
            return self._find_method(receiver.id, argument.attr), receiver.id
        return None, None

    def _function_ops(self, function: FunctionNode, class_name: str | None) -> frozenset[str] | None:
        """The collectives a communicating `function` may issue; None when not all are known."""
        key = (function, class_name)
        if key not in self._handed_ops:
            found = self._ops_under(function, class_name, frozenset({function}))
            known = found.ops if found.ops and not found.unknown else None
            self._handed_ops[key] = known
        return self._handed_ops[key]

    def _ops_under(self, node: ast.AST, class_name: str | None, seen: frozenset[FunctionNode]) -> _Ops:
        """The catalogued collectives called under `node`, through the communicating helpers of
        this file it calls by name (`helper()`, `self.helper()`). Unknown: a helper that cannot be
        followed (of another file, recursive, too deep), or a call named like a communicating
        function of the project."""
        names = {f.name for f in self.module.communicating}
        project = self.module.project
        elsewhere = project.communicating_names if project is not None else frozenset()
        ops: set[str] = set()
        communicates = unknown = False
        for call in (n for n in nodes_under(node) if isinstance(n, ast.Call)):
            spec = self.op_spec(call, None, class_name)
            if spec is not None and spec.kind == NONBLOCKING:
                continue  # posted, paired by the peers' own posts: never compared as a collective
            if spec is not None:
                ops.add(spec.op)
                communicates = True
                continue
            func = call.func
            if not isinstance(func, (ast.Name, ast.Attribute)):
                continue
            callee = func.id if isinstance(func, ast.Name) else func.attr
            if callee in names:
                communicates = True
                helper, owner = self._named_callable(func, class_name)
                if helper is None or helper in seen or len(seen) > MAX_HANDED_DEPTH:
                    unknown = True
                    continue
                inner = self._ops_under(helper, owner, seen | {helper})
                ops |= inner.ops
                unknown = unknown or inner.unknown
            elif callee in elsewhere:
                unknown = True
        return _Ops(frozenset(ops), communicates, unknown)

    def remote_call(self, call: ast.Call) -> bool:
        """`rpc.remote(worker, Trainer, args=...)`: a catalogued function that runs the callable it
        is handed on another process ([remote_calls])."""
        return qualified_name(call.func, self.local_imports) in self.catalog.remote_calls

    def _remote_callable(self, argument: ast.expr) -> FunctionNode | None:
        """What an RPC runs, beyond functions: a class of the module (its constructor) or one of its
        methods named through the class (`Trainer.train_batch`)."""
        if isinstance(argument, ast.Name) and argument.id in self.module.classes:
            return self._find_method(argument.id, "__init__")
        if (
            isinstance(argument, ast.Attribute)
            and isinstance(argument.value, ast.Name)
            and argument.value.id in self.module.classes
        ):
            return self._find_method(argument.value.id, argument.attr)
        return None

    def _communicates(self, function: FunctionNode) -> bool:
        known = self._callback_communicates.get(function)
        if known is None:
            known = function in self.module.communicating or self.body_communicates(function)
            self._callback_communicates[function] = known
        return known

    def op_spec(self, call: ast.Call, state: State | None, class_name: str | None = None) -> OpSpec | None:
        name = qualified_name(call.func, self.local_imports)
        if name is not None and name in self.catalog.functions:
            return self.catalog.functions[name]
        inherited_method = self._inherited_framework_method(call, class_name)
        if inherited_method is not None:
            return inherited_method
        if isinstance(call.func, (ast.Name, ast.Attribute)):
            # `model(x)` on a wrapped module: the object itself is the receiver of `__call__`.
            spec = self._method_of(call.func, "__call__", state, class_name)
            if spec is not None:
                return spec
        if isinstance(call.func, ast.Attribute):
            return self._method_of(call.func.value, call.func.attr, state, class_name)
        return None

    def _method_of(
        self, receiver: ast.expr, method_name: str, state: State | None, class_name: str | None
    ) -> OpSpec | None:
        """The catalogued method `method_name` of what `receiver` holds. Its type is asked once,
        not once per catalogued method of that name (every call of every path asks this)."""
        unasked = object()
        type_name: object = unasked
        for method in self.catalog.method_specs(method_name):
            if method.any_receiver:
                if self._names_no_object(receiver):
                    continue
                return method.spec
            if not method.receivers:
                continue
            if type_name is unasked:
                type_name = self._type_of(receiver, state, class_name)
            if type_name is not None and type_name in method.receivers:
                return method.spec
        return None

    def _names_no_object(self, receiver: ast.expr) -> bool:
        """A method matched by its name alone (`any_receiver`) needs an object of unknown type.
        Not one: a module reached through an import (`cute.arch.barrier()`, `gpu.barrier()`: the
        call's qualified name is known, and only `[[op]]` names make it a collective), and `self`
        or `cls` (the class's own method is a helper; one it inherits from a catalogued framework
        class is found by `_inherited_framework_method`; any other is unknown code)."""
        parts = dotted(receiver)
        if not parts:
            return False
        if len(parts) == 1 and parts[0] in ("self", "cls"):
            return True
        return self.local_imports.lookup(parts[0]) is not None

    def _inherited_framework_method(self, call: ast.Call, class_name: str | None) -> OpSpec | None:
        """`self.all_gather(x)` in a subclass of a catalogued class (a LightningModule): the method
        it inherits, unless the class (or a base of this module) defines its own."""
        func = call.func
        if not (
            class_name
            and isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
        ):
            return None
        specs = [m for m in self.catalog.method_specs(func.attr) if not m.any_receiver]
        if not specs or self._find_method(class_name, func.attr) is not None:
            return None
        types = self.class_types(class_name)
        for method in specs:
            if types & set(method.receivers):
                return method.spec
        return None

    def type_in_place(self, call: ast.Call, state: State) -> None:
        """`fully_shard(model)`: from here on `model` is the wrapped type."""
        name = qualified_name(call.func, self.local_imports)
        if name is None or name not in self.catalog.types_in_place or not call.args:
            return
        target = call.args[0]
        if isinstance(target, (ast.Name, ast.Attribute)) and dotted(target):
            type_name = self.catalog.types_in_place[name] or name
            self.bind(target, Atom(f"type:{type_name}@{where_of(call)}", "shared"), state)

    def passes_typed_object(self, call: ast.Call, state: State) -> bool:
        """The call hands a helper an object whose methods communicate (a wrapped model, an
        engine): the helper may communicate through it even if its own text names nothing."""
        receivers = communicating_types(self.catalog)
        for argument in [*call.args, *(keyword.value for keyword in call.keywords)]:
            if isinstance(argument, (ast.Name, ast.Attribute)):
                type_name = self._type_of(argument, state)
                if type_name is not None and type_name in receivers:
                    return True
        return False

    def _type_of(self, node: ast.expr, state: State | None, class_name: str | None = None) -> str | None:
        return type_of(self, node, state, class_name)

    def local_target(self, call: ast.Call, frame: Frame) -> tuple[FunctionNode, str | None, bool] | None:
        func = call.func
        module = self.module
        if isinstance(func, ast.Name):
            if func.id in self.nested:
                return self.nested[func.id], frame.class_name, False
            if func.id in module.functions and self.local_imports.lookup(func.id) is None:
                return module.functions[func.id], None, False
            return self._remote_target(func)
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and self.local_imports.lookup(func.value.id)
        ):
            return self._remote_target(func)
        if not isinstance(func, ast.Attribute):
            return None
        receiver = func.value
        class_name: str | None = None
        if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
            class_name = frame.class_name
        elif (
            isinstance(receiver, ast.Call)
            and isinstance(receiver.func, ast.Name)
            and receiver.func.id == "super"
            and frame.class_name
        ):
            info = module.classes.get(frame.class_name)
            for base in info.bases if info else []:
                method = self._find_method(base, func.attr)
                if method is not None:
                    return method, base, True
            return None
        elif isinstance(receiver, ast.Name) and receiver.id in module.classes:
            method = self._find_method(receiver.id, func.attr)
            return (method, receiver.id, False) if method is not None else None
        if class_name is None:
            return None
        method = self._find_method(class_name, func.attr)
        return (method, class_name, True) if method is not None else None

    def _remote_target(self, func: ast.expr) -> tuple[FunctionNode, str | None, bool] | None:
        if self.module.project is None:
            return None
        name, project = qualified_name(func, self.local_imports) or "", self.module.project
        last = name.rsplit(".", 1)[-1]
        if not project.may_follow(last) and not (self.raises_followed and project.may_raise(last)):
            return None
        found = remote_function(self.module, name, communicating_only=False)
        if found is None:
            return None
        other, function = found
        self.remote_modules[function] = other
        return function, None, False

    def _find_method(self, class_name: str, name: str) -> FunctionNode | None:
        """The method `name` of the class or its bases; None for a `@property` (its value is handed)."""
        properties = inherited(self.module, class_name, name, lambda info: info.properties)
        found: FunctionNode | None = inherited(self.module, class_name, name, lambda info: info.methods)
        return None if properties is not None else found

    def owner_class(self, function: FunctionNode, default: str | None) -> str | None:
        if self._owners is None:
            self._owners = {
                m: name for name, info in self.module.classes.items() for m in info.methods.values()
            }
        return self._owners.get(function, default)

    def _helper_for(self, call: ast.Call, owner: ModuleInfo) -> tuple[ModuleInfo, FunctionNode] | None:
        """A function of the run that `call` (written in `owner`) reaches by its plain name."""
        if isinstance(call.func, ast.Name) and call.func.id in owner.functions:
            return owner, owner.functions[call.func.id]
        if owner.project is None:
            return None
        name = qualified_name(call.func, owner.imports)
        if name is None:
            return None
        return remote_function(owner, name, communicating_only=False)

    def body_communicates(self, function: FunctionNode) -> bool:
        names = {f.name for f in self.module.communicating}
        for node in nodes_under(function):
            if isinstance(node, ast.Call):
                if self.op_spec(node, None) is not None:
                    return True
                if isinstance(node.func, ast.Name) and node.func.id in names:
                    return True
        return False

    def returns_matter(self, function: FunctionNode, owner: ModuleInfo | None = None, depth: int = 0) -> bool:
        """Inline a quiet helper if what it returns may depend on the rank whatever its arguments (it
        reads a per-rank source itself, or through a helper that does) or on a `[nondeterministic]` one.
        Cached per function."""
        owner = owner or self.module
        if depth == 0 and function in self._returns:
            return self._returns[function]
        result = self._returns_matter_uncached(function, owner, depth)
        if depth == 0:
            self._returns[function] = result
        return result

    def _returns_matter_uncached(self, function: FunctionNode, owner: ModuleInfo, depth: int) -> bool:
        imports = owner.imports
        for node in nodes_under(function):
            if isinstance(node, ast.Return) and node.value is not None:
                returned = {qualified_name(call.func, imports) for call in scalar_calls(node.value, function)}
                if returned & self.catalog.nondeterministic.keys():
                    return True  # it hands back a clock or a file's presence (not one it logs)
                for call in (n for n in nodes_under(node.value) if isinstance(n, ast.Call)):
                    helper = self._helper_for(call, owner) if depth < 3 else None
                    nested = helper is not None and helper[1] is not function
                    if nested and self.returns_matter(helper[1], helper[0], depth + 1):  # type: ignore[index]
                        return True
            if isinstance(node, ast.Call):
                name = qualified_name(node.func, imports)
                if name in self.catalog.rank_functions or name in GROUP_PLACES:
                    return True
                if isinstance(node.func, ast.Attribute) and node.func.attr in self.catalog.rank_methods:
                    return True
            if isinstance(node, ast.Attribute) and node.attr in self.catalog.rank_attributes:
                return True
            if isinstance(node, ast.Constant) and node.value in self.catalog.rank_env:
                return True
        # A parameter (even one named `rank`) holds what the caller passes: judged at the call.
        return False

    def decorator_condition(self, function: FunctionNode, owner: ModuleInfo) -> Expr | None:
        for decorator in function.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            name = qualified_name(target, owner.imports)
            if name is None and isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                bound = owner.globals.get(target.value.id)  # `@accelerator.on_main_process`
                if isinstance(bound, Atom) and bound.name.startswith("type:"):
                    name = bound.name[5:].split("@", 1)[0] + "." + target.attr
            if name is not None and name in self.catalog.rank_decorators:
                value = value_from_spec(
                    self.catalog.rank_decorators[name], f"decorator@{where_of(decorator)}"
                )
                self.conditions.note(
                    value, source_of(decorator, owner.path, text="@" + source_text(decorator))
                )
                return value
        return None
