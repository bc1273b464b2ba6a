"""The files of one run, so that a helper imported from another file is followed into it.

`from comm_utils import synchronize` in train.py resolves to the `synchronize` defined in
comm_utils.py of the same run; its body is executed at the call site like a same-module helper.
The index is plain data (picklable for worker processes); parsed modules are cached per process.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from collcheck.static.prefilter import Trigger

_NAME_PATTERNS: dict[str, re.Pattern[str]] = {}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEF = re.compile(r"^\s*(?:async\s+)?def\s+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)


def module_name(path: Path) -> str:
    """Dotted module name, walking up through packages (folders with `__init__.py`)."""
    parts = [] if path.stem == "__init__" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").exists():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


@dataclass(frozen=True)
class Project:
    modules: tuple[tuple[str, str], ...]  # (dotted name, path)
    communicating_names: frozenset[str] = frozenset()
    digest: str = ""
    file_hashes: tuple[tuple[str, str], ...] = ()  # content hash of each file that may communicate
    dependencies: tuple[tuple[str, str], ...] = ()  # path -> digest of what it depends on (precomputed)
    rank_names: frozenset[str] = frozenset()  # imported functions whose text reads a rank (helpers to follow)

    def may_follow(self, name: str) -> bool:
        """Worth opening another file for: a helper that communicates or computes a rank value."""
        return name in self.communicating_names or name in self.rank_names

    def dependency_digest(self, path: str, text: str) -> str:
        """What a file's verdict may depend on in other files: the communicating files whose module
        it names (so one edit re-checks its importers, not the whole tree)."""
        known = dependency_table(self).get(path)
        if known is not None:
            return known
        if not self.communicating_names or self.name_pattern().search(text) is None:
            return ""  # names no function of the run that communicates: depends on no other file
        by_stem = _stems(self)
        parts = [
            content
            for word in set(_IDENTIFIER.findall(text)) & by_stem.keys()
            for file, content in by_stem[word]
            if file != path
        ]
        return hashlib.sha256("".join(sorted(parts)).encode()).hexdigest()[:16]

    def lookup(self, qualified: str, importer: str) -> tuple[str, str] | None:
        """(path, attribute) of a qualified name that lands in a file of this run."""
        table, paths = _tables(self)
        parts = qualified.split(".")
        importer_dir = os.path.dirname(os.path.realpath(importer))
        for cut in range(len(parts) - 1, 0, -1):
            module, attribute = ".".join(parts[:cut]), ".".join(parts[cut:])
            sibling = os.path.join(importer_dir, *module.split(".")) + ".py"
            if sibling in paths:
                return sibling, attribute
            if module in table:
                return table[module], attribute
        return None

    def name_pattern(self) -> re.Pattern[str]:
        pattern = _NAME_PATTERNS.get(self.digest)
        if pattern is None:
            names = sorted(self.communicating_names, key=len, reverse=True)
            pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, names)) + r")\b")
            _NAME_PATTERNS[self.digest] = pattern
        return pattern


_STEMS: dict[str, dict[str, list[tuple[str, str]]]] = {}
_TABLES: dict[tuple[str, int], tuple[dict[str, str], frozenset[str]]] = {}


def _tables(project: Project) -> tuple[dict[str, str], frozenset[str]]:
    """Module name -> path, and the set of paths (built once per project, not per lookup)."""
    key = (project.digest, len(project.modules))
    tables = _TABLES.get(key)
    if tables is None:
        tables = _TABLES[key] = (dict(project.modules), frozenset(path for _, path in project.modules))
    return tables


_DEPENDENCIES: dict[tuple[str, int], dict[str, str]] = {}


def dependency_table(project: Project) -> dict[str, str]:
    key = (project.digest, len(project.dependencies))
    table = _DEPENDENCIES.get(key)
    if table is None:
        table = _DEPENDENCIES[key] = dict(project.dependencies)
    return table


def _stems(project: Project) -> dict[str, list[tuple[str, str]]]:
    """Last module-name component -> (path, content hash) of the communicating files."""
    table = _STEMS.get(project.digest)
    if table is None:
        hashes = dict(project.file_hashes)
        table = {}
        for name, path in project.modules:
            if path in hashes:
                table.setdefault(name.rsplit(".", 1)[-1], []).append((path, hashes[path]))
        _STEMS[project.digest] = table
    return table


def build_project(
    files: Iterable[Path], trigger: Trigger, max_rounds: int = 4, rank_words: frozenset[str] | None = None
) -> Project:
    """Index the run's files and the names of functions that may communicate.

    The prefilter is iterated: a file that defines a function mentioning a collective contributes
    that function's name, so files that only call it are parsed too (up to `max_rounds` hops).
    """
    paths = [Path(os.path.realpath(path)) for path in files]
    texts: dict[Path, str] = {}
    for path in paths:
        try:
            texts[path] = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    names: set[str] = set()
    contributing: set[Path] = set()
    # Only a name that some file imports can carry a collective into another file.
    imported = _imported_names(texts.values())
    words = {path: frozenset(_IDENTIFIER.findall(text)) for path, text in texts.items()}
    pending = {path for path, text in texts.items() if trigger.search(text)}
    for _ in range(max_rounds):
        new_names: set[str] = set()
        for path in pending - contributing:
            contributing.add(path)
            new_names.update(_def_names(texts[path], trigger, names))
        new_names = (new_names & imported) - names
        if not new_names:
            break
        names |= new_names
        pending = {
            path
            for path, found in words.items()
            if path not in contributing and not found.isdisjoint(new_names)
        }
    hashes = {
        str(path): hashlib.sha256(texts[path].encode("utf-8", "replace")).hexdigest()[:16]
        for path in contributing
    }
    modules = tuple(sorted((module_name(path), str(path)) for path in paths))
    digest = hashlib.sha256("".join(sorted(hashes.values())).encode()).hexdigest()[:16]
    project = Project(modules, frozenset(names), digest, tuple(sorted(hashes.items())))
    dependencies = tuple(
        (str(path), project.dependency_digest(str(path), text)) for path, text in texts.items()
    )
    rank_names: set[str] = set()
    if rank_words is not None:
        ranked = [texts[path] for path, found in words.items() if not found.isdisjoint(rank_words)]
        segments = [seg for text in ranked for seg in _def_words(text)]
        frontier = {name for name, found in segments if not found.isdisjoint(rank_words)}
        rank_names = set(frontier)
        for _ in range(3):  # helpers of helpers: `is_main()` returning `get_rank_from_env() == 0`
            frontier = {
                name for name, found in segments if name not in rank_names and not found.isdisjoint(frontier)
            }
            if not frontier:
                break
            rank_names |= frontier
    return Project(
        project.modules,
        project.communicating_names,
        digest,
        project.file_hashes,
        dependencies,
        frozenset(rank_names & imported),
    )


def _def_words(text: str) -> list[tuple[str, frozenset[str]]]:
    """Each function's name with the identifiers of its own text (up to the next `def`)."""
    matches = list(_DEF.finditer(text))
    segments = []
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        segments.append((match.group(1), frozenset(_IDENTIFIER.findall(text, match.end(), end))))
    return segments


