"""The value evaluator: expressions to symbolic values, with rank taint.

In: an expression node, the path's `State` (its variables) and `Frame`, and the values of calls
already run on this path (`known`). Out: a `symbolic.Expr` — constants, the rank, the world size,
catalogued per-rank values (`value_from_spec`), per-process values (`nondet` atoms), and opaque
terms that carry the per-rank nature of their inputs. `pure` never runs a call (calls with effects
are the interpreter's, and reach here as `known` values). `bind` stores under a target.
"""

from __future__ import annotations

import ast

from collcheck.catalog import OpSpec
from collcheck.static import group_values, groups, list_positions
from collcheck.static.agreement import agreement_test
from collcheck.static.catalog_values import (
    BIN_OPS,
    COMPARE_OPS,
    MATH_FUNCTIONS,
    PASS_THROUGH,
    ROUNDING,
    VALUE_BUILTINS,
    VALUE_METHODS,
    value_from_spec,
)
from collcheck.static.comprehensions import filtered_list
from collcheck.static.framework_types import attribute_type, framework_bases
from collcheck.static.gradient_sync import call_output
from collcheck.static.group_values import (
    group_call_value,
    group_key,
    group_method_value,
    imported_value,
    looked_up_group,
    none_or_not,
    rank_function_value,
    subscript_value,
    type_of,
)
from collcheck.static.literals import is_boolean, is_numeral, is_text, numeric_text, small_literal_range
from collcheck.static.loader import FunctionNode, ModuleInfo, inherited_attribute
from collcheck.static.loop_values import grown_collection
from collcheck.static.names import PARTIAL_CALLS, dotted, environ_key, qualified_name, source_text
from collcheck.static.own_data import TrainedModules
from collcheck.static.program import METADATA_ATTRIBUTES, SIZE_METHODS, is_own_data
from collcheck.static.receivers import (
    Partial,
    bound_method_value,
    function_value,
    made_object,
    make_partial,
    object_class,
)
from collcheck.static.state import Frame, State
from collcheck.static.stored_values import kept_alike, stored_from
from collcheck.static.symbolic import (
    MEMBER,
    RANK,
    Atom,
    BinOp,
    BoolOp,
    Compare,
    Const,
    Expr,
    GroupVal,
    IfExp,
    InRange,
    Member,
    Sized,
    TupleVal,
    conjoin,
    constant_truth,
    is_rank_dependent,
    negate,
    opaque,
    read_of,
    substitute,
    tuple_item,
)
from collcheck.static.syntax import is_set_expr
from collcheck.static.tensor_shapes import SHAPED_FACTORIES, factory_tensor, shape_attribute, shape_read

ENV_READERS = frozenset({"os.getenv", "os.environ.get"})


def where_of(node: ast.AST) -> str:
    return f"{getattr(node, 'lineno', 0)}:{getattr(node, 'col_offset', 0)}"


