"""CC007, set iteration: `for x in <set>:` becomes `for x in sorted(<set>):` (safe).

Every process then visits the elements in the same order, whatever its hash seed. The elements
must be orderable; sets of names, strings and numbers — what code iterates over to issue
collectives — are.
"""

from __future__ import annotations

import libcst as cst

from collcheck.adopt.rewrite import Rewrite, Source
from collcheck.checks import cc007_per_process_value_guard as cc007
from collcheck.findings import Applicability, Finding

RULE = cc007.CODE
VARIANTS = frozenset({cc007.Variant.SET})


def fix(source: Source, finding: Finding) -> Rewrite | None:
    loops = source.nodes_at(finding.location.line, cst.For)
    if len(loops) != 1:
        return None
    loop = loops[0]
    assert isinstance(loop, cst.For)
    if loop.asynchronous is not None:
        return None
    ordered = cst.Call(func=cst.Name("sorted"), args=[cst.Arg(value=loop.iter)])
    text = source.replaced(loop.iter, ordered)
    return Rewrite(text, Applicability.SAFE, "iterate over sorted(...) so every rank has the same order")
