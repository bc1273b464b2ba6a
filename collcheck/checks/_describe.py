"""Small helpers shared by the rule modules to name ranks, ops and places in messages, and the
phrasing of ranks among a group's members that every rule gets unless it defines its own."""

from __future__ import annotations

from pathlib import Path

from collcheck.static.calls import CALLBACK_OP
from collcheck.static.divergence import Divergence
from collcheck.static.program import CommEvent, Element, LoopEvent

HANDED = "through the callable handed to unknown code"
HANDED_IN_LOOP = "through the callable a loop hands to unknown code"


def where(element: Element) -> str:
    return f"{Path(element.path).name}:{element.line}"


def describe_element(element: Element | None) -> str:
    if element is None:
        return "nothing"
    if isinstance(element, LoopEvent):
        first = element.first
        if element.body_ops == (CALLBACK_OP,) and first is not None:  # a hook registered per item
            return f"{_handed(first)}, if anything, {HANDED_IN_LOOP} at {where(element)}"
        return f"a loop of {', '.join(element.body_ops)} at {where(element)}{loop_assumption(element)}"
    if element.op == CALLBACK_OP:
        return f"{_handed(element)}, if anything, {HANDED} at {where(element)}"
    inferred = f" (its class inferred from use: {element.inferred})" if element.inferred else ""
    if element.condition:  # a conditional summary the call site leaves undecided
        return f"{element.op} at {where(element)}{inferred} (a collective when {element.condition})"
    return f"{element.op} at {where(element)}{inferred}"


def loop_assumption(element: Element | None) -> str:
    """` (collectives when ...)`: the configuration or wrapping under which a loop's body
    communicates, when a conditional summary or an assumed reduction left it undecided."""
    if not isinstance(element, LoopEvent):
        return ""
    assumed = next((e.condition for c in element.body_comms for e in c if e.condition), "")
    if element.first is not None and element.first.condition:
        assumed = element.first.condition
    return f" (collectives when {assumed})" if assumed else ""


def _handed(callback: CommEvent) -> str:
    """What a callable handed on to unknown code issues, in words."""
    return " or ".join(sorted(callback.callback_ops)) if callback.callback_ops else "collectives"


def op_name(element: Element | None) -> str:
    if element is None:
        return "nothing"
    if isinstance(element, LoopEvent):
        return "loop of " + ", ".join(element.body_ops)
    return element.op


def ranks(d: Divergence) -> tuple[int, int, Element | None, Element | None]:
    """The two ranks in ascending order, each with its element at the divergence."""
    model = d.model
    if model.rank_a <= model.rank_b:
        return model.rank_a, model.rank_b, d.event_a, d.event_b
    return model.rank_b, model.rank_a, d.event_b, d.event_a


def in_local_ranks(template: str, args: dict[str, str], d: Divergence) -> tuple[str, dict[str, str]]:
    """The phrasing every rule gets unless it defines its own `in_local_ranks`: among the members
    of a group whose conditions read only local ranks, the global ranks the solver picked mean
    nothing, so a message that names two ranks (`rank {rank_x}`, `ranks {rank_x} and`) names their
    local ranks, and the group. The rules' templates keep one wording each, so it is derived here."""
    local = dict(d.local_ranks)
    keys = ("rank_x", "rank_y")
    if not local or d.reads_global_rank or not all(args.get(key, "").isdigit() for key in keys):
        return template, args
    if not all(int(args[key]) in local for key in keys) or "{group}" in template:
        return template, args
    shown = {**args, **{key: str(local[int(args[key])]) for key in keys}, "group": d.group}
    for key in keys:
        template = template.replace(f"rank {{{key}}}", f"local rank {{{key}}}")
    template = template.replace("ranks {rank_x} and", "local ranks {rank_x} and")
    world = " (world size {world})"
    if world in template:
        return template.replace(world, " in `{group}`" + world, 1), shown
    return template + " in `{group}`", shown
