"""Regenerate `rules/class_members.json`: the member names of the framework classes the hand-written
catalogs name as receivers, read from the frameworks' real source.

    python bench/class_members.py [--cache ~/.cache/collcheck-bench/inject] [--torch SITE_PACKAGES]

In: the catalogs' receiver types (`[[method]] receiver`, `[types]`, `[attribute_types]` of
`rules/*.toml`) and torch's common classes (`COMMON_CLASSES`, some read from torch's `.pyi`
stubs), the unpacked releases `bench/corpus.py` keeps in its cache (`CACHE/src/NAME/`) and
an installed torch's folder (read, never imported). Out: for each class found, its members (methods,
properties, class-level names and the attributes its methods store on `self`), its bases' included,
and the catalogued types among its ancestors. The static analyser infers an object's class from the
names used on it with these (collcheck/static/inferred_types.py). Only names are written, no code.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from corpus import CACHE, locate_package  # noqa: E402

from collcheck.catalog import bundled_catalog_dir, load_catalog  # noqa: E402

TARGET = bundled_catalog_dir() / "class_members.json"
MAX_DEPTH = 12
MODULE = "torch.nn.modules.module.Module"
# Classes no catalog names as a receiver whose objects are everywhere in distributed code: they
# are never inferred, but an object used as one of them must not be taken for a framework class
# that happens to share the names (`group.rank()`, `group.scatter(...)` of a ProcessGroup).
COMMON_CLASSES = (
    "torch._C._distributed_c10d.ProcessGroup",
    "torch._C._distributed_c10d.Work",
    "torch._C._distributed_c10d.Store",
    "torch.distributed.device_mesh.DeviceMesh",
    "torch.nn.modules.module.Module",
    "torch.optim.optimizer.Optimizer",
    "torch.optim.lr_scheduler.LRScheduler",
    "torch._tensor.Tensor",
    "torch.utils.data.dataloader.DataLoader",
)
# The cache folder (`CACHE/src/NAME`) that holds each top-level package.
SOURCES = {
    "accelerate": "accelerate",
    "deepspeed": "deepspeed",
    "lightning": "lightning",
    "lightning_fabric": "pytorch-lightning",
    "pytorch_lightning": "pytorch-lightning",
    "transformers": "transformers",
    "vllm": "vllm",
    "megatron": "megatron-core",
    "sglang": "sglang",
    "verl": "verl",
}


class SourceTree:
    """Modules of the packages by dotted name, parsed once."""

    def __init__(self, roots: dict[str, Path]) -> None:
        self.roots = roots
        self.parsed: dict[str, ast.Module | None] = {}

    def module(self, dotted: str) -> ast.Module | None:
        if dotted not in self.parsed:
            self.parsed[dotted] = self._read(dotted)
        return self.parsed[dotted]

    def is_package(self, dotted: str) -> bool:
        top, *rest = dotted.split(".")
        root = self.roots.get(top)
        return root is not None and (root.joinpath(*rest) / "__init__.py").is_file()

    def _read(self, dotted: str) -> ast.Module | None:
        top, *rest = dotted.split(".")
        root = self.roots.get(top)
        if root is None:
            return None
        folder = root.joinpath(*rest)
        # `.pyi`: torch's C++ classes (`ProcessGroup`) are described by their stubs only.
        for candidate in (folder / "__init__.py", folder / "__init__.pyi"):
            if candidate.is_file():
                return ast.parse(candidate.read_text(encoding="utf-8", errors="replace"))
        for suffix in (".py", ".pyi"):
            candidate = folder.with_suffix(suffix)
            if rest and candidate.is_file():
                return ast.parse(candidate.read_text(encoding="utf-8", errors="replace"))
        return None


def _imports(tree: ast.Module, dotted: str, package: bool) -> dict[str, str]:
    """Names bound by the module's imports (at any depth: `if TYPE_CHECKING:` ones too)."""
    found: dict[str, str] = {}
    parts = dotted.split(".") if package else dotted.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = parts[: len(parts) - node.level + 1] if node.level else []
            origin = ".".join([*base, *(node.module.split(".") if node.module else [])])
            for alias in node.names:
                found[alias.asname or alias.name] = f"{origin}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
    return found


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    if isinstance(node, ast.Subscript):  # `Generic[T]`
        return _dotted(node.value)
    return None


