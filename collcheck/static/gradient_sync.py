"""Gradient reductions of data-parallel wrappers: backward through a wrapped module's output.

`loss.backward()` communicates when `loss` was computed from what a module wrapped for data
parallelism returned: DDP's autograd hooks all-reduce gradient buckets on its process group,
FSDP's reduce-scatter them. Which wrappers do this, on which constructor argument's group, how
backward is started and which `with` blocks suspend it are catalog facts (`[[gradient_sync]]`).

In: calls the evaluator meets — a wrapped module's forward (its value), an unknown call (what it
was handed), a backward — and `with` items. Out: values that carry `Atom.synced` (the reductions
a backward through them runs: the union over what they were computed from), the `OpSpec` that
makes a backward a collective, its `CommEvent`s, and the ops a `with` block suspends.

A backward in a file that trains under torch.distributed (it imports a module of an assumed
entry's `evidence`) whose value carries no seen reduction is taken to run the assumed one
(`GradientSync.assumed`: DDP or FSDP wrapping a model built elsewhere), on the world group; its
event says so (`CommEvent.condition`), and `assume-wrapped-models = false` drops the entry. Not
where the file shows how its models are wrapped (it makes or declares a wrapper: what else it
trains is not wrapped), nor where it reduces gradients itself (`all_reduce(p.grad)`: data
parallelism by hand, no wrapper), nor in pipeline-parallel code (point-to-point sends). The
assumption is the file's own: a function that communicates only through it is followed from its
own file, not from another (loader.followed_as_communicating).

The provenance is data flow, not names: the forward's result carries the reduction; opaque
values (arithmetic, attributes, items, unknown calls such as a loss function) carry their
inputs' union; an unknown call handed the wrapped module itself (`loss_fn(model, batch)`) may
run its forward, so its result carries that module's reduction too.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Protocol
from weakref import WeakKeyDictionary

from collcheck.catalog import Catalog, GradientSync, OpSpec
from collcheck.static.framework_types import framework_bases
from collcheck.static.group_values import group_value, type_of
from collcheck.static.loader import ModuleInfo
from collcheck.static.loss_origin import from_outside_model
from collcheck.static.names import ImportTable, dotted, imports_under, qualified_name, source_text
from collcheck.static.own_data import TrainedModules
from collcheck.static.program import OWN_DATA, CommEvent, EventKind
from collcheck.static.state import Frame, State
from collcheck.static.symbolic import Atom, Const, Expr, GradSync, GroupVal, Maker, atoms, synced_in

TYPED = "type:"
# A data-parallel module runs on each rank's own inputs: what it returns is that rank's own data
# (a non-finite loss on one rank only): a per-process value, like any other of its own data.
OWN_OUTPUT = f"{OWN_DATA}, the output of a data-parallel module on this rank's own inputs"


class Evaluator(Protocol):
    """What this stage needs of the evaluator (values.ValueEvaluator)."""

    module: ModuleInfo
    catalog: Catalog
    local_imports: ImportTable
    held_groups: dict[str, GroupVal | None]
    gradients_seen: bool
    trained_modules: TrainedModules

    def pure(
        self, node: ast.expr | None, state: State, frame: Frame, known: dict[int, Expr] | None = None
    ) -> Expr: ...

    def class_types(self, class_name: str) -> frozenset[str]: ...

    def class_attribute(self, class_name: str, attribute: str) -> Expr | None: ...


_CONSTRUCTORS: WeakKeyDictionary[ModuleInfo, dict[str, ast.Call]] = WeakKeyDictionary()
_UNASSUMED: WeakKeyDictionary[ModuleInfo, bool] = WeakKeyDictionary()
GRADIENT_ATTRIBUTE = "grad"  # `param.grad`: torch's gradient of a parameter
POINT_TO_POINT = frozenset({"p2p_send", "p2p_recv", "p2p_nonblocking"})
# What an assumed reduction's event says it rests on, and the setting that states the opposite.
ASSUMPTION = (
    "{wrapping} wraps the model, which this file does not show; if it does not, set "
    "`assume-wrapped-models = false` in [tool.collcheck]"
)


def _wrapping_known(module: ModuleInfo) -> bool:
    """The file says how its models are synchronised, so nothing is assumed: it makes a
    data-parallel wrapper (`DDP(net)`, `deepspeed.initialize(...)`, `fully_shard(m)`,
    `accelerator.prepare(m)`) or declares one (`model: DDP`), it reduces gradients itself (a
    catalogued collective handed a `.grad`), or it sends and receives point to point (pipeline
    stages, which run backward a per-stage number of times, their data parallelism on groups the
    world is not)."""
    found = _UNASSUMED.get(module)
    if found is not None:
        return found
    catalog, imports = module.catalog, module.imports
    wrappers = {w for sync in catalog.gradient_syncs if not sync.assumed for w in sync.wrappers}
    makers = {name for name, made in catalog.types.items() if (made or name) in wrappers}
    makers.update(name for name, made in catalog.types_in_place.items() if made in wrappers)
    producing = {name.rsplit(".", 1)[1] for name in makers if name.rsplit(".", 1)[0] in catalog.types}
    found = False
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Call):
            name = qualified_name(node.func, imports)
            spec = catalog.functions.get(name) if name is not None else None
            if name in makers or (isinstance(node.func, ast.Attribute) and node.func.attr in producing):
                found = True
            elif spec is not None and spec.kind in POINT_TO_POINT:
                found = True  # pipeline stages: their data-parallel groups are not the world
            elif name in catalog.functions and any(
                isinstance(part, ast.Attribute) and part.attr == GRADIENT_ATTRIBUTE
                for argument in node.args
                for part in ast.walk(argument)
            ):
                found = True
        elif isinstance(node, ast.arg) and node.annotation is not None:
            found = qualified_name(node.annotation, imports) in makers
        if found:
            break
    _UNASSUMED[module] = found
    return found


def _syncs_of(catalog: Catalog, type_name: str | None) -> list[GradientSync]:
    if type_name is None:
        return []
    return [sync for sync in catalog.gradient_syncs if type_name in sync.wrappers]


def _held(ev: Evaluator, node: ast.expr, state: State, frame: Frame) -> Expr | None:
    """What a dotted name holds, as `type_of` reads it (`model`, `self.model`)."""
    parts = dotted(node)
    if not parts:
        return None
    value = state.env.get(".".join(parts))
    if value is None and parts[0] == "self" and len(parts) == 2 and frame.class_name:
        value = ev.class_attribute(frame.class_name, parts[1])
    return value


def _constructor(ev: Evaluator, typed: Expr | None, type_name: str) -> ast.Call | None:
    """The call of this module that made the typed object `typed` (`DDP(net, process_group=g)`)."""
    if not isinstance(typed, Atom) or not typed.name.startswith(TYPED):
        return None
    where = typed.name.partition("@")[2]
    table = _CONSTRUCTORS.get(ev.module)
    if table is None:
        table = {}
        for node in ast.walk(ev.module.tree):
            if (
                isinstance(node, ast.Call)
                and qualified_name(node.func, ev.module.imports) in ev.catalog.types
            ):
                table[f"{node.lineno}:{node.col_offset}"] = node
        _CONSTRUCTORS[ev.module] = table
    call = table.get(where)
    if call is None:
        return None
    made = qualified_name(call.func, ev.module.imports) or ""
    return call if (ev.catalog.types.get(made) or made) == type_name else None


def _group_of(
    ev: Evaluator, sync: GradientSync, typed: Expr | None, state: State, frame: Frame, known: dict[int, Expr]
) -> GroupVal | None:
    """The wrapper's group: its constructor's `sync.group` keyword where this module made it and
    passed one; otherwise the world (the wrapper's default, and the forward's assumption)."""
    type_name = (
        sync.wrappers[0] if not isinstance(typed, Atom) else typed.name[len(TYPED) :].partition("@")[0]
    )
    call = _constructor(ev, typed, type_name) if sync.group else None
    keyword = next((k.value for k in call.keywords if k.arg == sync.group), None) if call else None
    return group_value(ev, keyword, state, frame, known) if keyword is not None else None


def _module_syncs(
    ev: Evaluator, node: ast.expr, state: State, frame: Frame, known: dict[int, Expr]
) -> frozenset[GradSync]:
    """The reductions of the wrapped module `node` holds, if it holds one (asked for the arguments
    of every unknown call: what the name holds is read first, the catalogued type only of a typed
    object)."""
    typed = _held(ev, node, state, frame)
    if not isinstance(typed, Atom) or not typed.name.startswith(TYPED):
        return frozenset()
    syncs = _syncs_of(ev.catalog, type_of(ev, node, state, frame.class_name))
    return frozenset(GradSync(s.spec.op, _group_of(ev, s, typed, state, frame, known)) for s in syncs)


def forward_output(
    ev: Evaluator, call: ast.Call, result: Atom, state: State, frame: Frame, known: dict[int, Expr]
) -> Atom:
    """The value of a catalogued call: carrying the module's reductions when it is a wrapped
    module's forward (`model(x)`, `model.forward(x)`)."""
    if not ev.catalog.gradient_syncs or not isinstance(call.func, (ast.Name, ast.Attribute)):
        return result
    synced = _module_syncs(ev, call.func, state, frame, known)
    if not synced and isinstance(call.func, ast.Attribute) and call.func.attr == "forward":
        synced = _module_syncs(ev, call.func.value, state, frame, known)
    if not synced:
        return result
    ev.gradients_seen = True  # from here on, values of this module may carry a reduction
    return Atom(result.name, "nondet", OWN_OUTPUT, synced=synced)


