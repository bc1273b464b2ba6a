"""A catalog document (tables, arrays of tables, strings, lists of strings) written as TOML.

In: the plain data (strings, numbers, booleans, lists, inline tables) of
`static.package_summaries.PackageSummary.document`. Out: TOML text that
`catalog.load_catalog` reads back (a round trip the tests check). Strings are written as TOML
basic strings; JSON's string escapes are a subset of TOML's, so `json.dumps` writes them.
"""

from __future__ import annotations

import json
import re
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def dumps(document: dict[str, Any]) -> str:
    lines: list[str] = []
    simple = {k: v for k, v in document.items() if not isinstance(v, (dict, list)) or _is_value(v)}
    for key, value in simple.items():
        lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in document.items():
        if key in simple:
            continue
        if isinstance(value, dict):
            lines.extend(_table(key, value))
        else:
            for item in value:
                lines.append("")
                lines.append(f"[[{_key(key)}]]")
                lines.extend(f"{_key(k)} = {_value(v)}" for k, v in item.items())
    return "\n".join(lines).lstrip("\n") + "\n"


def _table(name: str, table: dict[str, Any]) -> list[str]:
    lines = ["", f"[{name}]"]
    nested = []
    for key, value in table.items():
        if isinstance(value, dict):
            nested.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in nested:
        lines.extend(_table(f"{name}.{_key(key)}", value))
    return lines


def _is_value(value: Any) -> bool:
    return isinstance(value, list) and all(not isinstance(item, (dict, list)) for item in value)


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, dict):  # an inline table (a conditional entry's `defaults`)
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not a catalog value: {value!r}")
