"""Per-rank data, by the program's own evidence: the counts it combines across ranks.

A function that puts a host value into a tensor to all-reduce it (`torch.tensor([len(batch)])`,
then `all_reduce(..., op=MAX)`), or all-gathers a Python object (`all_gather_object(out, n)`),
says that the value differs between ranks: the number of tokens of this rank's batch, its own
requests, a flag only it knows. The value before such a collective is this rank's own; the one
after an all-reduce is the same everywhere (`uniform_after`, collectives.py).

In: a function, the catalog's answer for a call (`op_spec`) and the helper of this file a call
reaches (`helper`). Out (`LocalData.names`): the names of the function that hold this rank's own
data: those put into a tensor that a combining collective (all-reduce, all-gather, reduce,
gather, reduce-scatter, all-to-all) takes as input, the operands of an object collective, the
arguments it passes to a helper's parameters that reach one (`LocalData.parameters`, the
helper's own entry), and, backward through the assignments made before that call, the names
their values were computed from as data (arguments and operands; not the function called, an
object whose attribute is read or whose method is called (other than one that returns its
contents, `t.float()`), a shape handed to a tensor factory, a `range`). A tensor handed
to the collective as it is (model activations, gradients) is no such evidence: its shape must be
the same on every rank, and its contents are what the collective is for. Computed once per
function and cached; a helper reached again while its own entry is being computed reaches
nothing.
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Callable

from collcheck.catalog import OpSpec
from collcheck.static.catalog_values import VALUE_METHODS
from collcheck.static.names import dotted, nodes_under
from collcheck.static.sequences import whole_sequences
from collcheck.static.tensor_shapes import SHAPED_FACTORIES

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef

# Collectives whose result combines every rank's input: an input that were the same everywhere
# would need no such call.
COMBINING_OPS = frozenset(
    {
        "all_reduce",
        "all_reduce_coalesced",
        "all_gather",
        "all_gather_coalesced",
        "all_gather_into_tensor",
        "all_gather_object",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "reduce",
        "gather",
        "gather_object",
        "all_to_all",
        "all_to_all_single",
    }
)

# Collectives of Python objects: every rank's object, whatever it is.
OBJECT_OPS = frozenset({"all_gather_object", "gather_object"})

# Tensors built from host values (numbers, lists of them).
HOST_TENSORS = frozenset(
    {"torch.tensor", "torch.as_tensor", "torch.Tensor", "torch.LongTensor", "torch.IntTensor"}
    | {"torch.FloatTensor", "torch.DoubleTensor", "torch.BoolTensor", "torch.cuda.LongTensor"}
)

# Methods whose result carries the receiver's contents (`t.float()`, `x.to(device)`).
CARRYING_METHODS = VALUE_METHODS | frozenset(
    {"to", "view", "reshape", "flatten", "contiguous", "unsqueeze", "squeeze", "size", "__len__", "numel"}
)

# Attributes that read the size of what holds them: a per-rank size is per-rank data of the holder.
SIZE_ATTRIBUTES = frozenset({"shape"})

# Calls whose result is as long as what the data selects (`torch.nonzero(x)`, `x.unique()`).
DATA_SIZED = frozenset({"nonzero", "masked_select", "unique", "argwhere"})

# Methods of a module that list its parameters (each with its `.grad` after a backward).
PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})

# Builtins that read a value's size or convert it, nothing more (`_plain`).
PLAIN_BUILTINS = frozenset({"len", "int", "float", "bool"})

# Calls whose arguments are a shape or a template, not contents (`torch.zeros_like(t)`).
TEMPLATE_SUFFIXES = ("_like",)

OpSpecOf = Callable[[ast.Call, FunctionNode], OpSpec | None]  # the op of a call in a function
Evidence = tuple[str, int, frozenset[int]]  # how a value is combined, the line of that call, by which
# A name of this rank's data that a call hands a combining collective: how it is combined, whether
# it is a tensor operand named whole (then only the host values it was built from are evidence),
# whether it is all that flows into its element, the lines of the collectives that combine it.
Seed = tuple[str, str, bool, bool, frozenset[int]]
HelperOf = Callable[[ast.Call, FunctionNode], FunctionNode | None]
NameOf = Callable[[ast.expr], str | None]
SpecOf = Callable[[ast.Call], OpSpec | None]  # the catalogued op a call issues, if any


class LocalData:
    """The per-rank data names of the functions of one analysis, computed on demand."""

    def __init__(
        self,
        op_spec: OpSpecOf,
        helper: HelperOf,
        called_name: NameOf,
        combining_words: frozenset[str],
        delivering_words: frozenset[str] = frozenset(),
    ) -> None:
        self._op_spec = op_spec  # the caller sets the imports of the function asked about
        # The last names of the catalogued callables that combine: a call named otherwise is
        # not asked about (the catalog lookup is the costly part of a function's entry).
        self._words = combining_words
        # ... and those whose result is the same on every rank (`uniform_after`: an all-reduce's
        # tensor, an all-gather's list, a broadcast's object list): see `delivered`
        self._delivering = delivering_words
        self._received: dict[FunctionNode, dict[str, int]] = {}
        self._trained: dict[FunctionNode, frozenset[str]] = {}
        self._helper = helper
        self._called_name = called_name
        self._names: dict[FunctionNode, frozenset[str]] = {}
        self._busy: set[FunctionNode] = set()
        self._statements: dict[FunctionNode, list[tuple[int, frozenset[int]]]] = {}
        self._by_line: dict[FunctionNode, dict[int, tuple[str, ...]]] = {}
        # (function, name) -> how its value is combined across ranks, the line of that call, and
        # the lines of the collectives that combine it (that call's, or those of the helper it calls)
        self.evidence: dict[tuple[FunctionNode, str], Evidence] = {}
        # (function, name) whose value alone is what is combined (or computed into it), not one of
        # several inputs: only those make a parameter this rank's own (`parameter_paths`)
        self._direct: set[tuple[FunctionNode, str]] = set()

    def names(self, function: FunctionNode) -> frozenset[str]:
        found = self._names.get(function)
        if found is None:
            if function in self._busy:
                return frozenset()  # recursion: what the outer computation finds is all there is
            self._busy.add(function)
            try:
                found = self._names[function] = self._compute(function)
            finally:
                self._busy.discard(function)
        return found

    def combined_at(self, function: FunctionNode, line: int) -> tuple[str, ...]:
        """The names whose evidence is the call at `line` of `function` (its first combining
        call): after it, the ranks have exchanged them."""
        by_line = self._by_line.get(function)
        if by_line is None:
            grouped: dict[int, list[str]] = {}
            for name in sorted(self.names(function)):
                evidence = self.evidence.get((function, name))
                if evidence is not None:
                    grouped.setdefault(evidence[1], []).append(name)
            by_line = self._by_line[function] = {at: tuple(names) for at, names in grouped.items()}
        return by_line.get(line, ())

    def reached_from(self, function: FunctionNode, statement: ast.stmt, line: int) -> bool:
        """Every run of `statement` (an assignment, or a `for` binding its target) goes on to the
        statement at `line` (the combining call): that one is inside no `if`, loop, `with` or
        `try` that `statement` is not inside too. A value combined on some paths only (`if
        dp_size > 1: agree(flag)`) is no evidence on the others."""
        starts = self._statements.get(function)
        if starts is None:
            starts = self._statements[function] = _enclosing_statements(function)
        index = bisect.bisect_right([start for start, _ in starts], line) - 1
        if index < 0:
            return False
        inside = dict(starts).get(statement.lineno, frozenset())
        if isinstance(statement, (ast.For, ast.AsyncFor)):
            inside = inside | {id(statement)}
        return starts[index][1] <= inside

    def direct(self, function: FunctionNode, name: str) -> bool:
        """`name`'s value is all that flows into its element of what `function` combines (`n` of
        `torch.tensor([n, m])`, `batch` of `len(batch)`), not one input of several (`a * b`,
        `{"shape": s, "rank": r}`): only such a value is known to differ between ranks, as the
        other inputs of a mixed one (a world size, a config field) often are the same everywhere."""
        return (function, name) in self._direct

    def delivered(self, function: FunctionNode, statement: ast.stmt) -> bool:
        """`statement` (an assignment, or a `for` binding its target) binds a value computed only
        from what a collective delivered above it (`for name in gathered_list`, `x = reduced[0]`):
        the same on every rank, whatever the name is combined for further down."""
        received = self._received.get(function)
        if received is None:
            received = self._received[function] = self._receive(function)
        value = _bound_value(statement)
        if value is None or not received:
            return False
        names = self._free_names(value)
        line = statement.lineno
        return bool(names) and all(received.get(name, line) < line for name in names)

    def trained(self, function: FunctionNode) -> frozenset[str]:
        """The modules (dotted, `model`, `self.net`) whose parameters' gradients `function`
        combines itself (`for p in model.parameters(): dist.all_reduce(p.grad)`): data-parallel
        training by hand, so each rank runs the module on its own inputs, and what the module
        returns is this rank's own data (a loss, a metric), as for a wrapped module
        (gradient_sync.py)."""
        found = self._trained.get(function)
        if found is None:
            self._trained[function] = frozenset()  # recursion: what the outer computation finds
            found = self._trained[function] = frozenset(self._find_trained(function))
        return found

    def _find_trained(self, function: FunctionNode) -> set[str]:
        found: set[str] = set()
        for call in nodes_under(function):  # `average_gradients(model)`: a helper does it
            helper = self._helper(call, function) if isinstance(call, ast.Call) else None
            if helper is None or helper is function or not self.trained(helper):
                continue
            assert isinstance(call, ast.Call)
            params = [a.arg for a in [*helper.args.posonlyargs, *helper.args.args]]
            if params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
                params = params[1:]
            handed = dict(zip(params, call.args, strict=False))
            handed.update((k.arg, k.value) for k in call.keywords if k.arg is not None)
            for name, argument in handed.items():
                path = dotted(argument) if name in self.trained(helper) else None
                found.update([".".join(path)] if path is not None else [])
        for loop in nodes_under(function):
            if not isinstance(loop, (ast.For, ast.AsyncFor)) or not isinstance(loop.iter, ast.Call):
                continue
            func = loop.iter.func
            if not isinstance(func, ast.Attribute) or func.attr not in PARAMETER_METHODS:
                continue
            module = dotted(func.value)
            target = loop.target.elts[-1] if isinstance(loop.target, ast.Tuple) else loop.target
            if module is None or not isinstance(target, ast.Name):
                continue
            calls = [n for s in loop.body for n in ast.walk(s) if isinstance(n, ast.Call)]
            if any(self._combines_gradient(call, target.id, function) for call in calls):
                found.add(".".join(module))
        return found

    def _combines_gradient(self, call: ast.Call, parameter: str, function: FunctionNode) -> bool:
        """`call` is a combining collective whose operand is `parameter.grad` (or of it)."""
        spec = self._op_spec(call, function) if _last_name(call) in self._words else None
        if spec is None or spec.op not in COMBINING_OPS:
            return False
        for name in spec.operands:
            path = dotted(operand_argument(call, spec, name) or ast.Constant(None))
            if path is not None and len(path) >= 2 and path[0] == parameter and path[1] == "grad":
                return True
        return False

    def _delivered_to(self, call: ast.Call, function: FunctionNode) -> list[str]:
        """The names `call` (a collective) leaves the same on every rank (`uniform_after`)."""
        spec = self._op_spec(call, function)
        if spec is None:
            return []
        arguments = [operand_argument(call, spec, name) for name in spec.uniform_after]
        return [argument.id for argument in arguments if isinstance(argument, ast.Name)]

    def _free_names(self, value: ast.expr) -> frozenset[str]:
        """`data_names` of `value`, and the names that index into it (`gathered[rank]` is this
        rank's entry of a delivered list), but those its comprehensions bind (`x` of `[x for x in
        xs]`)."""
        bound = {
            n.id
            for part in ast.walk(value)
            if isinstance(part, ast.comprehension)
            for n in ast.walk(part.target)
            if isinstance(n, ast.Name)
        }
        indices = {
            n.id
            for part in ast.walk(value)
            if isinstance(part, ast.Subscript)
            for n in ast.walk(part.slice)
            if isinstance(n, ast.Name)
        }
        return (data_names(value, self._called_name) | indices) - bound

    def _receive(self, function: FunctionNode) -> dict[str, int]:
        """The names of `function` that hold what a collective delivered (its `uniform_after`
        arguments), with the first line where they do, and forward through the assignments and
        loops computed from those alone (`flat = [x for part in gathered for x in part]`)."""
        received: dict[str, int] = {}
        bindings: list[tuple[frozenset[str], ast.expr, int]] = []
        for node in nodes_under(function):
            if isinstance(node, ast.Call) and _last_name(node) in self._delivering:
                for name in self._delivered_to(node, function):
                    received[name] = min(received.get(name, node.lineno), node.lineno)
            if isinstance(node, ast.stmt):
                value = _bound_value(node)
                targets = _bound_targets(node)
                if value is not None and targets:
                    bindings.append((targets, value, node.lineno))
        if not received:
            return received
        changed = True
        while changed:
            changed = False
            for stored, value, line in bindings:
                names = self._free_names(value)
                if not names or not all(received.get(name, line) < line for name in names):
                    continue
                for name in stored - received.keys():
                    received[name] = line
                    changed = True
        return received

    def parameters(self, function: FunctionNode) -> tuple[str, ...]:
        """The parameters of `function` (in order) whose value reaches a combining collective."""
        held = self.names(function)
        return tuple(a.arg for a in [*function.args.posonlyargs, *function.args.args] if a.arg in held)

    def parameter_paths(self, function: FunctionNode) -> tuple[tuple[str, int], ...]:
        """What of its parameters `function` combines across ranks, whole (`batch`) or by an
        attribute path (`batch.num_tokens`, `self.pending`), each with the line of the first
        call that combines it (directly or through a helper), in order of the paths."""
        params = {a.arg for a in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]}
        found = []
        for path in sorted(self.names(function)):
            root = path.partition(".")[0]
            evidence = self.evidence.get((function, path))
            direct = (function, path) in self._direct  # all that flows where it is combined
            if root in params and evidence is not None and direct and path not in ("self", "cls"):
                found.append((path, evidence[1]))
        return tuple(found)

    def _compute(self, function: FunctionNode) -> frozenset[str]:
        found: set[str] = set()
        tensors: dict[str, Evidence] = {}  # tensor operands -> how, where and by which collectives combined
        assignments: list[tuple[frozenset[str], ast.expr, int]] = []
        for node in nodes_under(function):
            if isinstance(node, ast.Call):
                for name, how, operand, direct, by in self._seeds(node, function):
                    if operand:
                        tensors.setdefault(name, (how, node.lineno, by))
                        continue
                    if direct:
                        self._direct.add((function, name))
                    if name not in found:
                        found.add(name)
                        self.evidence.setdefault((function, name), (how, node.lineno, by))
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                stored = frozenset(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
                assignments.append((stored, _assigned_value(node), node.lineno))
        for node in nodes_under(function):  # `counts[rank] = n`, then `all_reduce(counts)`
            for name, value, line in _item_stores(node):
                if name in tensors and line < tensors[name][1]:
                    for stored_item, direct in self._sources(value):
                        found.add(stored_item)
                        self.evidence.setdefault((function, stored_item), tensors[name])
                        self._direct.update([(function, stored_item)] if direct else [])
        masks = {name for stored, value, _ in assignments if _boolean(value, set()) for name in stored}
        for stored, value, line in assignments:  # `t = torch.tensor([count])`, then `all_reduce(t)`
            for name in sorted(stored & tensors.keys()):
                how, at, by = tensors[name]
                if line < at and self._host_tensor(value):
                    assert isinstance(value, ast.Call)
                    for built, direct in self._host_sources(value, function):
                        found.add(built)
                        self.evidence.setdefault((function, built), (how, at, by))
                        self._direct.update([(function, built)] if direct else [])
                elif line < at and _data_sized(value, masks):  # its length is what this rank selected
                    found.add(name)
                    self.evidence.setdefault((function, name), (how, at, by))
                    self._direct.add((function, name))
        changed = True
        while changed:  # backward through the assignments made before the combining call
            changed = False
            for stored, value, line in assignments:
                origins = [self.evidence.get((function, name)) for name in sorted(stored & found)]
                origin = next((o for o in origins if o is not None and line < o[1]), None)
                if origin is None:
                    continue
                computed = data_names(value, self._called_name)
                fed = computed - found
                single = len(computed) == 1 and _plain(value)
                single = single and any((function, n) in self._direct for n in stored & found)
                for name in fed:
                    self.evidence.setdefault((function, name), origin)
                    self._direct.update([(function, name)] if single else [])
                if fed:
                    found |= fed
                    changed = True
        return frozenset(found)

    def _host_tensor(self, value: ast.expr) -> bool:
        """A tensor built from host values: `torch.tensor([n])`, `torch.LongTensor([n])`."""
        return isinstance(value, ast.Call) and self._called_name(value.func) in HOST_TENSORS

    def _host_sources(self, tensor: ast.Call, function: FunctionNode) -> list[tuple[str, bool]]:
        """`_sources` of the host values a tensor is built from (`torch.tensor([n, m])`), but a
        whole sequence (sequences.py): a collective of tensors takes one shape from every rank, so
        it is as long everywhere (only its entries differ); its emptiness is not this rank's own."""
        whole = whole_sequences(function)
        kept = [a for a in tensor.args if not (isinstance(a, ast.Name) and a.id in whole)]
        return self._sources(ast.Tuple(elts=kept))

    def _sources(self, node: ast.expr) -> list[tuple[str, bool]]:
        """The names whose contents flow into `node`, each element of a list or tuple apart, with
        whether it is all that flows into its element (`[len(batch), world]`: both are; `a + b`:
        neither, as one of them may be the same on every rank)."""
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            elements = [e.value if isinstance(e, ast.Starred) else e for e in node.elts]
            return [source for element in elements for source in self._sources(element)]
        names = data_names(node, self._called_name)
        return [(name, len(names) == 1 and _plain(node)) for name in sorted(names)]

    def _seeds(self, call: ast.Call, function: FunctionNode) -> list[Seed]:
        """What `call` hands a combining collective, directly or through a helper: `Seed`s."""
        func = call.func
        last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        spec = self._op_spec(call, function) if last in self._words else None
        if spec is not None:
            if spec.op not in COMBINING_OPS:
                return []
            how = f"combined across ranks by {spec.op} at line {call.lineno}"
            by = frozenset({call.lineno})
            seeds: list[Seed] = []
            for node in (operand_argument(call, spec, name) for name in spec.operands):
                if spec.op in OBJECT_OPS and node is not None:
                    seeds += [(n, how, False, direct, by) for n, direct in self._sources(node)]
                elif isinstance(node, ast.Name):
                    seeds.append((node.id, how, True, True, by))
                elif node is not None and self._host_tensor(node):
                    assert isinstance(node, ast.Call)
                    seeds += [(n, how, False, direct, by) for n, direct in self._host_sources(node, function)]
            return seeds
        helper = self._helper(call, function)
        if helper is None or helper is function:
            return []
        params = [a.arg for a in [*helper.args.posonlyargs, *helper.args.args]]
        if params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
            params = params[1:]
        handed = [
            (params[index], argument)
            for index, argument in enumerate(call.args)
            if index < len(params) and not isinstance(argument, ast.Starred)
        ]
        handed += [(k.arg, k.value) for k in call.keywords if k.arg is not None]
        if len(params) < len(helper.args.posonlyargs) + len(helper.args.args):  # `obj.method(...)`
            assert isinstance(call.func, ast.Attribute)
            handed.append((helper.args.args[0].arg if helper.args.args else "", call.func.value))
        arguments = dict(handed)
        how = f"passed to {helper.name}() at line {call.lineno}, which combines it across ranks"
        found: list[Seed] = []
        for path, _ in self.parameter_paths(helper):
            param, _, rest = path.partition(".")
            argument = arguments.get(param)
            if argument is None:
                continue
            by = self.evidence[(helper, path)][2]
            if not rest:  # the argument's value, whatever it was computed from
                found += [(n, how, False, direct, by) for n, direct in self._sources(argument)]
                continue
            holder = dotted(argument)  # `p.total` of the callee: the same attribute of what was passed
            if holder is not None:
                found.append((".".join([*holder, rest]), how, False, True, by))
        return found


def _enclosing_statements(function: FunctionNode) -> list[tuple[int, frozenset[int]]]:
    """Each statement's first line, with the compound statements around it (by id), in order."""
    found: list[tuple[int, frozenset[int]]] = []

    def visit(body: list[ast.stmt], around: frozenset[int]) -> None:
        for statement in body:
            found.append((statement.lineno, around))
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            inner = around | {id(statement)}
            for field in ("body", "orelse", "finalbody"):
                visit(getattr(statement, field, []) or [], inner)
            for handler in getattr(statement, "handlers", []) or []:
                visit(handler.body, inner)
            for case in getattr(statement, "cases", []) or []:
                visit(case.body, inner)

    visit(function.body, frozenset())
    return sorted(found, key=lambda item: item[0])


SEQUENCES = (ast.List, ast.Tuple)


def _assigned_value(node: ast.Assign | ast.AugAssign | ast.AnnAssign) -> ast.expr:
    """What an assignment computes: `x /= k` scales `x` by `k` (`x / k`: `k` is one input of
    two, often a configured size); `x += n` accumulates `n`, a value of the same kind as `x` (a
    count summed over items), so it is taken alone."""
    assert node.value is not None
    if isinstance(node, ast.AugAssign) and not isinstance(node.op, ast.Add):
        return ast.copy_location(ast.BinOp(left=node.target, op=node.op, right=node.value), node.value)
    return node.value


def _last_name(node: ast.AST) -> str:
    """The last name of what a call calls (`all_reduce` of `dist.all_reduce(t)`); "" for no call."""
    func = node.func if isinstance(node, ast.Call) else None
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _bound_value(statement: ast.stmt) -> ast.expr | None:
    """What an assignment assigns, or what a `for` loop iterates over."""
    if isinstance(statement, (ast.Assign, ast.AnnAssign)):
        return statement.value
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        return statement.iter
    return None


def _bound_targets(statement: ast.stmt) -> frozenset[str]:
    """The names an assignment or a `for` loop binds."""
    if isinstance(statement, ast.Assign):
        targets: list[ast.expr] = list(statement.targets)
    elif isinstance(statement, (ast.AnnAssign, ast.For, ast.AsyncFor)):
        targets = [statement.target]
    else:
        return frozenset()
    return frozenset(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))


def _repeated(node: ast.AST) -> bool:
    """`[x] * n` or `n * [x]`: a literal sequence repeated."""
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Mult)
        and (isinstance(node.left, SEQUENCES) or isinstance(node.right, SEQUENCES))
    )


def _plain(node: ast.expr) -> bool:
    """`node` reads its data without handing it to a function: attributes, items, sizes and the
    methods that return contents (`p.total`, `len(p)`, `x[mask].float()`). What an unknown function
    makes of its argument (`poll(pollers)`) need not be all of that argument, nor all it reads."""
    for part in ast.walk(node):
        if not isinstance(part, ast.Call):
            continue
        func = part.func
        if isinstance(func, ast.Attribute) and func.attr in CARRYING_METHODS | DATA_SIZED:
            continue
        if isinstance(func, ast.Name) and func.id in PLAIN_BUILTINS:
            continue
        return False
    return True


def _boolean(node: ast.expr, masks: set[str]) -> bool:
    """A boolean mask: a comparison (`labels != -100`), `m.bool()`, a name assigned one, or a
    negation or `&`/`|` of them."""
    if isinstance(node, ast.Compare) or (isinstance(node, ast.Name) and node.id in masks):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "bool" and not node.args
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.Not)):
        return _boolean(node.operand, masks)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)):
        return _boolean(node.left, masks) and _boolean(node.right, masks)
    return False


def _data_sized(value: ast.expr, masks: set[str]) -> bool:
    """A tensor whose length is chosen by its contents: the entries a boolean mask selects
    (`x[valid]`, `x[m.bool()].float()`), `x.nonzero()`, `torch.masked_select(x, m)`, `x.unique()`.
    Handed whole to a combining collective, its length is this rank's own."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        if value.func.attr in DATA_SIZED:
            return True
        if value.func.attr not in CARRYING_METHODS:
            return False
        value = value.func.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return value.func.id in DATA_SIZED
    return isinstance(value, ast.Subscript) and _boolean(value.slice, masks)


def _item_stores(node: ast.AST) -> list[tuple[str, ast.expr, int]]:
    """`counts[rank] = n` (or `counts[i] += n`): the container written, the value, the line."""
    if isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
        targets, value = [node.target], node.value
    else:
        return []
    return [
        (target.value.id, value, node.lineno)
        for target in targets
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
    ]


def operand_argument(call: ast.Call, spec: OpSpec, name: str) -> ast.expr | None:
    if name == "self":  # a catalogued method of the tensor itself (`t.all_reduce()`)
        return call.func.value if isinstance(call.func, ast.Attribute) else None
    index = spec.param_index(name)
    if index is not None and index < len(call.args) and not isinstance(call.args[index], ast.Starred):
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg == name), None)


def delivering_words(specs: list[tuple[str, OpSpec]]) -> frozenset[str]:
    """The last names of the catalogued callables (name, spec) whose result is the same on
    every rank (an argument named by `uniform_after`)."""
    return frozenset(name.rsplit(".", 1)[-1] for name, spec in specs if spec.uniform_after)


def combining_words(functions: dict[str, OpSpec], methods: tuple[tuple[str, str], ...]) -> frozenset[str]:
    """The last names of the catalogued functions and methods (name, op) that combine."""
    words = {name.rsplit(".", 1)[-1] for name, spec in functions.items() if spec.op in COMBINING_OPS}
    words |= {method for method, op in methods if op in COMBINING_OPS}
    return frozenset(words)


def data_names(node: ast.expr, called_name: NameOf) -> frozenset[str]:
    """The variables whose contents flow into the value of `node` (see the module)."""
    found: set[str] = set()
    stack: list[ast.AST] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.Name):
            if current.id not in ("self", "cls"):
                found.add(current.id)
        elif isinstance(current, ast.Call):
            func = current.func
            name = called_name(func) or ""
            if name in SHAPED_FACTORIES or name == "range" or name.endswith(TEMPLATE_SUFFIXES):
                continue
            if isinstance(func, ast.Attribute) and func.attr in CARRYING_METHODS:
                stack.append(func.value)
            stack.extend(a.value if isinstance(a, ast.Starred) else a for a in current.args)
        elif isinstance(current, ast.Subscript):
            stack.append(current.value)
        elif _repeated(current):  # `[0] * world`: a shape; only the repeated items are contents
            assert isinstance(current, ast.BinOp)
            stack.extend(side for side in (current.left, current.right) if isinstance(side, SEQUENCES))
        elif isinstance(current, ast.Attribute):
            # `state.flag`: that attribute (the object itself is no per-rank data); `x.shape`: x
            if current.attr in SIZE_ATTRIBUTES:
                stack.append(current.value)
                continue
            path = dotted(current)
            if path is not None:
                found.add(".".join(path))
        elif isinstance(current, (ast.Lambda, ast.NamedExpr)):
            continue
        elif isinstance(current, ast.comprehension):
            stack.extend((current.iter, *current.ifs))
        else:
            stack.extend(ast.iter_child_nodes(current))
    return frozenset(found)