def call_output(
    ev: Evaluator,
    node: ast.Call,
    args: list[Expr],
    receiver: Expr | None,
    state: State,
    frame: Frame,
    known: dict[int, Expr] | None,
) -> Atom:
    """A black box's result (`_black_box`), with the callable that made it (`Atom.maker`: a
    class of the run makes no None, a function may declare it returns none)."""
    result = _black_box(ev, node, args, receiver, state, frame, known)
    qualified = qualified_name(node.func, ev.local_imports)
    if qualified is None and isinstance(node.func, ast.Name):
        qualified = node.func.id  # a function or class of the file
    return result if qualified is None else replace(result, maker=Maker(qualified, ev.module.path))


def _black_box(
    ev: Evaluator,
    node: ast.Call,
    args: list[Expr],
    receiver: Expr | None,
    state: State,
    frame: Frame,
    known: dict[int, Expr] | None,
) -> Atom:
    """Any other call is a black box whose result is taken to be the same on every rank: a rank
    passed as an argument (a sampler, a device, a constructor) does not make it per-rank. Equal
    text, equal value: the same helper asked twice answers the same. It carries the reductions of
    what it was handed (`criterion(out, y)`, `scaler.scale(loss)`), and those of a wrapped module
    handed whole (`loss_fn(model, batch)` may run its forward)."""
    name = f"call:{source_text(node)}"
    if _trained_forward(ev, node, state, frame, known):
        ev.gradients_seen = True  # from here on, what is computed from its output is own too
        return Atom(name, "nondet", OWN_OUTPUT)
    if not ev.catalog.gradient_syncs:
        return Atom(name, "shared")
    inputs: tuple[Expr, ...] = ()
    if ev.gradients_seen:  # what was handed can carry a reduction only once a forward made one
        keywords = [
            ev.pure(k.value, state, frame, known) for k in node.keywords if isinstance(k.value, ast.Name)
        ]
        inputs = (*args, *keywords, *((receiver,) if receiver is not None else ()))
    synced = synced_in(inputs)
    for argument in [*node.args, *(k.value for k in node.keywords)]:
        if isinstance(argument, (ast.Name, ast.Attribute)):
            synced |= _module_syncs(ev, argument, state, frame, known or {})
    if any(atom.why == OWN_OUTPUT for value in inputs for atom in atoms(value)):
        return Atom(name, "nondet", OWN_OUTPUT, synced=synced)  # computed from this rank's outputs
    return Atom(name, "shared", synced=synced)


