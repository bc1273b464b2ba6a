"""Collective events and group reasoning: a resolved collective call to a `CommEvent`.

In: a call the resolver matched to a catalog `OpSpec`, the path's `State` and `Frame`. Out: the
`CommEvent` appended to the path (its group as a `GroupVal` with a membership predicate and, for
`new_subgroups`, a color; root, reduce op, peer, the ranks of a group creation) and the call's
value (a new group for `new_group`/`new_subgroups`, an opaque result otherwise).
"""

from __future__ import annotations

import ast
from dataclasses import replace

from collcheck.catalog import OpSpec
from collcheck.static import groups
from collcheck.static.calls import CallResolver
from collcheck.static.gradient_sync import backward_events, forward_output, is_backward
from collcheck.static.group_values import group_value
from collcheck.static.inferred_types import inferred_class
from collcheck.static.loader import ModuleInfo
from collcheck.static.names import qualified_name, source_text
from collcheck.static.object_values import catalog_kept_arguments
from collcheck.static.program import (
    ROOTED_PREFIX,
    CommEvent,
    EventKind,
    Posting,
)
from collcheck.static.state import Frame, State
from collcheck.static.summary_conditions import UNDECIDED, decide
from collcheck.static.symbolic import (
    MEMBER,
    RANK,
    TRUE,
    WORLD,
    Atom,
    BinOp,
    Compare,
    Const,
    Expr,
    GroupVal,
    IfExp,
    InRange,
    Member,
    TupleVal,
    conjoin,
    is_rank_dependent,
)
from collcheck.static.values import where_of

# Implicit collectives of a wrapped model's forward and backward that DDP's Join context shadows
# for ranks whose inputs ran out (catalogs: torch_wrappers.toml, accelerate.toml).
JOINABLE_OPS = frozenset({"ddp_forward", "prepared_model_forward", "ddp_backward", "prepared_model_backward"})
NONBLOCKING = "p2p_nonblocking"  # the catalog kind of posted transfers
# The catalog's non-blocking ops by what they do (program.Posting); `P2POp` prepares a transfer
# whose direction is the op handed to it, for the next `batch_isend_irecv` to post.
POSTINGS = {"isend": Posting.SEND, "irecv": Posting.RECV, "batch_isend_irecv": Posting.BATCH}
PREPARING_OP = "P2POp"


