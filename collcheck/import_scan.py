"""The modules a Python file imports, read off its bytes without parsing.

In: a file's bytes and, to resolve its relative imports, the package it is in (None: relative
imports are left out). Out: dotted names — each imported module, and for `from m import a` also
`m.a` (a submodule or a name of `m`: the reader tries both). Used to find which installed packages
a run's files import (`package_summaries`) and how far a package's own imports reach
(`static.package_summaries`), where parsing thousands of files only to follow imports cost seconds.
An import inside a string is taken too; one spelled on several lines with backslashes is missed.
"""

from __future__ import annotations

import re

# `import a.b as c, d` / `from ..a.b import x, y` / `from . import (x,` at the start of a line
# (indented too): the leading dots, the module, then what follows `import` on that line.
_IMPORT_LINE = re.compile(
    rb"^[ \t]*(?:from[ \t]+(\.*)[ \t]*([A-Za-z_][A-Za-z0-9_.]*)?[ \t]+import[ \t]+([^\n#;]*)"
    rb"|import[ \t]+([^\n#;]+))",
    re.MULTILINE,
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
MAX_PARENTHESISED = 16 * 1024  # a `from m import (...)` list longer than this is cut


def imported_names(raw: bytes, package: str | None) -> set[str]:
    found: set[str] = set()
    consumed = 0  # the end of the last parenthesised list read: lines inside it are not imports
    for matched in _IMPORT_LINE.finditer(raw):
        if matched.start() < consumed:
            continue
        dots, module, names, plain = matched.groups()
        if plain is not None:
            found.update(_names(plain.decode(errors="replace")))
            continue
        base = _absolute(len(dots), (module or b"").decode(), package)
        if base is None:
            continue
        text = names.decode(errors="replace")
        if text.lstrip().startswith("(") and ")" not in text:
            end = raw.find(b")", matched.end(), matched.end() + MAX_PARENTHESISED)
            consumed = end if end >= 0 else matched.end() + MAX_PARENTHESISED
            text += " " + _without_comments(raw[matched.end() : consumed].decode(errors="replace"))
        if base:
            found.add(base)
        for name in _names(text.replace("(", " ").replace(")", " ")):
            if "." not in name:
                found.add(f"{base}.{name}" if base else name)
    return found


def _names(text: str) -> list[str]:
    """The first word of each comma-separated part (`a.b as c` -> `a.b`)."""
    names = []
    for part in text.split(","):
        words = part.split()
        if words and _NAME.fullmatch(words[0]):
            names.append(words[0])
    return names


def _without_comments(text: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def _absolute(level: int, module: str, package: str | None) -> str | None:
    """`from ..x import y` in package `a.b.c`: `a.b.x`; None when it cannot be resolved."""
    if level == 0:
        return module or None
    if package is None:
        return None
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, module] if module else base) or None
