"""The files of one run, so that a helper imported from another file is followed into it.

`from comm_utils import synchronize` in train.py resolves to the `synchronize` defined in
comm_utils.py of the same run; its body is executed at the call site like a same-module helper.

The index is built from text, without parsing: each file yields a few facts (which of its
top-level functions name a collective or a rank, which imported or local functions each one
names), cached by path, size and modification time so that an edit costs one file's facts. A
fixed point over those facts gives the functions that may reach a collective, by module and
name, and so the files worth parsing: the ones that name a collective, or import such a function.
The index is plain data (picklable for worker processes); parsed modules are cached per process.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePath
from typing import TypeVar

from collcheck.static.call_graph import MODULE_CODE, Function, closure
from collcheck.static.names import Alias, bind_from, bind_import, resolve_relative
from collcheck.static.prefilter import IDENTIFIER, Trigger, whole_words, word_pattern
from collcheck.static.reads import LOOKUP, note
from collcheck.static.reexports import through_reexports

# A called name, plain or dotted (`sync(`, `comm.sync (`): a word in prose or passed as a value
# is not followed (the engine would rarely follow it either). Its first letter, then the rest:
# starting with a character class lets the regex engine skip to candidates (the lookbehind then
# checks the character before that letter); `(?=(...))\2` matches the rest without backtracking.
_CALLED = re.compile(r"([A-Za-z_])(?<![\w.].)(?=([A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*))\2(?=[ \t]*\()")
# Line-anchored constructs are not written with `^` and re.MULTILINE: such a pattern is tried at
# every character of the text, four to six times slower than one that starts with a literal,
# which the regex engine finds with a fast scan. A column-0 construct is searched as a newline
# followed by it (and once at the start of the text); an import, which may be indented, from its
# keyword, kept where only blanks precede it on its line (`_line_start_matches`).
# Where a top-level statement starts: each top-level function's own text runs from its `def` to
# the next of these (a column-0 line inside a multi-line string ends it early: rare, and only
# loses that function's cross-file reach).
ColumnZero = tuple[re.Pattern[str], re.Pattern[str]]  # (at the start of the text, after a newline)


def _column_zero(construct: str) -> ColumnZero:
    return re.compile(construct), re.compile("\n" + construct)


_TOP_LEVEL = _column_zero(r"(?:(?:async[ \t]+)?def[ \t]+([A-Za-z_][A-Za-z0-9_]*)|[A-Za-z_@])")
_ASSIGNED = _column_zero(r"(?:class[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)[ \t]*(?::[^=\n]*)?(?:=(?!=)|[(:])")
# `from m import a, b` / `from m import (a,\n b)`: the head, then the names (`_from_import_at`).
_FROM_HEAD = re.compile(r"from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+")
_FROM_NAMES = re.compile(r"[^\n(#;]+")
_IMPORT = re.compile(r"import[ \t]+([^\n#;(]+)")
_T = TypeVar("_T")


@dataclass(frozen=True)
class FileFacts:
    """What the index needs from one file's text (cheap to compute, cached per file)."""

    digest: str  # sha256 prefix of the text
    readable: bool  # False: the engine reports why (binary, undecodable, unreadable)
    triggered: bool  # the text names a catalogued collective
    hits: tuple[str, ...]  # top-level functions whose own text names a collective
    rank_hits: tuple[str, ...]  # top-level functions whose own text reads a rank
    # (function or MODULE_CODE, qualified names of imported callables it names, local functions it names)
    references: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]
    imports: tuple[str, ...] = ()  # qualified names of everything the text imports
    assigned: tuple[str, ...] = ()  # names bound at module level (constants, classes): values to follow
    # Top-level `def` names. A name imported from this file that is none of these may be a value
    # bound where `assigned` does not look (inside `try:`/`if`, a tuple target, an import).
    functions: tuple[str, ...] = ()
    # Top-level functions whose own text says `raise`: with the functions that call them, the
    # helpers of other files followed inside a `try` whose handler only their raises may enter.
    raise_hits: tuple[str, ...] = ()
    # Modules the text imports everything from (`from m import *`): the names bound cannot be
    # listed, so each is read as a module imported whole (an edit of it re-checks this file).
    star_imports: tuple[str, ...] = ()