class CollectiveEvents(CallResolver):
    """Turns catalogued collective calls into events; `record_events` off models values only."""

    def __init__(self, module: ModuleInfo) -> None:
        super().__init__(module)
        self.record_events = True
        self.joined = 0  # depth of `with model.join():` blocks being executed

    def communicate(
        self, call: ast.Call, spec: OpSpec, state: State, frame: Frame, known: dict[int, Expr]
    ) -> tuple[State, Expr]:
        if is_backward(self.catalog, spec):  # `loss.backward()` through a wrapped module's output
            if self.record_events:
                issued = backward_events(self, call, state, frame, self.paused_syncs)
                shadowed = JOINABLE_OPS if self.joined else frozenset()
                state.events = (*state.events, *(e for e in issued if e.op not in shadowed))
            return state, _plain_result(spec, call)
        args = _map_arguments(call, spec)
        configured = True if spec.when is None else self._configured(call, spec, args, state, frame, known)
        if configured is False:  # the configuration the call site shows makes it no collective
            return state, _plain_result(spec, call)

        def value(param: str | None) -> Expr | None:
            if param is None or param not in args:
                return None
            return self.pure(args[param], state, frame, known)

        group_node = args.get(spec.group) if spec.group else None
        group = self._group(group_node, state, frame, known)
        group_term = None
        if group is not None and group.per_rank and group.members is None and group_node is not None:
            chosen = self.pure(group_node, state, frame, known)
            group_term = chosen if _group_choice(chosen) else None
        if group is None and spec.default_group is not None and spec.default_group != "world":
            group = groups.unknown_group(spec.default_group)
        if group is None and group_node is None and spec.group is None and self._is_method_call(call):
            assert isinstance(call.func, ast.Attribute)
            receiver = self.pure(call.func.value, state, frame, known)
            if isinstance(receiver, GroupVal):  # a coordinator object that is its own group
                group = receiver
        reduce_op = value(spec.reduce_op)
        if spec.reduce_op is not None:
            reduce_op = _normalise_reduce_op(reduce_op)
        root = value(spec.root)
        if root is None and spec.group_root is not None:
            root = value(spec.group_root)
        peer = value(spec.peer)
        if peer is None and spec.group_peer is not None:
            peer = _global_peer(value(spec.group_peer), group)
        event = CommEvent(
            op=spec.op,
            kind=EventKind(spec.kind),  # one of catalog.OP_KINDS, checked when the catalog was read
            path=self.module.path,
            line=call.lineno,
            column=call.col_offset,
            end_line=call.end_lineno or call.lineno,
            end_column=call.end_col_offset or call.col_offset,
            chain=frame.chain,
            group=group,
            root=root,
            reduce_op=reduce_op,
            peer=peer,
            ranks_arg=value(spec.ranks),
            operands=tuple(source_text(args[name]) for name in spec.operands if name in args),
            group_term=group_term,
            group_text=source_text(group_node) if group_node is not None else "",
            condition=(spec.when or "") if configured is None else "",
            inferred=self._inferred_receiver(call, state, frame, known),
        )
        joined = self.joined and spec.op in JOINABLE_OPS  # shadowed by the Join context (interpret.py)
        # `new_group(ranks, use_local_synchronization=True)` waits only for the ranks it lists, each
        # block for its own list (`get_process_group_ranks(tp_group)`): not a call of the world.
        local = spec.kind == "group_create" and _is_true(args.get("use_local_synchronization"))
        if spec.kind == NONBLOCKING:  # recorded for the point-to-point schedule only
            event = replace(event, kind=EventKind.P2P_POSTED, posting=self._posting(spec, args))
        if self.record_events and not joined and not local:
            state.events = (*state.events, event)
        for name in spec.uniform_after:
            if name in args:
                target = args[name]
                fresh = Atom(f"uniform:{source_text(target)}@{where_of(call)}", "shared")
                if isinstance(target, (ast.Name, ast.Attribute)):
                    self.bind(target, fresh, state)
        for name in spec.root_only_after:
            held = args.get(name)
            if isinstance(held, (ast.Name, ast.Attribute)):  # the root's result, a partial one elsewhere
                rooted = Atom(f"{ROOTED_PREFIX}{source_text(held)}@{where_of(call)}", "perrank")
                self.bind(held, rooted, state)
        result = self._op_result(call, spec, args, state, frame, known)
        if isinstance(result, Atom):  # a wrapped module's forward: its output carries the reduction
            result = forward_output(self, call, result, state, frame, known)
        return state, result

    def _posting(self, spec: OpSpec, args: dict[str, ast.expr]) -> Posting:
        """What a non-blocking call does: `P2POp(dist.isend, ...)` prepares a send (the op handed
        to it, as the catalog names it); a call of unknown direction is UNKNOWN."""
        if spec.op != PREPARING_OP:
            return POSTINGS.get(spec.op, Posting.UNKNOWN)
        handed = args.get(spec.params[0]) if spec.params else None
        name = qualified_name(handed, self.local_imports) if handed is not None else None
        inner = self.catalog.functions.get(name) if name is not None else None
        handed_posting = POSTINGS.get(inner.op) if inner is not None and inner.kind == NONBLOCKING else None
        if inner is not None and (handed_posting is Posting.SEND or inner.kind == EventKind.P2P_SEND.value):
            return Posting.PREPARED_SEND
        if inner is not None and (handed_posting is Posting.RECV or inner.kind == EventKind.P2P_RECV.value):
            return Posting.PREPARED_RECV
        return Posting.PREPARED_UNKNOWN

    def _inferred_receiver(self, call: ast.Call, state: State, frame: Frame, known: dict[int, Expr]) -> str:
        """The receiver's class, when it was inferred from use (for the message), else "": the
        object a method is called on (`engine.backward(loss)`), or the object called itself, its
        forward (`engine(batch)`)."""
        if self._is_method_call(call):
            assert isinstance(call.func, ast.Attribute)
            found = inferred_class(self.pure(call.func.value, state, frame, known))
            if found is not None:
                return found
        if isinstance(call.func, (ast.Name, ast.Attribute)):
            return inferred_class(self.pure(call.func, state, frame, known)) or ""
        return ""

    def _configured(
        self,
        call: ast.Call,
        spec: OpSpec,
        args: dict[str, ast.expr],
        state: State,
        frame: Frame,
        known: dict[int, Expr],
    ) -> bool | None:
        """A conditional summary's `when` at this call: True, False, or None where the call site
        does not show it (an argument or receiver attribute of unknown value)."""
        defaults = dict(spec.when_defaults)
        receiver = call.func.value if isinstance(call.func, ast.Attribute) else None

        def literal(node: ast.expr) -> object:
            if isinstance(node, ast.Constant):
                return node.value
            if isinstance(node, ast.Name):
                if node.id in args:
                    found = self.pure(args[node.id], state, frame, known)
                    return found.value if isinstance(found, Const) else UNDECIDED
                return defaults.get(node.id, UNDECIDED)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and receiver is not None:
                read: ast.expr = ast.copy_location(
                    ast.Attribute(value=receiver, attr=node.attr, ctx=ast.Load()), call
                )
                if isinstance(receiver, ast.Call):  # `with Gathered(ps, enabled=False):`
                    read = _kept_keyword(self, receiver, node.attr) or read
                found = self.pure(read, state, frame, known)
                return found.value if isinstance(found, Const) else UNDECIDED
            return UNDECIDED

        return decide(spec.when or "", literal)

    def _is_method_call(self, call: ast.Call) -> bool:
        if not isinstance(call.func, ast.Attribute):
            return False
        name = qualified_name(call.func, self.local_imports)
        return name is None or name not in self.catalog.functions

    def _op_result(
        self,
        call: ast.Call,
        spec: OpSpec,
        args: dict[str, ast.expr],
        state: State,
        frame: Frame,
        known: dict[int, Expr],
    ) -> Expr:
        if spec.kind != "group_create":
            return _plain_result(spec, call)
        ranks_node = args.get(spec.ranks) if spec.ranks else None
        key = f"{spec.op}@{self.module.path}:{where_of(call)}"
        if spec.op.startswith("new_subgroups"):
            current = self._current_subgroup(spec.op, key, args, state, frame, known)
            return TupleVal((current, Atom(f"subgroups@{where_of(call)}", "shared")))
        if spec.op != "new_group":
            return GroupVal(key, None, per_rank=False, created=True)
        ranks_value = self.pure(ranks_node, state, frame, known) if ranks_node is not None else None
        per_rank = ranks_value is not None and is_rank_dependent(ranks_value)
        members = None if ranks_node is None else self._membership(ranks_node, state, frame, known)
        if ranks_node is None:
            members = TRUE  # new_group() with no ranks is the whole world
        return GroupVal(key, members, per_rank=per_rank, created=True)

    def _current_subgroup(
        self, op: str, key: str, args: dict[str, ast.expr], state: State, frame: Frame, known: dict[int, Expr]
    ) -> GroupVal:
        """The first result of `new_subgroups`/`new_subgroups_by_enumeration`: the one subgroup of the
        partition that holds this rank. Two ranks share it exactly when their colors are equal."""
        unknown = GroupVal(key, None, per_rank=True, created=True)
        if op == "new_subgroups":
            parent = args.get("group")
            if parent is not None and not (isinstance(parent, ast.Constant) and parent.value is None):
                return unknown  # subgroups of another group: ranks are numbered within it
            size_node = args.get("group_size")
            # Without a size, torch uses the number of devices per host: unknown, the same everywhere.
            size = (
                self.pure(size_node, state, frame, known)
                if size_node is not None
                else Atom(f"group_size@{key}", "shared", lower=1)
            )
            positive = not isinstance(size, Const) or (isinstance(size.value, int) and size.value > 0)
            if is_rank_dependent(size) or not positive:
                return unknown
            # torch raises unless the world size is a multiple of group_size; then every rank has one.
            whole = Compare("==", BinOp("%", WORLD, size), Const(0))
            return GroupVal(key, whole, color=BinOp("//", RANK, size), created=True)
        listed = args.get("ranks_per_subgroup_list")
        value = self.pure(listed, state, frame, known) if listed is not None else None
        if not isinstance(value, TupleVal) or not all(
            isinstance(part, TupleVal)
            and all(isinstance(r, Const) and type(r.value) is int for r in part.items)
            for part in value.items
        ):
            return unknown
        color: Expr = Const(-1)  # a rank in no subgroup gets None (the world): compared nowhere here
        members: list[Expr] = []
        for index in reversed(range(len(value.items))):
            part = value.items[index]
            assert isinstance(part, TupleVal)
            color = IfExp(Member(RANK, part.items), Const(index), color)
            members.extend(part.items)
        return GroupVal(key, Member(MEMBER, tuple(members)), color=color, created=True)

    def _membership(self, node: ast.expr, state: State, frame: Frame, known: dict[int, Expr]) -> Expr | None:
        """A predicate over MEMBER, for literal lists, ranges and comprehensions over ranges."""
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return Member(MEMBER, tuple(self.pure(e, state, frame, known) for e in node.elts))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("list", "tuple", "sorted", "set") and len(node.args) == 1:
                return self._membership(node.args[0], state, frame, known)
            if node.func.id == "range" and 1 <= len(node.args) <= 3:
                values = [self.pure(a, state, frame, known) for a in node.args]
                start, stop = (Const(0), values[0]) if len(values) == 1 else (values[0], values[1])
                step = values[2] if len(values) == 3 else Const(1)
                if isinstance(step, Const) and isinstance(step.value, int) and step.value > 0:
                    return InRange(MEMBER, start, stop, step.value)
            return None
        if isinstance(node, ast.ListComp) and len(node.generators) == 1:
            gen = node.generators[0]
            if not (isinstance(node.elt, ast.Name) and isinstance(gen.target, ast.Name)):
                return None
            if node.elt.id != gen.target.id:
                return None
            domain = self._membership(gen.iter, state, frame, known)
            if domain is None:
                return None
            scoped = State(dict(state.env))
            scoped.env[gen.target.id] = MEMBER
            conditions = [self.pure(test, scoped, frame, known) for test in gen.ifs]
            return conjoin((domain, *conditions))
        value = self.pure(node, state, frame, known)
        if isinstance(value, TupleVal):
            return Member(MEMBER, value.items)
        return None

    def _group(
        self, node: ast.expr | None, state: State, frame: Frame, known: dict[int, Expr]
    ) -> GroupVal | None:
        return group_value(self, node, state, frame, known)


