"""Catalogued types reached through class inheritance and attributes.

A class of the run that derives from a catalogued framework class (`class MyTrainer(Trainer)`,
`class MyStrategy(DDPStrategy)`) inherits its methods and the objects its constructor stores:
transformers' `Trainer.__init__` keeps an `accelerate.Accelerator` in `self.accelerator`, a
LightningModule reaches its trainer's strategy as `self.trainer.strategy`. The base class's source
is not part of the run, so these facts come from the catalog (`[attribute_types]`).

In: a module model and a class name (the framework types it derives from, through bases of the
same module or of other files of the run), or a set of types and a chain of attribute names.
Out: type names, as the catalog spells them (a `[types]` alias is replaced by its type).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from collcheck.catalog import Catalog
from collcheck.static.loader import ModuleInfo
from collcheck.static.names import qualified_name

MAX_BASE_DEPTH = 8


def framework_bases(module: ModuleInfo, class_name: str, depth: int = 0) -> frozenset[str]:
    """The qualified names of the classes outside the run that `class_name` derives from, directly
    or through its bases in this module or in other files of the run."""
    info = module.classes.get(class_name)
    if info is None or depth > MAX_BASE_DEPTH:
        return frozenset()
    catalog = module.catalog
    found: set[str] = set()
    for base in info.node.bases:
        name = qualified_name(base, module.imports)
        if name is not None:
            found.add(catalog.types.get(name) or name)
        if isinstance(base, ast.Name) and base.id in module.classes:
            found |= framework_bases(module, base.id, depth + 1)
        elif name is not None and module.loader is not None:
            found |= _bases_in_other_file(module, name, depth)
    return frozenset(found)


def _bases_in_other_file(module: ModuleInfo, qualified: str, depth: int) -> frozenset[str]:
    """The framework bases of a base class defined in another file of the run."""
    assert module.loader is not None
    located = module.loader.project.lookup(qualified, module.path)
    if located is None or "." in located[1]:
        return frozenset()
    other = module.loader.load(located[0])
    if other is None or other is module:
        return frozenset()
    return framework_bases(other, located[1], depth + 1)


def attribute_type(catalog: Catalog, owners: Iterable[str], attribute: str) -> str | None:
    """The catalogued type an object of one of `owners` keeps in `attribute` (sorted: the same
    answer whatever the order of a set)."""
    if attribute not in catalog.typed_attributes:
        return None
    for owner in sorted(owners):
        held = catalog.attribute_types.get(f"{owner}.{attribute}")
        if held is not None:
            return catalog.types.get(held) or held
    return None


def chain_type(catalog: Catalog, owners: Iterable[str], attributes: Iterable[str]) -> str | None:
    """`self.trainer.strategy`: the type reached from `owners` through each attribute in turn."""
    current: Iterable[str] = owners
    held: str | None = None
    for attribute in attributes:
        held = attribute_type(catalog, current, attribute)
        if held is None:
            return None
        current = (held,)
    return held