def _trained_forward(
    ev: Evaluator, node: ast.Call, state: State, frame: Frame, known: dict[int, Expr] | None
) -> bool:
    """`node` runs the forward (`model(x)`, `model.forward(x)`) of a module the running function
    trains data-parallel by hand (local_data.LocalData.trained), or that the root handed it; or
    an unknown call is handed such a module whole (`evaluate(model, loader)` may run it)."""
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "forward":
        func = func.value
    handed = [*node.args, *(k.value for k in node.keywords)]
    names = ev.trained_modules.names(frame.stack[-1]) if frame.stack else frozenset()
    values = ev.trained_modules.values
    for module in (func, *handed):
        path = dotted(module) if names or values else None
        if path is None:
            continue
        if ".".join(path) in names or ev.pure(module, state, frame, known) in values:
            return True
    return False


def hands_gradients(call: ast.Call, state: State) -> bool:
    """The call hands a helper a value a backward through which communicates (`step(loss)`)."""
    for argument in [*call.args, *(keyword.value for keyword in call.keywords)]:
        value = state.env.get(argument.id) if isinstance(argument, ast.Name) else None
        if value is not None and synced_in((value,)):
            return True
    return False


def _inherited(ev: Evaluator, func: ast.expr, frame: Frame, method: str) -> str | None:
    """`self.manual_backward(loss)` in a method of a class deriving from a framework class: the
    framework's method (`lightning.pytorch.LightningModule.manual_backward`) when a catalog entry
    names it as starting backward."""
    function = frame.stack[-1] if frame.stack else None
    first = [*function.args.posonlyargs, *function.args.args][:1] if function is not None else []
    if not (
        first
        and frame.class_name
        and isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == first[0].arg
    ):
        return None
    for base in framework_bases(ev.module, frame.class_name):
        name = f"{base}.{method}"
        if any(name in sync.functions for sync in ev.catalog.gradient_syncs):
            return name
    return None


