"""Byte sizes: parsing budgets such as `16GiB` or `17GB`, and printing sizes with exact bytes.

Decimal prefixes (KB, MB, GB, TB) mean powers of 1000 and binary ones (KiB, MiB, GiB, TiB) powers
of 1024, as in IEC 80000-13; the seed article's "4.3 GB" is 4 GiB written in decimal units.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

KIB = 1024
MIB = 1024**2
GIB = 1024**3

_MULTIPLIERS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": KIB,
    "mib": MIB,
    "gib": GIB,
    "tib": 1024**4,
}

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")


class SizeError(ValueError):
    """A size string that cannot be read; the message says what is accepted."""


def parse_size(text: str | int) -> int:
    """`16GiB` -> 17179869184, `17GB` -> 17000000000, `512MiB`, `1024` (bytes). Fractions round down."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise SizeError(f"size must not be negative: {text}")
        return text
    match = _SIZE.match(str(text))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _MULTIPLIERS:
        raise SizeError(
            f"cannot read size '{text}' (use bytes or a unit: KB, MB, GB, TB = powers of 1000; "
            "KiB, MiB, GiB, TiB = powers of 1024)"
        )
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as error:  # pragma: no cover - the regex admits only decimals
        raise SizeError(f"cannot read size '{text}'") from error
    return int(number * _MULTIPLIERS[unit])


def gib(size: int) -> str:
    """Binary gigabytes with enough digits to tell sizes apart: `3.8125 GiB`, `0.0001 GiB`."""
    value = size / GIB
    text = f"{value:,.4f}".rstrip("0").rstrip(".")
    return f"{text} GiB"


def exact(size: int) -> str:
    """`4,294,967,296 bytes`."""
    return f"{size:,} bytes"


def describe(size: int) -> str:
    """`4 GiB (4,294,967,296 bytes)`: the readable unit and the exact figure together."""
    return f"{gib(size)} ({exact(size)})"
