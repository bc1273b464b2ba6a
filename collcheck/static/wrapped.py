"""Objects that communicate when used: wrapped models and engines, found in a module's syntax.

Comes in: a module's tree, its import table and the catalog. Goes out: `WrappedNames`, the names
that hold such an object in this module (`model = DDP(net)`, `self.engine, *_ =
deepspeed.initialize(...)`, `fully_shard(model)`, `model = accelerator.prepare(net)`), so that the
cheap per-function filter walks a function that calls `model(x)` or `self.engine.backward(loss)`
even though its text names no collective. The types themselves flow in the evaluator; this only
decides which functions are worth walking.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from collcheck.catalog import Catalog
from collcheck.static.names import ImportTable, nodes_under, qualified_name


@dataclass(frozen=True)
class WrappedNames:
    """Local and attribute names bound to a communicating object anywhere in the module, and the
    local aliases of the factories that make one."""

    names: frozenset[str] = frozenset()
    factories: frozenset[str] = frozenset()

    @property
    def words(self) -> frozenset[str]:
        return self.names | self.factories


_COMMUNICATING_TYPES: dict[str, frozenset[str]] = {}
_PRODUCING_METHODS: dict[str, frozenset[str]] = {}


def communicating_types(catalog: Catalog) -> frozenset[str]:
    """Types with at least one catalogued method that communicates (once per catalog)."""
    found = _COMMUNICATING_TYPES.get(catalog.fingerprint)
    if found is None:
        found = frozenset(receiver for method in catalog.methods for receiver in method.receivers)
        _COMMUNICATING_TYPES[catalog.fingerprint] = found
    return found


def producing_methods(catalog: Catalog) -> frozenset[str]:
    """Method names whose result is a catalogued type (`Accelerator.prepare`), once per catalog."""
    found = _PRODUCING_METHODS.get(catalog.fingerprint)
    if found is None:
        type_names = set(catalog.types.values()) | set(catalog.types)
        found = frozenset(
            key.rsplit(".", 1)[1]
            for key in catalog.types
            if "." in key and key.rsplit(".", 1)[0] in type_names
        )
        _PRODUCING_METHODS[catalog.fingerprint] = found
    return found


def _makes_wrapped(call: ast.Call, imports: ImportTable, catalog: Catalog, types: frozenset[str]) -> bool:
    name = qualified_name(call.func, imports)
    if name is not None:
        produced = catalog.types.get(name)
        if produced is not None and (produced or name) in types:
            return True
        if name in catalog.types_in_place:
            return True
    return isinstance(call.func, ast.Attribute) and call.func.attr in producing_methods(catalog)


def _target_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Attribute):
        return [target.attr]
    if isinstance(target, (ast.Tuple, ast.List)) and target.elts:
        return _target_names(target.elts[0])  # `engine, *_ = deepspeed.initialize(...)`
    return []


def wrapped_names(
    tree: ast.AST, imports: ImportTable, catalog: Catalog, text_words: frozenset[str] | None = None
) -> WrappedNames:
    """`text_words`, the identifiers of the module's text when known, spare walking a tree that
    imports no factory and never names a producing method (most modules)."""
    types = communicating_types(catalog)
    factories = {
        local
        for local, qualified in imports.names.items()
        if qualified in catalog.types_in_place or (catalog.types.get(qualified, None) or qualified) in types
    }
    if not factories and text_words is not None and producing_methods(catalog).isdisjoint(text_words):
        return WrappedNames()
    if not factories and not producing_methods(catalog) & _attribute_calls(tree):
        return WrappedNames()
    names: set[str] = set()
    for node in nodes_under(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if _makes_wrapped(node.value, imports, catalog, types):
                for target in node.targets:
                    names.update(_target_names(target))
        elif isinstance(node, ast.Call) and node.args:
            name = qualified_name(node.func, imports)
            if name is not None and name in catalog.types_in_place:
                names.update(_target_names(node.args[0]))
        elif isinstance(node, ast.arg) and node.annotation is not None:  # `model: DDP`
            name = qualified_name(node.annotation, imports)
            if name is not None and (catalog.types.get(name) or name) in types:
                names.add(node.arg)
    return WrappedNames(frozenset(names), frozenset(factories))


def _attribute_calls(tree: ast.AST) -> set[str]:
    return {
        node.func.attr
        for node in nodes_under(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }


def uses_wrapped(call: ast.Call, wrapped: WrappedNames) -> bool:
    """`model(x)`, `self.model(x)`, `self.engine.backward(loss)`, `DDP(net)`: a call that may
    communicate through a wrapped object (the evaluator decides whether it does)."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in wrapped.words
    if isinstance(func, ast.Attribute):
        if func.attr in wrapped.words:
            return True
        receiver = func.value
        if isinstance(receiver, ast.Name):
            return receiver.id in wrapped.names
        return isinstance(receiver, ast.Attribute) and receiver.attr in wrapped.names
    return False