def backward_syncs(
    ev: Evaluator, call: ast.Call, state: State, frame: Frame, paused: frozenset[str]
) -> frozenset[GradSync]:
    """The reductions the backward `call` starts (`loss.backward()`, `torch.autograd.backward(loss)`,
    `accelerator.backward(loss)`), less those a `with` block around it suspends."""
    catalog = ev.catalog
    func = call.func
    last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if last is None or last not in catalog.backward_words:
        return frozenset()
    value: Expr | None = None
    differentiated: ast.expr | None = None
    forms: set[str] = set()
    name = qualified_name(func, ev.local_imports) or _inherited(ev, func, frame, last)
    if isinstance(func, ast.Attribute) and name is None and type_of(ev, func.value, state) is None:
        differentiated = func.value
        value = ev.pure(func.value, state, frame)  # `loss.backward()`
        forms = {s.spec.op for s in catalog.gradient_syncs if last in s.methods}
    else:
        if name is None and isinstance(func, ast.Attribute):
            name = f"{type_of(ev, func.value, state, frame.class_name)}.{last}"  # a typed method
        forms = {s.spec.op for s in catalog.gradient_syncs if name in s.functions}
        if forms and call.args:
            differentiated = call.args[0]
            value = ev.pure(call.args[0], state, frame)
    if value is None or not forms:
        return frozenset()
    seen = synced_in((value,))
    if seen:  # the wrapper is visible: its reduction, unless suspended, and no assumption
        return frozenset(s for s in seen if s.op in forms and s.op not in paused)
    if differentiated is None or not _through_outside_model(ev, differentiated, frame):
        return frozenset()  # a graph made here only: no wrapper elsewhere to assume
    return frozenset(
        GradSync(s.spec.op)
        for s in catalog.gradient_syncs
        if s.assumed
        and s.spec.op in forms
        and s.spec.op not in paused
        and imports_under(ev.module.tree, s.evidence)
        and not _wrapping_known(ev.module)
    )


def _through_outside_model(ev: Evaluator, differentiated: ast.expr, frame: Frame) -> bool:
    scope = frame.stack[-1] if frame.stack else ev.module.tree
    own = None
    static = not isinstance(scope, ast.Module) and any(
        isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod") for d in scope.decorator_list
    )
    if frame.class_name is not None and not isinstance(scope, ast.Module) and not static:
        positional = [*scope.args.posonlyargs, *scope.args.args]
        own = positional[0].arg if positional else None
    classes = frozenset(ev.module.classes)
    return from_outside_model(differentiated, scope, ev.local_imports, classes, own)


def backward_spec(
    ev: Evaluator, call: ast.Call, state: State, frame: Frame, paused: frozenset[str]
) -> OpSpec | None:
    """The catalog's op for a backward that communicates; None for any other call."""
    found = backward_syncs(ev, call, state, frame, paused)
    if not found:
        return None
    first = min(s.op for s in found)
    return next(s.spec for s in ev.catalog.gradient_syncs if s.spec.op == first)