_RAISE = word_pattern(("raise",))


def text_digest(text: str) -> str:
    """A file's text as the index and the cache's record of reads (`reads.py`) name it."""
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


def file_facts(text: str, trigger: Trigger, rank_words: frozenset[str]) -> FileFacts:
    digest = text_digest(text)
    words = frozenset(IDENTIFIER.findall(text))
    uses = trigger.positions(text, words=words)
    starts, names = _segments(text)
    # A function that only runs backward (an assumed gradient reduction) is analysed in its own
    # file but is no helper that other files follow for it: counting it here made every caller of
    # one, through any number of files, a helper worth modelling (loader.py, `assumed_only`).
    hits = _segments_hit(text, starts, names, trigger.communicating(text, uses))
    rank_found = words & rank_words
    rank_hits: tuple[str, ...] = ()
    if rank_found:
        rank_hits = _segments_matching(word_pattern(rank_found), text, starts, names)
    imports, starred = _imports(text) if "import" in words else ({}, ())
    local = frozenset(name for name in names if name)
    references = _references(text, starts, names, imports, local, words)
    assigned = tuple(sorted({match.group(1) for _, match in _column_zero_matches(text, _ASSIGNED)}))
    raise_hits = _segments_matching(_RAISE, text, starts, names) if "raise" in words else ()
    return FileFacts(
        digest,
        True,
        bool(uses),
        hits,
        rank_hits,
        references,
        tuple(imports.values()),
        assigned,
        tuple(sorted(local)),
        raise_hits,
        starred,
    )


def unreadable_facts() -> FileFacts:
    return FileFacts("", False, False, (), (), ())


def _segments(text: str) -> tuple[list[int], list[str]]:
    """Start of each top-level scope and its function name (MODULE_CODE for classes, decorators
    and the text before the first one)."""
    starts, names = [0], [MODULE_CODE]
    for start, match in _column_zero_matches(text, _TOP_LEVEL):
        starts.append(start)
        names.append(match.group(1) or MODULE_CODE)
    # A decorator belongs to the function below it: `@dist_only\ndef f` is f's text.
    for index in range(len(names) - 2, 0, -1):
        if text.startswith("@", starts[index]) and names[index + 1]:
            names[index] = names[index + 1]
    return starts, names


def _column_zero_matches(text: str, patterns: ColumnZero) -> Iterator[tuple[int, re.Match[str]]]:
    """Each match of a `_column_zero` construct at the start of a line, with where the construct
    starts: tried once at the start of the text, then as a newline followed by it."""
    first, after_newline = patterns
    match = first.match(text)
    if match is not None:
        yield 0, match
    for match in after_newline.finditer(text):
        yield match.start() + 1, match


def _line_start_matches(
    keyword: str, match_at: Callable[[int], tuple[int, _T] | None], text: str
) -> Iterator[_T]:
    """What `match_at(position)` (-> where the match ends, what it found) finds at each `keyword`
    that only spaces and tabs precede on its line, as `^[ \t]*` meant; the scan goes on after a
    match. The keyword is found with a plain scan and matched only there, so a text of many
    keywords in prose costs one pass, and the start of the line is carried along the scan."""
    position = scanned = line_start = 0
    while (start := text.find(keyword, position)) != -1:
        newline = text.rfind("\n", scanned, start)
        if newline != -1:
            line_start = newline + 1
        scanned = start
        found = match_at(start) if _only_blanks_before(text, line_start, start) else None
        if found is None:
            position = start + 1
            continue
        position, value = found
        yield value


def _import_at(text: str) -> Callable[[int], tuple[int, str] | None]:
    """`import a.b as c, d` at a position: the text of the names."""

    def at(start: int) -> tuple[int, str] | None:
        match = _IMPORT.match(text, start)
        return None if match is None else (match.end(), match.group(1))

    return at