_FROM_IMPORT = re.compile(
    r"^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]+(?:\(([^)]*)\)|([^\n(#]+))", re.MULTILINE
)


def _imported_names(texts: Iterable[str]) -> set[str]:
    """Names brought in by `from X import a, b as c` anywhere in the run (the original names)."""
    names: set[str] = set()
    for text in texts:
        if "import" not in text:
            continue
        for match in _FROM_IMPORT.finditer(text):
            listed = match.group(1) if match.group(1) is not None else match.group(2)
            for part in re.sub(r"#[^\n]*", "", listed).replace("\\\n", " ").replace("\n", " ").split(","):
                name = part.strip().split(" as ")[0].strip()
                if name.isidentifier() and not name.startswith("__"):
                    names.add(name)
    return names


def _def_names(text: str, trigger: Trigger, known: set[str]) -> set[str]:
    """Names of the functions whose own text (up to the next `def`) names a collective or a
    function already known to reach one. One pass of each pattern over the file, then each hit
    is assigned to the function it falls in (not one search per function)."""
    matches = list(_DEF.finditer(text))
    if not matches:
        return set()
    starts = [match.end() for match in matches]
    hits = trigger.positions(text, known)
    names = set()
    for position in hits:
        index = bisect.bisect_right(starts, position) - 1
        if index >= 0:
            names.add(matches[index].group(1))
    return names
