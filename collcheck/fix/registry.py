"""Rule code -> the fixers that may remove its findings, tried in order.

Each fixer decides from the finding's message template which of the rule's shapes it handles,
and returns None for anything else; collcheck.fix.engine verifies what it returns.
"""

from __future__ import annotations

from collcheck.fix.engine import Fixer


def fixers_for(code: str) -> tuple[Fixer, ...]:
    from collcheck.fix import gather_object, hoist, root, set_order, shared_decision

    table: dict[str, tuple[Fixer, ...]] = {
        "CC001": (hoist.fix_collective_in_rank_guard,),
        "CC006": (root.fix_rank_dependent_root,),
        "CC007": (set_order.fix_set_iteration, shared_decision.fix_per_process_guard),
        "CC102": (gather_object.fix_all_gather_object,),
    }
    return table.get(code, ())