class Members:
    """A class's members and ancestors, following re-exports and bases across modules."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.memo: dict[str, tuple[frozenset[str], frozenset[str]] | None] = {}

    def of(self, qualified: str, depth: int = 0) -> tuple[frozenset[str], frozenset[str]] | None:
        """(member names, qualified names of the class and its ancestors), or None if not found."""
        if qualified in self.memo:
            return self.memo[qualified]
        self.memo[qualified] = None  # a cycle reads as not found
        found = self._find(qualified, depth)
        self.memo[qualified] = found
        return found

    def _find(self, qualified: str, depth: int) -> tuple[frozenset[str], frozenset[str]] | None:
        if depth > MAX_DEPTH or "." not in qualified:
            return None
        module_name, _, class_name = qualified.rpartition(".")
        module = self.tree.module(module_name)
        if module is None:
            return None
        classes = [n for n in _top_level(module) if isinstance(n, ast.ClassDef) and n.name == class_name]
        if not classes:  # re-exported: `from .engine import DeepSpeedEngine`
            imported = _imports(module, module_name, self.tree.is_package(module_name)).get(class_name)
            if imported is None:  # `from .modules import *`
                return self._starred(module, module_name, class_name, qualified, depth)
            found = self.of(imported, depth + 1)
            return None if found is None else (found[0], found[1] | {qualified})
        node = classes[-1]
        names = set(_own_members(node))
        ancestors = {qualified}
        table = _imports(module, module_name, self.tree.is_package(module_name))
        local = {n.name for n in module.body if isinstance(n, ast.ClassDef)}
        for base in node.bases:
            spelled = _dotted(base)
            if spelled is None or spelled in ("object", "Generic", "ABC", "Protocol"):
                continue
            head, _, tail = spelled.partition(".")
            if head in local and not tail:
                resolved = f"{module_name}.{head}"
            elif head in table:
                resolved = table[head] + (f".{tail}" if tail else "")
            else:
                continue
            found = self.of(resolved, depth + 1)
            if found is not None:
                names |= found[0]
                ancestors |= found[1]
        return frozenset(names), frozenset(ancestors)

    def _starred(
        self, module: ast.Module, module_name: str, class_name: str, qualified: str, depth: int
    ) -> tuple[frozenset[str], frozenset[str]] | None:
        package = self.tree.is_package(module_name)
        parts = module_name.split(".") if package else module_name.split(".")[:-1]
        for node in module.body:
            if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
                base = parts[: len(parts) - node.level + 1] if node.level else []
                origin = ".".join([*base, *(node.module.split(".") if node.module else [])])
                found = self.of(f"{origin}.{class_name}", depth + 1)
                if found is not None:
                    return found[0], found[1] | {qualified}
        return None


def _top_level(module: ast.Module) -> list[ast.stmt]:
    """The module's statements and those of its top-level `if`/`try` blocks (`if is_available():
    class DeviceMesh: ...`)."""
    found: list[ast.stmt] = []
    for node in module.body:
        found.append(node)
        if isinstance(node, (ast.If, ast.Try)):
            found.extend(node.body)
            found.extend(node.orelse)
    return found


def _own_members(node: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(item.name)
            args = [*item.args.posonlyargs, *item.args.args]
            if args:
                first = args[0].arg
                for inner in ast.walk(item):
                    if (
                        isinstance(inner, ast.Attribute)
                        and isinstance(inner.ctx, ast.Store)
                        and isinstance(inner.value, ast.Name)
                        and inner.value.id == first
                    ):
                        names.add(inner.attr)
        elif isinstance(item, ast.Assign):
            names.update(t.id for t in item.targets if isinstance(t, ast.Name))
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
    return names


def catalog_receivers() -> set[str]:
    """The classes the hand-written catalogs name as receivers or as the types values have."""
    catalog = load_catalog()
    named: set[str] = set()
    for method in catalog.methods:
        named.update(method.receivers)
    named.update(catalog.types.values())
    named.update(catalog.attribute_types.values())
    return {name for name in named if name and "." in name}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cache", type=Path, default=CACHE, help="bench/corpus.py's cache of unpacked releases"
    )
    parser.add_argument("--torch", type=Path, default=None, help="a site-packages holding torch (read only)")
    args = parser.parse_args()
    roots: dict[str, Path] = {}
    for top, folder in SOURCES.items():
        located = locate_package(args.cache / "src" / folder, top)
        if located is not None:
            roots[top] = located
    torch_site = args.torch
    if torch_site is None:
        torch_site = next(Path(sys.prefix).glob("lib/python3*/site-packages"), None)
    if torch_site is not None and (torch_site / "torch").is_dir():
        roots["torch"] = torch_site / "torch"
    members = Members(SourceTree(roots))
    found: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    missing: list[str] = []
    for name in sorted(catalog_receivers() | set(COMMON_CLASSES)):
        read = members.of(name)
        if read is None:
            missing.append(name)
        else:
            found[name] = read
    module_members = members.of(MODULE)
    generic = module_members[0] if module_members else frozenset()
    document = {
        "generated_by": "bench/class_members.py",
        "sources": {top: path.parent.name for top, path in sorted(roots.items())},
        "generic": sorted(generic),
        "families": families(found, generic),
    }
    TARGET.write_text(json.dumps(document, separators=(",", ":"), sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(found)} classes written to {TARGET}; not found: {', '.join(missing) or 'none'}")


def families(
    found: dict[str, tuple[frozenset[str], frozenset[str]]], generic: frozenset[str]
) -> list[dict[str, object]]:
    """One entry per class, whatever the spellings it has (`deepspeed.DeepSpeedEngine`,
    `deepspeed.runtime.engine.DeepSpeedEngine`) or the packages that ship it (`lightning.pytorch`,
    `pytorch_lightning`: the same class, the same members): its names, its members (less those of
    `torch.nn.Module` when it is one: `module`), and the names of its catalogued ancestors."""
    grouped: dict[tuple[str, frozenset[str]], set[str]] = {}
    ancestors: dict[tuple[str, frozenset[str]], set[str]] = {}
    for name, (names, above) in found.items():
        key = (name.rpartition(".")[2], names)
        grouped.setdefault(key, set()).add(name)
        ancestors.setdefault(key, set()).update(above)
    entries: list[dict[str, object]] = []
    for key, spellings in grouped.items():
        module = MODULE in ancestors[key]
        own = key[1] - generic if module else key[1]
        # A re-export's ancestors hold the name the class is defined under: one of its spellings.
        spellings |= {a for a in ancestors[key] if a.rpartition(".")[2] == key[0]}
        parents = sorted(ancestors[key] - spellings)
        entries.append(
            {"names": sorted(spellings), "members": sorted(own), "module": module, "ancestors": parents}
        )
    return sorted(entries, key=lambda entry: str(entry["names"]))


if __name__ == "__main__":
    main()