def _from_import_at(text: str) -> Callable[[int], tuple[int, tuple[str, str]] | None]:
    """`from m import ...` at a position: (the module as written, the text of the names). A
    parenthesised list runs to the next `)`, found once for every list it closes: a text of
    unclosed `from m import (` lines costs one scan, not one to the end of the text for each."""
    next_close = -2  # not looked for yet; -1: there is none after the last list

    def at(start: int) -> tuple[int, tuple[str, str]] | None:
        nonlocal next_close
        head = _FROM_HEAD.match(text, start)
        if head is None:
            return None
        after = head.end()
        if text.startswith("(", after):
            if next_close != -1 and next_close < after:
                next_close = text.find(")", after)
            if next_close == -1:
                return None
            return next_close + 1, (head.group(1), text[after + 1 : next_close])
        names = _FROM_NAMES.match(text, after)
        return None if names is None else (names.end(), (head.group(1), names.group()))

    return at


def _only_blanks_before(text: str, line_start: int, start: int) -> bool:
    """Whether text[line_start:start] is spaces and tabs, read backwards: a word stops it at once."""
    index = start - 1
    while index >= line_start and text[index] in " \t":
        index -= 1
    return index < line_start


def _segments_hit(
    text: str, starts: list[int], names: list[str], positions: Iterable[int]
) -> tuple[str, ...]:
    found = {names[bisect.bisect_right(starts, position) - 1] for position in positions}
    found.discard(MODULE_CODE)
    return tuple(sorted(found))


def _segments_matching(
    pattern: re.Pattern[str], text: str, starts: list[int], names: list[str]
) -> tuple[str, ...]:
    """`_segments_hit` of every match of `pattern`, asking each function's text once instead of
    listing every match (rank words are frequent). Segments start at the beginning of a line and
    the pattern matches whole words, so no match crosses from one segment into the next."""
    ends = [*starts[1:], len(text)]
    found: set[str] = set()
    for start, end, name in zip(starts, ends, names, strict=True):
        if name != MODULE_CODE and name not in found and next(whole_words(pattern, text, start, end), None):
            found.add(name)
    return tuple(sorted(found))


def _references(
    text: str,
    starts: list[int],
    names: list[str],
    imports: Mapping[str, str],
    local: frozenset[str],
    words: frozenset[str],
) -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
    heads = (words & imports.keys()) | (words & local)
    if not heads:
        return ()
    by_segment: dict[str, tuple[set[str], set[str]]] = {}
    ends = [*starts[1:], len(text)]
    for start, end, name in zip(starts, ends, names, strict=True):
        remote, same_file = by_segment.setdefault(name, (set(), set()))
        for token in {first + rest for first, rest in _CALLED.findall(text, start, end)}:
            head, _, rest = token.partition(".")
            if head not in heads:
                continue
            if head in imports:
                qualified = imports[head]
                remote.add(qualified)
                for part in rest.split(".") if rest else ():  # `utils.sync` of `utils.sync.attr`
                    qualified = f"{qualified}.{part}"
                    remote.add(qualified)
            elif not rest and head != name:
                same_file.add(head)
    return tuple(
        (name, tuple(sorted(remote)), tuple(sorted(same_file)))
        for name, (remote, same_file) in sorted(by_segment.items())
        if remote or same_file
    )


def _import_table(text: str) -> dict[str, str]:
    """Local name -> qualified name, as the engine resolves it: the import lines found in the
    text, bound by `names.bind_import` / `names.bind_from` (relative imports by their module
    part, which the index then finds beside the importer)."""
    return _imports(text)[0]