def _map_arguments(call: ast.Call, spec: OpSpec) -> dict[str, ast.expr]:
    args: dict[str, ast.expr] = {}
    for index, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        if index < len(spec.params):
            args[spec.params[index]] = arg
    for keyword in call.keywords:
        if keyword.arg is not None:
            args[keyword.arg] = keyword.value
    return args


def _global_peer(local: Expr | None, group: GroupVal | None) -> Expr | None:
    """`send(t, group_dst=1, group=g)`: the global rank of the member of `g` at local rank 1
    (`groups.global_rank_of`, tied to the local ranks when two ranks are compared); at a computed
    local rank (`(me + 1) % size`), `groups.MemberAt`: opaque to the pairwise search, a number to
    the point-to-point simulation."""
    if group is None or local is None:
        return local
    return groups.member_at(group.key, local)


def _is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _group_choice(value: Expr) -> bool:
    """A group argument chosen among the default group (None) and group values by conditions."""
    if isinstance(value, IfExp):
        return _group_choice(value.then) and _group_choice(value.orelse)
    return isinstance(value, GroupVal) or (isinstance(value, Const) and value.value is None)


def _normalise_reduce_op(value: Expr | None) -> Expr:
    if value is None:
        return Const("SUM")
    if isinstance(value, Const) and isinstance(value.value, str):
        return Const(value.value.upper())
    return value


def _kept_keyword(ev: CallResolver, construction: ast.Call, attribute: str) -> ast.expr | None:
    """The keyword argument a catalogued constructor keeps as `attribute`, where it is passed."""
    if attribute not in catalog_kept_arguments(ev, construction):
        return None
    return next((k.value for k in construction.keywords if k.arg == attribute), None)


def _plain_result(spec: OpSpec, call: ast.Call) -> Atom:
    """What a collective returns where nothing more is known of it: one value, alike on every rank."""
    return Atom(f"result:{spec.op}@{where_of(call)}", "shared")