class ValueEvaluator:
    """Evaluates expressions of one module (`module`), under the imports of the function being
    executed (`local_imports`, set by the interpreter when it enters a function)."""

    def __init__(self, module: ModuleInfo) -> None:
        self.module = module
        self.catalog = module.catalog
        self.local_imports = module.imports
        self.set_names: set[str] = set()  # variables bound to a set: iterating one is unordered
        self.imported_values: dict[str, Expr | None] = {}  # values of other files, by qualified name
        self.held_groups: dict[str, GroupVal | None] = {}  # per-rank lookups as groups (group_values)
        self.listed_positions: dict[str, tuple[Expr, Expr, Expr]] = {}  # `ranks[src]` (list_positions)
        self._class_types: dict[str, frozenset[str]] = {}  # class -> framework classes it derives from
        self._factories: dict[FunctionNode, str | None] = {}  # function -> the class it returns
        self.partials: dict[str, Partial] = {}  # `functools.partial` values made here, by atom name
        self.gradients_seen = False  # a wrapped module's output was made here (gradient_sync.py)
        self.trained_modules = TrainedModules()  # modules trained data-parallel by hand (own_data.py)

    def class_types(self, class_name: str) -> frozenset[str]:
        """The framework classes (outside the run) a class of this module derives from."""
        found = self._class_types.get(class_name)
        if found is None:
            found = self._class_types[class_name] = framework_bases(self.module, class_name)
        return found

    def pure(
        self, node: ast.expr | None, state: State, frame: Frame, known: dict[int, Expr] | None = None
    ) -> Expr:
        if node is None:
            return Const(None)
        if known and id(node) in known:
            return known[id(node)]
        handler = getattr(self, f"_pure_{type(node).__name__}", None)
        if handler is None:
            inputs = tuple(self.pure(child, state, frame, known) for child in _value_children(node))
            return opaque(f"{type(node).__name__.lower()}@{where_of(node)}", inputs)
        result: Expr = handler(node, state, frame, known)
        return result

    def _pure_Constant(
        self, node: ast.Constant, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        if isinstance(node.value, (bool, int, str)) or node.value is None:
            return Const(node.value)
        return Atom(f"const:{node.value!r}", "shared")

    def _pure_Name(self, node: ast.Name, state: State, frame: Frame, known: dict[int, Expr] | None) -> Expr:
        if node.id in state.env:
            return state.env[node.id]
        if node.id in self.module.globals:
            return self.module.globals[node.id]
        if node.id in ("True", "False", "None"):
            return Const({"True": True, "False": False, "None": None}[node.id])
        qualified = self.local_imports.lookup(node.id)
        if qualified is None and node.id in self.module.functions:
            return function_value(self.module, node.id)  # `apply(sync, t)`: the function handed on
        imported = imported_value(self, qualified, self.imported_values) if qualified else None
        return imported if imported is not None else Atom(f"global:{node.id}", "shared")

    def _pure_Attribute(
        self, node: ast.Attribute, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        parts = dotted(node)
        if parts:
            key = ".".join(parts)
            if key in state.env:
                return state.env[key]
            if parts[0] == "self" and len(parts) == 2 and frame.class_name:
                attribute = self.class_attribute(frame.class_name, parts[1])
                if attribute is not None:
                    return attribute
                if parts[1] in self.catalog.typed_attributes:  # `self.accelerator` of a Trainer
                    held = attribute_type(self.catalog, self.class_types(frame.class_name), parts[1])
                    if held is not None:
                        return Atom(f"type:{held}@self:{parts[1]}", "shared")
            name = qualified_name(node, self.local_imports)
            if name is not None and name.endswith((".group.WORLD", ".GroupMember.WORLD")):
                return Const(None)
            if name is not None and ".ReduceOp." in f".{name}":
                return Const(name.rsplit(".", 1)[-1].upper())
            if name is not None and self.local_imports.lookup(parts[0]) is not None:
                imported = imported_value(self, name, self.imported_values)  # `env.RANK` of a module
                if imported is not None:
                    return imported
        if (kept := group_values.coordinator_value(self, node, state, frame, known)) is not None:
            return kept  # `coordinator.ranks`, `coordinator.world_size` (not the world's size)
        if node.attr in self.catalog.rank_attributes:
            stored = self._stored_place(node, state, frame, known)
            if stored is not None:
                return stored
            spec = self.catalog.rank_attributes[node.attr]
            if spec == "group_rank":  # the rank inside the group the attribute is read from
                owner = self.pure(node.value, state, frame, known)
                return groups.local_rank(group_key(owner, node.value))
            return value_from_spec(spec, f"attr:{node.attr}")
        base = self.pure(node.value, state, frame, known)
        if (shape := shape_attribute(node.attr, base)) is not None:
            return shape
        if isinstance(base, Atom) and base.name.startswith("type:"):
            type_name, _, where = base.name[5:].partition("@")
            held = None if "." in where else attribute_type(self.catalog, (type_name,), node.attr)
            if held is not None:  # `trainer.strategy`: an object the catalogued type keeps
                return Atom(f"type:{held}@{where}:{node.attr}", "shared")
            return Atom(f"{base.name}.{node.attr}", "shared")
        instance_of = object_class(self.module, base)
        if instance_of is not None:  # `s.seen` of an object of a class of the file: as its methods set it
            found = self.class_attribute(instance_of.name, node.attr)
            if found is None:  # `run_main_only(saver.save)`: the method, called by the receiver
                found = bound_method_value(self.module, base, node.attr)
            if found is not None:
                return found
        if isinstance(base, Atom):
            # Named after the object, not the place it is read: `self.remote` read in two
            # branches (or in two methods) is one value (an assignment in between is in `state.env`).
            holder = "self" if base.name.startswith("param:self@") else base.name
            if node.attr in METADATA_ATTRIBUTES and is_own_data(base):  # what code made it, not data
                return Atom(f"{holder}.{node.attr}", "shared")
            return opaque(f"{holder}.{node.attr}", (base,))
        return opaque(f"{source_text(node)}@{where_of(node)}", (base,))

    def _pure_Subscript(
        self, node: ast.Subscript, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        env_key = environ_key(node, self.local_imports)
        if env_key is not None:
            return self._environment_value(env_key, node)
        base = self.pure(node.value, state, frame, known)
        if isinstance(node.slice, ast.Slice):
            return self._slice(node, base, state, frame, known)
        index = self.pure(node.slice, state, frame, known)
        if (
            isinstance(base, TupleVal)
            and isinstance(index, Const)
            and isinstance(index.value, int)
            and -len(base.items) <= index.value < len(base.items)
        ):
            return base.items[index.value]
        grouped = subscript_value(base, index)
        if grouped is not None:
            return grouped
        if isinstance(base, Atom) and isinstance(index, Const) and isinstance(index.value, (str, int)):
            # `cfg["sync"]` read in two branches is one value, like an attribute (see above).
            return opaque(f"item:{base.name}[{index.value!r}]", (base,))
        inputs = [base, *(self.pure(c, state, frame, known) for c in _value_children(node.slice))]
        if index is not None:
            inputs.append(index)
        value = opaque(f"item:{source_text(node)}@{where_of(node)}", tuple(inputs))
        value = list_positions.note_entry(self, node, index, value, state, frame, known)
        if value.kind == "perrank" and is_rank_dependent(index):
            self._hold_lookup(value, looked_up_group(base, index, node))
        return value

    def _hold_lookup(self, value: Atom, group: GroupVal | None) -> None:
        """Remember what a per-rank lookup `groups[key]` is as a group, for when the variable it
        is stored in is passed as one (`g = groups[key]; dist.all_reduce(t, group=g)`). The
        value is named after the place of the lookup, so paths that computed the key differently
        share it: then it is no group the ranks are known to meet on."""
        if value.name in self.held_groups and self.held_groups[value.name] != group:
            group = None
        self.held_groups[value.name] = group

    def _pure_BinOp(self, node: ast.BinOp, state: State, frame: Frame, known: dict[int, Expr] | None) -> Expr:
        left, right = self.pure(node.left, state, frame, known), self.pure(node.right, state, frame, known)
        op = BIN_OPS.get(type(node.op))
        if isinstance(node.op, ast.Div) and isinstance(left, Atom) and left.name.startswith("type:"):
            # `root / "name"` of a path: another object of the type
            return Atom(f"type:{left.name[5:].partition('@')[0]}@{where_of(node)}", "shared")
        if op is None or is_text(left) or is_text(right):
            return opaque(f"binop@{where_of(node)}", (left, right))
        if isinstance(left, TupleVal) or isinstance(right, TupleVal):
            if op == "+" and isinstance(left, TupleVal) and isinstance(right, TupleVal):
                return TupleVal(left.items + right.items)
            if op == "*" and isinstance(left, TupleVal) and not isinstance(right, TupleVal):
                # `[x] * n`: n times as many entries, whatever they hold
                length = BinOp("*", Const(len(left.items)), right)
                return Sized(f"repeat@{where_of(node)}", BinOp("max", Const(0), length), left)
            return opaque(f"binop@{where_of(node)}", (left, right))
        return BinOp(op, left, right)

    def _pure_UnaryOp(
        self, node: ast.UnaryOp, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        operand = self.pure(node.operand, state, frame, known)
        if isinstance(node.op, ast.Not):
            return negate(operand)
        if isinstance(node.op, ast.USub):
            if isinstance(operand, Const) and isinstance(operand.value, int):
                return Const(-operand.value)
            return BinOp("-", Const(0), operand)
        if isinstance(node.op, ast.UAdd):
            return operand
        return opaque(f"unary@{where_of(node)}", (operand,))

    def _pure_BoolOp(
        self, node: ast.BoolOp, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        if self._agreement(node, frame):
            return Atom(f"agreed:{source_text(node)}@{where_of(node)}", "shared")
        values = tuple(self.pure(v, state, frame, known) for v in node.values)
        return BoolOp("and" if isinstance(node.op, ast.And) else "or", values)

    def _agreement(self, node: ast.expr, frame: Frame) -> bool:
        """`mine is not None and all(f == mine for f in gathered)` after gathering `mine`: the
        same on every rank (agreement.agreement_test)."""
        return bool(frame.stack) and agreement_test(node, frame.stack[-1], self._catalogued_op)

    def _catalogued_op(self, call: ast.Call) -> OpSpec | None:
        return self.catalog.functions.get(qualified_name(call.func, self.local_imports) or "")

    def _pure_Compare(
        self, node: ast.Compare, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        parts: list[Expr] = []
        left_node = node.left
        left = self.pure(left_node, state, frame, known)
        for op, right_node in zip(node.ops, node.comparators, strict=False):
            right = self.pure(right_node, state, frame, known)
            parts.append(self._compare(op, left, right, right_node, state, frame, known))
            left = right
        return parts[0] if len(parts) == 1 else BoolOp("and", tuple(parts))

    def _pure_IfExp(self, node: ast.IfExp, state: State, frame: Frame, known: dict[int, Expr] | None) -> Expr:
        test = self.pure(node.test, state, frame, known)
        then, orelse = self.pure(node.body, state, frame, known), self.pure(node.orelse, state, frame, known)
        truth = constant_truth(test)
        if truth is not None:
            return then if truth else orelse
        return IfExp(test, then, orelse)

    def _pure_Tuple(
        self, node: ast.Tuple | ast.List, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        if any(isinstance(e, ast.Starred) for e in node.elts):
            return opaque(
                f"seq@{where_of(node)}", tuple(self.pure(e, state, frame, known) for e in node.elts)
            )
        return TupleVal(tuple(self.pure(e, state, frame, known) for e in node.elts))

    _pure_List = _pure_Tuple
    _pure_ListComp = filtered_list

    def _pure_NamedExpr(
        self, node: ast.NamedExpr, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        value = self.pure(node.value, state, frame, known)
        state.env[node.target.id] = value
        return value

    def _pure_Call(self, node: ast.Call, state: State, frame: Frame, known: dict[int, Expr] | None) -> Expr:
        if isinstance(node.func, ast.Name) and node.func.id == "all" and self._agreement(node, frame):
            return Atom(f"agreed:{source_text(node)}@{where_of(node)}", "shared")
        name = qualified_name(node.func, self.local_imports)
        args = [self.pure(a, state, frame, known) for a in node.args]
        where = where_of(node)
        if name in PARTIAL_CALLS and args:  # `functools.partial(f, a)` of a function of the file
            keywords = [self.pure(k.value, state, frame, known) for k in node.keywords]
            bound = make_partial(self.module, node, args, keywords, self.partials)
            if bound is not None:
                return bound
        if name is not None:
            special = self._known_call(name, node, args, state, frame, known)
            if special is not None:
                return special
        if isinstance(node.func, ast.Name):
            builtin = self._builtin_call(node.func.id, node, args, state, frame, known)
            if builtin is not None:
                return builtin
        receiver: Expr | None = None
        if isinstance(node.func, ast.Attribute):
            method = node.func.attr
            on_group = group_method_value(self, node, state, frame, known)
            if on_group is not None:
                return on_group
            receiver_type = type_of(self, node.func.value, state, frame.class_name)
            reading = f"{receiver_type}.{method}"
            if receiver_type and reading in self.catalog.nondeterministic:  # `path.exists()` of a Path
                return Atom(f"{reading}()@{where}", "nondet", why=self.catalog.nondeterministic[reading])
            produced = self.catalog.types.get(f"{receiver_type}.{method}") if receiver_type else None
            if produced is not None:  # `accelerator.prepare(model)`: a catalogued method's result type
                return Atom(f"type:{produced or receiver_type}@{where}", "shared")
            if method in self.catalog.rank_methods and not node.args:
                return value_from_spec(self.catalog.rank_methods[method], f"method:{method}@{where}")
            receiver = self.pure(node.func.value, state, frame, known)
            if method == "get" and isinstance(node.func.value, ast.Attribute):
                env_name = qualified_name(node.func.value, self.local_imports)
                if (
                    env_name == "os.environ"
                    and args
                    and isinstance(args[0], Const)
                    and isinstance(args[0].value, str)
                ):
                    return self._environment_value(args[0].value, node)
            shape = shape_read(method, receiver, args)
            if shape is not None:
                return shape
            if method in VALUE_METHODS or (method in SIZE_METHODS and is_own_data(receiver)):
                # the size of this rank's own data is its own too (what else varies keeps to `len`)
                inputs = (receiver, *args, *(self.pure(k.value, state, frame, known) for k in node.keywords))
                return read_of(source_text(node), receiver, inputs)
        made = made_object(self.module, self.local_imports, node, self._factories)
        if made is not None:  # `Syncer(...)`, `make_syncer()`: an object of a class of the file
            return made
        return call_output(self, node, args, receiver, state, frame, known)  # a black box (see there)

    def _stored_place(
        self, node: ast.Attribute, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr | None:
        """`ws.rank` where the object's class stores it from what this function passes it, a value
        kept alike (stored_values): `None` until stored, then that value, not the catalogued one."""
        instance_of = object_class(self.module, self.pure(node.value, state, frame, known))
        function = frame.stack[-1] if frame.stack else None
        name = (
            None
            if instance_of is None
            else stored_from(self.module, instance_of.name, node.attr, node.value, function)
        )
        value = None if name is None else self.pure(name, state, frame, known)
        if value is None or not kept_alike(value):
            return None
        return IfExp(Atom(f"stored:{source_text(node)}@{frame.function}", "shared"), value, Const(None))

    def class_attribute(self, class_name: str, attribute: str) -> Expr | None:
        return inherited_attribute(self.module, class_name, attribute)

    def _environment_value(self, key: str, node: ast.AST) -> Expr:
        """The text of an environment variable: the same on every rank as a truth value (`"0"`
        is true), a per-rank number once read as one (`spelled_number`)."""
        return Atom(f"env:{key}", "shared")

    def spelled_number(self, value: Expr) -> Expr:
        """The number an environment variable the catalog knows spells (`int(os.environ["RANK"])`,
        `os.environ["RANK"] == "0"`); any other value as it is."""
        if isinstance(value, Atom) and value.name.startswith("env:") and value.kind == "shared":
            spec = self.catalog.rank_env.get(value.name[4:])
            if spec is not None:
                return value_from_spec(spec, value.name)
        return value

    def _compare(
        self,
        op: ast.cmpop,
        left: Expr,
        right: Expr,
        right_node: ast.expr,
        state: State,
        frame: Frame,
        known: dict[int, Expr] | None,
    ) -> Expr:
        if isinstance(op, (ast.In, ast.NotIn)):
            test = self._membership_test(left, right, right_node, state, frame, known)
            return negate(test) if isinstance(op, ast.NotIn) else test
        name = COMPARE_OPS.get(type(op))
        if name is None:
            return opaque(f"compare@{where_of(right_node)}", (left, right))
        if is_numeral(left) or is_numeral(right):
            left, right = self.spelled_number(left), self.spelled_number(right)
        left, right = numeric_text(left, right), numeric_text(right, left)
        if (listed := list_positions.position_test(self, name, left, right)) is not None:
            return listed
        if isinstance(op, (ast.Is, ast.IsNot)) and right == Const(None):
            left = none_or_not(left, self.module)
        return Compare(name, left, right)

    def _membership_test(
        self,
        item: Expr,
        container: Expr,
        node: ast.expr,
        state: State,
        frame: Frame,
        known: dict[int, Expr] | None,
    ) -> Expr:
        if isinstance(container, TupleVal):
            if any(is_numeral(option) for option in container.items):  # `os.environ["RANK"] in ("0", "-1")`
                item = self.spelled_number(item)
                return Member(item, tuple(numeric_text(option, item) for option in container.items))
            return Member(item, container.items)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
            values = [self.pure(a, state, frame, known) for a in node.args]
            if len(values) == 1:
                return InRange(item, Const(0), values[0])
            if len(values) == 2:
                return InRange(item, values[0], values[1])
        if isinstance(container, GroupVal) and container.members is not None:
            inside = substitute(container.members, {MEMBER: item})
            if container.color is not None:  # this rank's subgroup: same color as the rank
                same = Compare("==", substitute(container.color, {RANK: item}), container.color)
                return conjoin((inside, same))
            return inside
        if item == RANK and (not is_rank_dependent(container) or groups.is_member_list(container)):
            # `rank in self.ranks`: a membership test, the same atom wherever that collection is read.
            return groups.membership(group_key(container, node))
        return opaque(f"in@{where_of(node)}", (item, container))

    def _known_call(
        self,
        name: str,
        node: ast.Call,
        args: list[Expr],
        state: State,
        frame: Frame,
        known: dict[int, Expr] | None,
    ) -> Expr | None:
        where = where_of(node)
        catalog = self.catalog
        if name in catalog.rank_functions:
            spec = catalog.rank_functions[name]
            in_group = rank_function_value(self, spec, node, state, frame, known)
            return in_group if in_group is not None else value_from_spec(spec, where)
        about_groups = group_call_value(self, name, node, args, state, frame, known)
        if about_groups is not None:
            return about_groups
        if name in SHAPED_FACTORIES:
            keywords = {k.arg: self.pure(k.value, state, frame, known) for k in node.keywords if k.arg}
            entries = (
                Atom(f"{name}()@{where}", "nondet", why=catalog.nondeterministic[name])
                if name in catalog.nondeterministic
                else Atom(f"call:{source_text(node)}", "shared")
            )
            tensor = factory_tensor(name, node, args, keywords, entries, where)
            if tensor is not None:
                return tensor
        if name in catalog.nondeterministic:
            return Atom(f"{name}()@{where}", "nondet", why=catalog.nondeterministic[name])
        if name in ROUNDING and len(args) == 1 and not node.keywords:
            division = node.args[0]
            if isinstance(division, ast.BinOp) and isinstance(division.op, ast.Div):
                # `math.ceil(n / k)`: the integer the solver can reason about
                left, right = (
                    self.pure(side, state, frame, known) for side in (division.left, division.right)
                )
                return BinOp(ROUNDING[name], left, right)
            return args[0]
        if name in MATH_FUNCTIONS:
            return opaque(f"call:{source_text(node)}", tuple(args))
        if name in ENV_READERS and args and isinstance(args[0], Const) and isinstance(args[0].value, str):
            return self._environment_value(args[0].value, node)
        if name in catalog.types:
            return Atom(f"type:{catalog.types[name] or name}@{where}", "shared")
        return None

    def _builtin_call(
        self,
        name: str,
        node: ast.Call,
        args: list[Expr],
        state: State,
        frame: Frame,
        known: dict[int, Expr] | None,
    ) -> Expr | None:
        if self.local_imports.lookup(name) is not None or name in self.module.functions:
            return None
        if name in PASS_THROUGH and len(args) == 1 and not node.keywords:
            value = self.spelled_number(args[0]) if name != "bool" else args[0]
            if (
                isinstance(value, Const)
                and isinstance(value.value, str)
                and value.value.lstrip("-").isdigit()
            ):
                return Const(int(value.value))
            if name == "bool":
                return Compare("!=", value, Const(0)) if not is_boolean(value) else value
            return value
        if name in ("min", "max") and len(args) >= 2 and not node.keywords:
            result = args[0]
            for other in args[1:]:
                result = BinOp(name, result, other)
            return result
        if name == "len" and len(args) == 1:
            return self.length_of(args[0], node)
        if name in ("tuple", "list") and len(args) == 1 and isinstance(args[0], TupleVal):
            return args[0]
        if name in ("tuple", "list", "sorted", "reversed") and len(args) == 1 and isinstance(args[0], Sized):
            return Sized(f"{name}@{where_of(node)}", args[0].length, args[0])  # as many entries
        literal_range = small_literal_range(args) if name == "range" and not node.keywords else None
        if literal_range is not None:  # `list(range(4))`: four ranks
            return TupleVal(tuple(Const(i) for i in literal_range))
        if name in VALUE_BUILTINS:
            keywords = [self.pure(k.value, state, frame, known) for k in node.keywords]
            return opaque(f"call:{source_text(node)}", (*args, *keywords))
        return None

    def trip_count(
        self, node: ast.expr, iterable: Expr, state: State, frame: Frame, known: dict[int, Expr] | None = None
    ) -> Expr:
        """How often `for _ in node` runs; `known`: the values of the calls the interpreter ran
        while evaluating `node` (a helper's result in `range(helper(rank))`)."""
        if isinstance(iterable, TupleVal):
            return Const(len(iterable.items))
        if isinstance(iterable, Sized):
            return iterable.length
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name == "range" and not node.keywords:
                return self._range_trip([self.pure(a, state, frame, known) for a in node.args], node)
            if name in ("enumerate", "reversed", "sorted", "list", "tuple") and node.args:
                inner = node.args[0]
                return self.trip_count(inner, self.pure(inner, state, frame, known), state, frame, known)
            if name == "zip" and node.args:
                trips = [
                    self.trip_count(a, self.pure(a, state, frame, known), state, frame, known)
                    for a in node.args
                ]
                result = trips[0]
                for other in trips[1:]:
                    result = BinOp("min", result, other)
                return result
        return self.length_of(iterable, node)  # the same collection has the same length in every loop

    def _range_trip(self, args: list[Expr], node: ast.AST) -> Expr:
        start: Expr
        stop: Expr
        if len(args) == 1:
            start, stop, step = Const(0), args[0], 1
        elif len(args) in (2, 3):
            start, stop = args[0], args[1]
            raw_step = args[2] if len(args) == 3 else Const(1)
            if not isinstance(raw_step, Const) or not isinstance(raw_step.value, int) or raw_step.value == 0:
                return opaque(f"trips@{where_of(node)}", tuple(args))
            step = raw_step.value
        else:
            return opaque(f"trips@{where_of(node)}", tuple(args))
        if step < 0:
            start, stop, step = stop, start, -step
        span = BinOp("-", stop, start)
        return BinOp("max", Const(0), span if step == 1 else BinOp("ceildiv", span, Const(step)))

    def _slice(
        self, node: ast.Subscript, base: Expr, state: State, frame: Frame, known: dict[int, Expr] | None
    ) -> Expr:
        """`items[start:stop:step]`: unknown contents, but a length z3 can reason about."""
        assert isinstance(node.slice, ast.Slice)
        length = self.length_of(base, node)
        part = node.slice
        start = self.pure(part.lower, state, frame, known) if part.lower is not None else Const(0)
        stop = (
            BinOp("min", self.pure(part.upper, state, frame, known), length)
            if part.upper is not None
            else length
        )
        step = self.pure(part.step, state, frame, known) if part.step is not None else Const(1)
        name = f"slice:{source_text(node)}@{where_of(node)}"
        negative = any(
            isinstance(v, Const) and isinstance(v.value, int) and v.value < 0 for v in (start, step)
        )
        if negative or isinstance(part.upper, ast.UnaryOp):
            return opaque(name, (base, start, step, stop))
        start = BinOp("min", start, length)
        span = BinOp("-", stop, start)
        return Sized(name, BinOp("max", Const(0), BinOp("ceildiv", span, step)), base)

    def length_of(self, value: Expr, node: ast.AST) -> Expr:
        """`len(value)`, as the solver sees it."""
        if isinstance(value, TupleVal):
            return Const(len(value.items))
        if isinstance(value, Sized):
            return value.length
        if (members := group_values.member_count(value)) is not None:  # `len(get_process_group_ranks(g))`
            return members
        if isinstance(value, IfExp) and all(
            isinstance(v, (TupleVal, Sized)) for v in (value.then, value.orelse)
        ):
            # a list appended to on one branch: its length is chosen by the branch's test
            return IfExp(value.test, self.length_of(value.then, node), self.length_of(value.orelse, node))
        bound = opaque(f"len({value})", (value,))  # same value, same length, wherever it is asked
        return Atom(bound.name, bound.kind, bound.why, lower=0)

    def mutated(self, old: Expr, call: ast.Call, state: State, frame: Frame, name: str) -> Expr:
        """The value of the collection `name` after `call`, an in-place method on it (`xs.append(v)`)."""
        added = tuple(self.pure(a, state, frame) for a in call.args)
        return grown_collection(old, call, added, self.length_of, f"{name}@{where_of(call)}")

    def bind(self, target: ast.expr, value: Expr, state: State, source: ast.expr | None = None) -> None:
        if isinstance(target, ast.Name):
            state.env[target.id] = value
            if source is not None and is_set_expr(source, self.set_names):
                self.set_names.add(target.id)
            elif source is not None:
                self.set_names.discard(target.id)
            return
        if isinstance(target, ast.Starred):
            self.bind(target.value, opaque(f"star@{where_of(target)}", (value,)), state)
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, Atom) and value.name.startswith("type:") and target.elts:
                # `engine, *_ = deepspeed.initialize(...)`: the first element is the typed object.
                self.bind(target.elts[0], value, state)
                for index, element in enumerate(target.elts[1:], start=1):
                    self.bind(element, Atom(f"unpack{index}:{value.name}", "shared"), state)
                return
            for index, element in enumerate(target.elts):
                part = tuple_item(value, index, len(target.elts))
                if part is None:
                    part = opaque(f"unpack{index}@{where_of(target)}", (value,))
                self.bind(element, part, state)
            return
        if isinstance(target, ast.Attribute):
            parts = dotted(target)
            if parts:
                state.env[".".join(parts)] = value
        elif isinstance(target, ast.Subscript):  # `self.seen[key] = v`: the container is another value
            parts = dotted(target.value)
            if parts and len(parts) > 1:
                key = ".".join(parts)
                old = state.env.get(key)  # not what is stored: it may differ while the change does not
                state.env[key] = opaque(f"stored:{key}@{where_of(target)}", (old,) if old is not None else ())


def _value_children(node: ast.AST) -> list[ast.expr]:
    return [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr)]