def _imports(text: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """`_import_table`, and the modules the text imports everything from (`from m import *`:
    no name it binds can be listed, so the module itself is what the file reads)."""
    table: dict[str, str] = {}
    starred: dict[str, None] = {}
    for listed_imports in _line_start_matches("import", _import_at(text), text):
        aliases: list[Alias] = []
        for part in listed_imports.replace("\\", " ").split(","):
            pieces = part.split()
            if len(pieces) == 3 and pieces[1] == "as":
                aliases.append((pieces[0], pieces[2]))
            elif len(pieces) == 1:
                aliases.append((pieces[0], None))
        bind_import(table, aliases)
    for written, listed in _line_start_matches("from", _from_import_at(text), text):
        module = written.lstrip(".")
        if "#" in listed:
            listed = re.sub(r"#[^\n]*", "", listed)
        aliases = []
        for part in listed.replace("\\", " ").split(","):
            pieces = part.split()
            if pieces == ["*"] and module:
                starred[resolve_relative(module, len(written) - len(module), "")] = None
            if not pieces or pieces[0] == "*":
                continue
            local = pieces[2] if len(pieces) == 3 and pieces[1] == "as" else pieces[0]
            if pieces[0].isidentifier() and local.isidentifier():
                aliases.append((pieces[0], local))
        bind_from(table, module or None, len(written) - len(module), aliases)
    return table, tuple(starred)


@dataclass(frozen=True)
class Project:
    modules: tuple[tuple[str, str], ...]  # (dotted name, path)
    communicating_names: frozenset[str] = frozenset()
    digest: str = ""
    file_hashes: tuple[
        tuple[str, str], ...
    ] = ()  # content hash of each file with a helper or value to follow
    # Every indexed file's text digest (unreadable: ""): what a cached answer's reads are checked against.
    contents: tuple[tuple[str, str], ...] = ()
    rank_names: frozenset[str] = frozenset()  # imported functions whose text reads a rank (helpers to follow)
    selected: frozenset[str] = frozenset()  # files worth parsing (they may communicate)
    raising_names: frozenset[str] = frozenset()  # functions that say `raise` or call one that does

    def may_follow(self, name: str) -> bool:
        """Worth opening another file for: a helper that communicates or computes a rank value."""
        return name in self.communicating_names or name in self.rank_names

    def may_raise(self, name: str) -> bool:
        """Worth opening another file for inside a `try` whose handler is entered only by the
        `raise` statements the analysis sees (handlers.py): a helper that may raise itself."""
        return name in self.raising_names

    def indexed(self, path: str) -> bool:
        return path in _tables(self)[1]

    def still_reads(self, reads: Mapping[str, str]) -> bool:
        """Whether every file an answer was computed from (`reads.py`) still has the digest it had
        then, and every name it looked up still lands where it did: the answer may be served
        again (an edit elsewhere cannot have changed it)."""
        digests = content_table(self)
        for read, digest in reads.items():
            if read.startswith(LOOKUP):
                folder, _, qualified = read[len(LOOKUP) :].partition("\0")
                if self._landing(qualified, folder) != digest:
                    return False
            elif digests.get(read) != digest:
                return False
        return True

    def lookup(self, qualified: str, importer: str) -> tuple[str, str] | None:
        """(path, attribute) of a qualified name that lands in a file of this run. Where it lands
        (or that it lands nowhere) is recorded as read (`reads.py`): adding or removing a file
        re-checks the answers whose names it moves, not every answer."""
        folder = os.path.dirname(realpath_once(importer))
        table, paths = _tables(self)
        found = _lookup(qualified, folder, table, paths)
        note({f"{LOOKUP}{folder}\0{qualified}": "" if found is None else "\0".join(found)})
        return found

    def _landing(self, qualified: str, folder: str) -> str:
        table, paths = _tables(self)
        found = _lookup(qualified, folder, table, paths)
        return "" if found is None else "\0".join(found)


@lru_cache(maxsize=16384)
def realpath_once(path: str) -> str:
    """`os.path.realpath` once per path and process: it is asked for every name looked up in
    another file (a few thousand times a run, each a chain of `lstat` calls). Text, as the index
    keys paths; `source.real_path` asks the file system every time and answers a `Path`."""
    return os.path.realpath(path)


def _lookup(
    qualified: str, importer_dir: str, table: Mapping[str, str], paths: frozenset[str]
) -> tuple[str, str] | None:
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module, attribute = ".".join(parts[:cut]), ".".join(parts[cut:])
        sibling = _beside(importer_dir, module)
        if sibling in paths:
            return sibling, attribute
        if module in table:
            return table[module], attribute
    return None


def _beside(folder: str, module: str) -> str:
    """`os.path.join(folder, "a/b.py")` for module `a.b`: asked for every cut of every name a
    partial run's reach looks up (tens of thousands), where `os.path.join` was a third of the time."""
    relative = module.replace(".", os.sep) + ".py"
    if not folder:
        return relative
    return folder + relative if folder.endswith(os.sep) else folder + os.sep + relative


class Resolver:
    """`_lookup` and `_module_file` over one run's files, each answer kept per (name, importer's
    folder): the same imports recur in thousands of files, and each look tries a path per cut."""

    def __init__(self, table: Mapping[str, str], paths: frozenset[str]) -> None:
        self.table = table
        self.paths = paths
        self._found: dict[tuple[str, str], tuple[str, str] | None] = {}
        self._modules: dict[tuple[str, str], str | None] = {}

    def lookup(self, qualified: str, folder: str) -> tuple[str, str] | None:
        key = (qualified, folder)
        if key not in self._found:
            self._found[key] = _lookup(qualified, folder, self.table, self.paths)
        return self._found[key]

    def module_file(self, qualified: str, folder: str) -> str | None:
        key = (qualified, folder)
        if key not in self._modules:
            self._modules[key] = _module_file(qualified, folder, self.table, self.paths)
        return self._modules[key]

    def called_function(self, qualified: str, folder: str) -> tuple[str, str] | None:
        """The module-level function of a file of the run a called name lands on (the engine
        follows no other), as (path, name)."""
        found = self.lookup(qualified, folder)
        return found if found is not None and "." not in found[1] else None

    def imported(self, qualified: str, folder: str) -> tuple[str, str | None] | None:
        """Where an imported name lands: (path, None) for a module of the run imported whole,
        else (path, attribute) for a name in one."""
        module = self.module_file(qualified, folder)
        return (module, None) if module is not None else self.lookup(qualified, folder)


_IDENTITIES: dict[int, tuple[Project, str]] = {}


def identity(project: Project) -> str:
    """A name for this project's whole content, for the caches of one process (tables, modules
    loaded as helpers). `digest` alone is not one: it covers only the files with helpers or values
    to follow, so two runs over different module tables may share it (a test process, an editor
    that checks two folders). Computed once per project object; the object is held so that its
    `id` is not reused while it is a key."""
    entry = _IDENTITIES.get(id(project))
    if entry is None or entry[0] is not project:
        if len(_IDENTITIES) >= 64:
            _IDENTITIES.clear()
        text = repr(
            (
                project.modules,
                project.digest,
                project.contents,
                sorted(project.selected),
                sorted(project.communicating_names),
                sorted(project.rank_names),
                sorted(project.raising_names),
            )
        )
        entry = _IDENTITIES[id(project)] = (project, hashlib.sha256(text.encode()).hexdigest()[:16])
    return entry[1]


_TABLES: dict[str, tuple[dict[str, str], frozenset[str]]] = {}


def _tables(project: Project) -> tuple[dict[str, str], frozenset[str]]:
    """Module name -> path, and the set of paths (built once per project, not per lookup)."""
    key = identity(project)
    tables = _TABLES.get(key)
    if tables is None:
        tables = _TABLES[key] = (dict(project.modules), frozenset(path for _, path in project.modules))
    return tables


_CONTENTS: dict[str, dict[str, str]] = {}


def content_table(project: Project) -> dict[str, str]:
    """Real path -> text digest of every indexed file (built once per project)."""
    key = identity(project)
    table = _CONTENTS.get(key)
    if table is None:
        if len(_CONTENTS) >= 16:
            _CONTENTS.clear()
        table = _CONTENTS[key] = dict(project.contents)
    return table


def read_digest(project: Project, path: str) -> str:
    """The digest a read of this file of the run is recorded with (`reads.py`); a file the index
    does not hold gets one no run has, so an answer that read it is never served again."""
    return content_table(project).get(path, "?unindexed")


_INDEX_KEYS: dict[str, str] = {}


def index_key(project: Project) -> str:
    """What every file's answer may read of the whole index rather than of files it opened or
    names it looked up: which function names communicate, compute a rank or raise. Part of every
    cache key; the files opened and the names looked up are checked one by one instead
    (`Project.still_reads`)."""
    key = identity(project)
    found = _INDEX_KEYS.get(key)
    if found is not None:
        return found
    if len(_INDEX_KEYS) >= 64:
        _INDEX_KEYS.clear()
    text = repr(
        (
            sorted(project.communicating_names),
            sorted(project.rank_names),
            sorted(project.raising_names),
        )
    )
    found = _INDEX_KEYS[key] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return found


def module_names(paths: Iterable[Path | str]) -> list[tuple[str, str]]:
    """(module name, path) of every file (one `__init__.py` check per folder, not per file).
    Two files may share a name (scripts in different folders): both are kept, as each is found
    beside its importers. Each folder's `__init__.py` is asked for once (it runs before the
    index's workers start).

    A folder without `__init__.py` below a regular package is a namespace package (PEP 420:
    `import pkg.sub.mod` finds `pkg/sub/mod.py` through `pkg.__path__` whether `sub/` has an
    `__init__.py` or not), so its files are also named from the outermost enclosing package down
    (`pkg.sub.mod`); they keep their name from the nearest regular package (`mod`), for code that
    puts that folder on `sys.path` itself. Only a folder some package encloses is named so: a
    loose folder of scripts stays nameless, and the walk up stops at the first folder that is
    neither a package nor inside one, so it is one step per folder."""
    regular: dict[str, list[str]] = {}
    enclosed: dict[str, list[str]] = {}
    initialised: dict[str, bool] = {}

    def has_init(folder: str) -> bool:
        found = initialised.get(folder)
        if found is None:
            found = initialised[folder] = os.path.exists(os.path.join(folder, "__init__.py"))
        return found

    def package_parts(folder: str) -> list[str]:
        """The dotted names down to `folder` through regular packages only ([] when it is none)."""
        found = regular.get(folder)
        if found is None:
            parent = os.path.dirname(folder)
            is_package = parent != folder and has_init(folder)
            found = [*package_parts(parent), os.path.basename(folder)] if is_package else []
            regular[folder] = found
        return found

    def namespace_parts(folder: str) -> list[str]:
        """The dotted names down to `folder` when it is a package or a namespace folder below
        one ([] otherwise)."""
        found = enclosed.get(folder)
        if found is None:
            parent = os.path.dirname(folder)
            above = namespace_parts(parent) if parent != folder else []
            inside = parent != folder and (has_init(folder) or bool(above))
            found = [*above, os.path.basename(folder)] if inside else []
            enclosed[folder] = found
        return found

    names: list[tuple[str, str]] = []
    for path in (str(PurePath(p)) for p in paths):  # normalised as a `Path` is (`./x.py` -> `x.py`)
        stem = os.path.splitext(os.path.basename(path))[0]
        folder = os.path.dirname(path)
        for parts in dict.fromkeys((tuple(package_parts(folder)), tuple(namespace_parts(folder)))):
            names.append((".".join(parts if stem == "__init__" else [*parts, stem]), path))
    return names


def resolver_for(modules: Iterable[tuple[str, str]], paths: Iterable[str]) -> Resolver:
    """Where names land among `paths`, with the module table as `Project.lookup` sees it."""
    return Resolver(dict(sorted(modules)), frozenset(paths))


def build_project(
    files: Mapping[str, FileFacts], modules: Iterable[tuple[str, str]], resolver: Resolver | None = None
) -> Project:
    """The run's index from each file's facts (`files`: real path -> facts).

    A top-level function may communicate when its own text names a collective, or a function of
    the run that may communicate (imported from another file, or defined in the same one); the
    same fixed point gives the functions that compute a rank value. A file is selected when it
    names a collective or refers to a function that may communicate. `resolver`: the one a partial
    run's reach asked the same questions of (`resolver_for` the whole project); every name it
    answered lands in a file the reach read, and its answers are kept.
    """
    ordered = tuple(sorted(modules))
    resolver = resolver or resolver_for(ordered, files)
    calls = _resolved_calls(files, resolver)
    communicating = closure({(path, name) for path, facts in files.items() for name in facts.hits}, calls)
    ranked = closure({(path, name) for path, facts in files.items() for name in facts.rank_hits}, calls)
    raising = closure({(path, name) for path, facts in files.items() for name in facts.raise_hits}, calls)
    # An unreadable file goes to the engine, which reports why.
    selected = {path for path, facts in files.items() if facts.triggered or not facts.readable}
    for (path, _), callees in calls.items():
        if path not in selected and not callees.isdisjoint(communicating):
            selected.add(path)
    helpers = communicating | ranked | raising
    values = _value_sources(files, resolver)
    contributing = sorted(
        {path for path, _ in helpers} | {path for found in values.values() for path in found}
    )
    hashes = tuple((path, files[path].digest) for path in contributing)
    digest = hashlib.sha256("".join(f"{p}{d}" for p, d in hashes).encode()).hexdigest()[:16]
    return Project(
        modules=ordered,
        communicating_names=frozenset(name for _, name in communicating),
        digest=digest,
        file_hashes=hashes,
        contents=tuple(sorted((path, facts.digest) for path, facts in files.items())),
        rank_names=frozenset(name for _, name in ranked),
        selected=frozenset(selected),
        raising_names=frozenset(name for _, name in raising),
    )


def _resolved_calls(
    files: Mapping[str, FileFacts], resolver: Resolver
) -> dict[Function, frozenset[Function]]:
    """Each scope's named functions of the run, as (path, name): imports resolved the way the
    engine resolves them (only a module-level function of another file can be followed)."""
    calls: dict[Function, frozenset[Function]] = {}
    for path, facts in files.items():
        folder = os.path.dirname(path)
        for name, remote, same_file in facts.references:
            targets = {(path, callee) for callee in same_file}
            for qualified in remote:
                found = through_reexports(resolver.called_function(qualified, folder), files, resolver)
                if found is not None:
                    targets.add(found)
            if targets:
                calls[(path, name)] = frozenset(targets)
    return calls


def _value_sources(files: Mapping[str, FileFacts], resolver: Resolver) -> dict[str, set[str]]:
    """Each file's files of the run whose module-level values it imports: a module imported whole
    (`from . import env`, `import pkg.env as env`) or a name that module binds at module level
    (`from .env import RANK`). A constant there can decide a verdict here, so its edit must
    re-check this file although no call reaches it."""
    sources: dict[str, set[str]] = {}
    for path, facts in files.items():
        folder = os.path.dirname(path)
        for qualified in (*facts.imports, *facts.star_imports):
            target = resolver.imported(qualified, folder)
            if target is None or target[0] == path:
                continue
            found, attribute = target
            if attribute is None or _may_be_value(attribute.split(".")[0], files[found]):
                sources.setdefault(path, set()).add(found)
    return sources


def _may_be_value(name: str, facts: FileFacts) -> bool:
    """Whether a name imported from a file may be one of its module-level values: anything but a
    top-level function there (a helper is followed through the calls instead). `assigned` alone
    misses a value bound inside `try:` or `if`, in a tuple target or by an import, and then an
    edit of it left its importers' cached verdicts in place."""
    return name in facts.assigned or name not in facts.functions


def files_reached(path: str, facts: FileFacts, resolver: Resolver) -> set[str]:
    """The other files of the run that `build_project` may follow from the file at `path`: where
    its called names land (`_resolved_calls`) and every file its imports name (a superset of
    `_value_sources`, which also asks the target's facts). A file no chain of these reaches
    cannot change a verdict in `path`, so a partial run indexes only what its files reach."""
    folder = os.path.dirname(path)
    called = (resolver.called_function(q, folder) for _, remote, _ in facts.references for q in remote)
    imported = (resolver.imported(q, folder) for q in (*facts.imports, *facts.star_imports))
    found = {target[0] for target in (*called, *imported) if target is not None}
    found.discard(path)
    return found


def _module_file(
    qualified: str, importer_dir: str, table: Mapping[str, str], paths: frozenset[str]
) -> str | None:
    sibling = _beside(importer_dir, qualified)
    return sibling if sibling in paths else table.get(qualified)