def is_backward(catalog: Catalog, spec: OpSpec) -> bool:
    return any(spec is sync.spec for sync in catalog.gradient_syncs)


def backward_events(
    ev: Evaluator, call: ast.Call, state: State, frame: Frame, paused: frozenset[str]
) -> tuple[CommEvent, ...]:
    """One event per reduction the backward runs (two wrapped models: two reductions)."""
    found = backward_syncs(ev, call, state, frame, paused)
    ordered = sorted(found, key=lambda s: (s.op, s.group.key if s.group is not None else ""))
    assumed = {s.spec.op: s.assumed for s in ev.catalog.gradient_syncs if s.assumed}
    return tuple(
        CommEvent(
            op=sync.op,
            kind=EventKind.COLLECTIVE,
            path=ev.module.path,
            line=call.lineno,
            column=call.col_offset,
            end_line=call.end_lineno or call.lineno,
            end_column=call.end_col_offset or call.col_offset,
            chain=frame.chain,
            group=sync.group,
            condition=ASSUMPTION.format(wrapping=assumed[sync.op]) if sync.op in assumed else "",
        )
        for sync in ordered
    )


def _sets_attribute(owner: ast.ClassDef, attribute: str) -> bool:
    """The class sets `attribute` anywhere: `self.x = ...`, a class-level `x = ...`, a `def x`."""
    for node in ast.walk(owner):
        if isinstance(node, ast.Attribute) and node.attr == attribute and isinstance(node.ctx, ast.Store):
            return True
        if isinstance(node, ast.Name) and node.id == attribute and isinstance(node.ctx, ast.Store):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attribute:
            return True
    return False


def returned_events(ev: Evaluator, stmt: ast.Return, value: Expr, frame: Frame) -> tuple[CommEvent, ...]:
    """A value a framework hook hands back for the framework to run backward on (`return loss` in
    a LightningModule's `training_step`): the assumed reductions of that backward, at the `return`.
    Only a root method's (a hook is called by its framework, not by the file), only a value that
    may be other than None (returning None skips the step), only where the class does not run
    backward itself (`manual_flag`)."""
    if frame.chain or frame.class_name is None or not frame.stack:
        return ()
    syncs = ev.catalog.backward_hooks.get(frame.stack[-1].name, ())
    info = ev.module.classes.get(frame.class_name)
    if not syncs or info is None or (isinstance(value, Const) and value.value is None):
        return ()
    method = frame.stack[-1].name
    bases = framework_bases(ev.module, frame.class_name)
    types = ev.catalog.types
    found = [
        sync
        for sync in syncs
        if any(
            hook_method == method and {owner, types.get(owner)} & bases
            for owner, _, hook_method in (hook.rpartition(".") for hook in sync.returned_by)
        )
        and imports_under(ev.module.tree, sync.evidence)
        and not (sync.manual_flag and _sets_attribute(info.node, sync.manual_flag))
    ]
    return tuple(
        CommEvent(
            op=sync.spec.op,
            kind=EventKind.COLLECTIVE,
            path=ev.module.path,
            line=stmt.lineno,
            column=stmt.col_offset,
            end_line=stmt.end_lineno or stmt.lineno,
            end_column=stmt.end_col_offset or stmt.col_offset,
            chain=frame.chain,
            condition=ASSUMPTION.format(wrapping=sync.assumed),
        )
        for sync in found
    )


def paused_ops(ev: Evaluator, items: list[ast.withitem], state: State, frame: Frame) -> frozenset[str]:
    """The reductions a `with` statement suspends: `with model.no_sync():`,
    `with accelerator.no_sync(model):` — a catalogued method called on a wrapped module or handed
    one."""
    paused: set[str] = set()
    for item in items:
        call = item.context_expr
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
            continue
        method = call.func.attr
        candidates = [s for s in ev.catalog.gradient_syncs if method in s.paused_by]
        if not candidates:
            continue
        held = [call.func.value, *call.args, *(k.value for k in call.keywords)]
        types = {type_of(ev, node, state, frame.class_name) for node in held}
        # an assumed wrapper is of no known type: any `with x.no_sync():` may be its
        paused.update(s.spec.op for s in candidates if s.assumed or types & set(s.wrappers))
    return frozenset(paused)
