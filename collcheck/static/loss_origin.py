"""Where a loss comes from: whether a backward can reach a model built somewhere else.

In: the expression a backward differentiates (`loss` of `loss.backward()`), the function (or
module) whose body holds it, and that file's imports and classes. Out: True when the value flows,
through the function's own assignments, from a call of an object this function did not make: a
model handed in (`model(x)`), held on the object (`self.model(x)`, `self.step(batch)`), global, or
returned by an unknown call (`build()(x)`); False when every graph the loss can carry was made
here: by torch's own constructors, factories and functions (`torch.nn.Linear(4, 2)`,
`torch.zeros(4, requires_grad=True)`), by a class of the file, from tensors handed in
(`x.clone().requires_grad_()`), cut by `.detach()`, or computed under `torch.no_grad()`.

Why: a backward is taken as a data-parallel gradient reduction when the file trains under
torch.distributed and shows no wrapper (gradient_sync.py), on the assumption that the wrapper is
applied where the model is built, elsewhere. A graph built entirely in this function has no such
elsewhere: a rank-0 probe fitted on detached features, an input gradient, a locally built layer
are never wrapped by code this file does not show.
"""

from __future__ import annotations

import ast
import builtins

from collcheck.static.loader import FunctionNode
from collcheck.static.names import ImportTable, qualified_name

DETACHING = frozenset({"detach", "detach_", "item", "tolist", "numpy"})  # torch.Tensor methods
NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode"})
MAX_DEPTH = 8  # assignments followed back from a called name
MAX_NAMES = 256  # names followed back per question (a function body is bounded; this bounds cycles)


def from_outside_model(
    value: ast.expr,
    scope: FunctionNode | ast.Module,
    imports: ImportTable,
    classes: frozenset[str],
    own: str | None,
) -> bool:
    """Whether `value`, read in `scope`, may carry a graph through a model made elsewhere. `own`:
    the name a method calls its object by (`self`), None in a plain function."""
    origin = _Origin(_assignments(scope, imports), _parameters(scope), imports, classes, own)
    seen: set[str] = set()
    pending = [value]
    while pending and len(seen) < MAX_NAMES:
        calls, names = _graph_parts(pending.pop())
        if any(origin.runs_outside_object(call) for call in calls):
            return True
        for name in names:
            if name not in seen:
                seen.add(name)
                pending.extend(origin.assigned.get(name, ()))
    return False


def _parameters(scope: FunctionNode | ast.Module) -> frozenset[str]:
    if isinstance(scope, ast.Module):
        return frozenset()
    arguments = scope.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return frozenset(a.arg for a in every)


def _assignments(scope: FunctionNode | ast.Module, imports: ImportTable) -> dict[str, list[ast.expr]]:
    """Each local name's assigned values in `scope` (not in nested functions), leaving out those
    made under `with torch.no_grad():`, which carry no graph."""
    found: dict[str, list[ast.expr]] = {}

    def visit(statements: list[ast.stmt]) -> None:
        for statement in statements:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(statement, (ast.With, ast.AsyncWith)) and any(
                isinstance(item.context_expr, ast.Call)
                and qualified_name(item.context_expr.func, imports) in NO_GRAD
                for item in statement.items
            ):
                continue
            if isinstance(statement, ast.Assign):
                for target in statement.targets:
                    _bind(target, statement.value, found)
            elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)) and statement.value is not None:
                _bind(statement.target, statement.value, found)
            elif isinstance(statement, (ast.For, ast.AsyncFor)):
                _bind(statement.target, statement.iter, found)
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(statement, field, None)
                if isinstance(inner, list):
                    visit(inner)
            for handler in getattr(statement, "handlers", ()):
                visit(handler.body)

    visit(scope.body)
    return found


def _bind(target: ast.expr, value: ast.expr, found: dict[str, list[ast.expr]]) -> None:
    """The names `target` rebinds (unpacking included); a store into an attribute or an item of a
    name (`batch.grad_fn.hint = ...`) leaves what the name holds as it was."""
    if isinstance(target, ast.Name):
        found.setdefault(target.id, []).append(value)
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            _bind(element, value, found)
    elif isinstance(target, ast.Starred):
        _bind(target.value, value, found)


def _graph_parts(expression: ast.expr) -> tuple[list[ast.Call], list[str]]:
    """The calls in `expression` and the plain names it reads, each reaching it with its graph:
    not under `.detach()` (the graph is cut there) nor inside a lambda (not run here)."""
    calls: list[ast.Call] = []
    names: list[str] = []
    pending: list[ast.AST] = [expression]
    while pending:
        node = pending.pop()
        if _detaches(node) or isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Call):
            calls.append(node)
        elif isinstance(node, ast.Name):
            names.append(node.id)
        pending.extend(ast.iter_child_nodes(node))
    return calls, names


def _detaches(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in DETACHING


class _Origin:
    """What one scope's names hold, to tell objects it made from objects made elsewhere."""

    def __init__(
        self,
        assigned: dict[str, list[ast.expr]],
        parameters: frozenset[str],
        imports: ImportTable,
        classes: frozenset[str],
        own: str | None,
    ) -> None:
        self.assigned, self.parameters, self.imports = assigned, parameters, imports
        self.classes, self.own = classes, own

    def runs_outside_object(self, call: ast.Call) -> bool:
        """`call` runs an object this function did not make: not torch's own API, not a class of
        the file, not a method of a value (`x.sum()`, whose origin is followed through its names)."""
        func = call.func
        if self._torch(func):
            return False
        if isinstance(func, ast.Name):
            return not (func.id in self.classes or hasattr(builtins, func.id)) and self._elsewhere(func, 0)
        if isinstance(func, ast.Attribute):
            # `self.model(x)`, `self.compute_loss(batch)`: what the object holds was made elsewhere
            # (a method of any other value is arithmetic on it: `x.clone()`, `logits.sum()`)
            return isinstance(func.value, ast.Name) and func.value.id == self.own
        return isinstance(func, ast.Call)  # `build()(x)`: an object an unknown call returned

    def _torch(self, func: ast.expr) -> bool:
        qualified = qualified_name(func, self.imports)
        return qualified is not None and (qualified == "torch" or qualified.startswith("torch."))

    def _elsewhere(self, value: ast.expr, depth: int) -> bool:
        """An object made outside this function: handed in, global, held by another object, or
        returned by a call that is neither torch's nor a class of the file (methods of a value
        made here, `torch.nn.Linear(4, 2).to(device)`, keep its origin)."""
        if depth > MAX_DEPTH:
            return True
        if isinstance(value, ast.Name):
            if value.id in self.parameters or value.id not in self.assigned:
                return True
            return any(self._elsewhere(v, depth + 1) for v in self.assigned[value.id])
        if isinstance(value, ast.Call):
            func = value.func
            if self._torch(func) or (isinstance(func, ast.Name) and func.id in self.classes):
                return False
            if isinstance(func, ast.Attribute) and isinstance(func.value, (ast.Name, ast.Call)):
                return self._elsewhere(func.value, depth + 1)
            return True
        return isinstance(value, (ast.Attribute, ast.Subscript))
