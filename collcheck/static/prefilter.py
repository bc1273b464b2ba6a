"""The textual prefilter's pattern: words that mean a file may communicate. Cheap to import."""

from __future__ import annotations

import re

from collcheck.catalog import Catalog


class Trigger:
    """Does a text mention communication? Distinctive names (`all_reduce`, `barrier`) suffice;
    plain words that other libraries use too (`gather`, `reduce`, `save`) count only as a call or
    import (`.gather(`) in a text that also names a distributed library."""

    def __init__(self, distinctive: list[str], plain: list[str]) -> None:
        # Sets of identifiers, not one big alternation: Python's re has no multi-pattern matcher,
        # and an alternation of a few hundred words costs ~1 ms per file.
        self.distinctive = frozenset(distinctive)
        self.plain = frozenset(plain)

    def positions(self, text: str, known: frozenset[str] | set[str] = frozenset()) -> list[int]:
        """Where the text mentions communication (plain words only as `.word` in a text that names
        a distributed library), or one of the `known` names."""
        plain = self.plain if self.plain and _MARKER.search(text) is not None else frozenset()
        found = []
        for match in _IDENTIFIER.finditer(text):
            word = match.group()
            used_as_api = word in plain and _after_dot(text, match.start())
            if word in self.distinctive or word in known or used_as_api:
                found.append(match.start())
        return found

    def search(self, text: str, pos: int = 0, endpos: int | None = None) -> bool:
        end = len(text) if endpos is None else endpos
        words = set(_IDENTIFIER.findall(text, pos, end))
        if not words.isdisjoint(self.distinctive):
            return True
        if words.isdisjoint(self.plain) or _MARKER.search(text) is None:
            return False
        return bool(self.positions(text[pos:end]))


def trigger_pattern(catalog: Catalog) -> Trigger:
    trigger = _TRIGGERS.get(catalog.fingerprint)
    if trigger is None:
        words = sorted(catalog.trigger_words, key=len, reverse=True)
        distinctive = [w for w in words if "_" in w.strip("_") or w in DISTINCTIVE_WORDS]
        trigger = Trigger(distinctive, [w for w in words if w not in distinctive])
        _TRIGGERS[catalog.fingerprint] = trigger
    return trigger


_TRIGGERS: dict[str, Trigger] = {}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _after_dot(text: str, position: int) -> bool:
    """`x.gather(` or `from m import gather`: the plain word is used as an API name."""
    before = text[max(0, position - 1) : position]
    if before == ".":
        return True
    line_start = text.rfind("\n", 0, position) + 1
    return "import" in text[line_start:position]


DISTINCTIVE_WORDS = frozenset({"barrier", "allreduce", "allgather", "reducescatter", "alltoall"})
_MARKER = re.compile(
    r"\b(?:distributed|deepspeed|accelerate|Accelerator|lightning|pytorch_lightning|megatron|vllm|"
    r"torch_npu|hccl|nccl|gloo|Fabric|parallel_state)\b"
)
