"""What a collective's call site passes: the argument expressions of the call, read from the source.

Two all_reduces of the same shape issued in opposite orders on two ranks (`a` then `b` against `b`
then `a`) agree on everything the backend checks, and return wrong sums. Their call sites differ,
but so do those of the legitimate "barrier trick" (the same collective written on two lines). What
tells them apart is the operand: the swapped pair crosses (rank 0's first is rank 1's second, and
the other way round), the barrier trick does not. The operand is read, once per call site, as the
static analyzer reads it: the source text of the call at the frame's current instruction (Python
3.11+ gives each instruction's source span), parsed with `ast`, never executed.

Pure functions and one bounded cache; no torch.
"""

from __future__ import annotations

import ast
import linecache
from dataclasses import dataclass
from types import CodeType

# Keyword arguments that say how to communicate, not what: never part of the operand.
NOT_OPERANDS = frozenset(
    {
        "group",
        "async_op",
        "op",
        "src",
        "dst",
        "group_src",
        "group_dst",
        "tag",
        "timeout",
        "wait_all_ranks",
        "device_ids",
    }
)
MAX_SOURCE = 4_000  # characters of a call's source we parse at most
MAX_OPERAND = 120  # characters of operand text kept
_CACHE_LIMIT = 1 << 14
_cache: dict[tuple[int, int], tuple[CodeType, str]] = {}  # (id(code), lasti) -> (code, operand)


def operand_at(code: CodeType, lasti: int) -> str:
    """The operand of the call that instruction `lasti` (a frame's `f_lasti`) of `code` is in;
    "" when the source or the instruction's position is unavailable, or it is no call."""
    key = (id(code), lasti)
    known = _cache.get(key)
    if known is not None and known[0] is code:
        return known[1]
    try:
        text = _operand(code, lasti)
    except Exception:  # a tracer must never fail the program over a source it cannot read
        text = ""
    if len(_cache) >= _CACHE_LIMIT:
        _cache.clear()
    _cache[key] = (code, text)  # the code is held, so its id is not reused while cached
    return text


def _operand(code: CodeType, lasti: int) -> str:
    positions = getattr(code, "co_positions", None)
    if positions is None or lasti < 0:  # Python before 3.11: no column information
        return ""
    index = lasti // 2  # f_lasti counts bytes; co_positions yields one entry per 2-byte unit
    for number, position in enumerate(positions()):
        if number == index:
            return call_operand(code.co_filename, *position)
    return ""


def call_operand(
    filename: str, line: int | None, end_line: int | None, column: int | None, end_column: int | None
) -> str:
    """The operand of the call expression spanning (line, column) to (end_line, end_column)."""
    if None in (line, end_line, column, end_column):
        return ""
    assert line is not None and end_line is not None and column is not None and end_column is not None
    if end_line - line > 50:
        return ""
    lines = [linecache.getline(filename, number) for number in range(line, end_line + 1)]
    if not all(lines):
        return ""
    if len(lines) == 1:
        segment = lines[0].encode("utf-8")[column:end_column].decode("utf-8", "replace")
    else:
        first = lines[0].encode("utf-8")[column:].decode("utf-8", "replace")
        last = lines[-1].encode("utf-8")[:end_column].decode("utf-8", "replace")
        segment = first + "".join(lines[1:-1]) + last
    return operand_of_source(segment)


def operand_of_source(source: str) -> str:
    """`dist.all_reduce(a, group=g)` -> `a`; `dist.all_gather(out, t)` -> `out, t`; "" for what is
    not one call expression."""
    if len(source) > MAX_SOURCE:
        return ""
    try:
        tree = ast.parse("(\n" + source + "\n)", mode="eval")
    except (SyntaxError, ValueError):
        return ""
    call = tree.body
    if not isinstance(call, ast.Call):
        return ""
    parts = [ast.unparse(argument) for argument in call.args]
    parts += [
        f"{keyword.arg}={ast.unparse(keyword.value)}"
        for keyword in call.keywords
        if keyword.arg is not None and keyword.arg not in NOT_OPERANDS
    ]
    return ", ".join(parts)[:MAX_OPERAND]


# ---------------------------------------------------------------------------------------------
# Swapped pairs (shared by the run-time monitor and the offline analysis)


def crosses(earlier: tuple[str, str], later: tuple[str, str]) -> bool:
    """Whether two call-site divergences between the same two ranks, each given as (first rank's
    operand, second rank's operand), are a swapped pair: `a` vs `b`, then `b` vs `a`. An unknown
    operand ("") never crosses, nor does the same operand written on two lines."""
    operands = (*earlier, *later)
    if not all(operands) or earlier[0] == earlier[1]:
        return False
    return earlier[0] == later[1] and earlier[1] == later[0]


@dataclass(frozen=True)
class Use:
    """One rank's side of one half of a swapped pair."""

    rank: int
    seq: int
    describe: str  # `all_reduce(float32[4])`
    operand: str
    site: str  # `train.py:12`


def swap_text(group: str, uses: tuple[Use, Use, Use, Use]) -> str:
    """`swapped collectives in group 0: rank 0 issued all_reduce(float32[4]) on `a` at x.py:12 (#1),
    then on `b` at x.py:13 (#2); rank 1 on `b` at ... (#1), then on `a` at ... (#2) ...`: all four
    call sites, each rank's in issue order, lowest rank first."""
    by_rank: dict[int, list[Use]] = {}
    for use in sorted(uses, key=lambda use: (use.rank, use.seq)):
        by_rank.setdefault(use.rank, []).append(use)
    parts = []
    for index, (rank, (one, two)) in enumerate(sorted(by_rank.items())):
        what = f"issued {one.describe} on " if index == 0 else "on "
        parts.append(
            f"rank {rank} {what}`{one.operand}` at {one.site} (#{one.seq}), "
            f"then on `{two.operand}` at {two.site} (#{two.seq})"
        )
    return (
        f"swapped collectives in group {group}: {'; '.join(parts)}: the same collectives in opposite "
        "orders (gloo returns wrong results, NCCL and HCCL may hang)"
    )
