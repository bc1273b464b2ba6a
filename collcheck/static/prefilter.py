"""The textual prefilter's pattern: words that mean a file may communicate. Cheap to import."""

from __future__ import annotations

import re

from collcheck.catalog import Catalog


class Trigger:
    """Does a text mention communication? Distinctive names (`all_reduce`, `barrier`) suffice;
    plain words that other libraries use too (`gather`, `reduce`, `save`) count only as a call or
    import (`.gather(`) in a text that also names a distributed library."""

    def __init__(self, distinctive: list[str], plain: list[str]) -> None:
        self.distinctive = re.compile(r"\b(?:" + "|".join(map(re.escape, distinctive)) + r")\b")
        self.plain = (
            re.compile(r"(?:\.|\bimport\s+|,\s*)(?:" + "|".join(map(re.escape, plain)) + r")\b")
            if plain
            else None
        )

    def search(self, text: str, pos: int = 0, endpos: int | None = None) -> bool:
        end = len(text) if endpos is None else endpos
        if self.distinctive.search(text, pos, end):
            return True
        if self.plain is None or not self.plain.search(text, pos, end):
            return False
        return _MARKER.search(text) is not None


def trigger_pattern(catalog: Catalog) -> Trigger:
    trigger = _TRIGGERS.get(catalog.fingerprint)
    if trigger is None:
        words = sorted(catalog.trigger_words, key=len, reverse=True)
        distinctive = [w for w in words if "_" in w.strip("_") or w in DISTINCTIVE_WORDS]
        trigger = Trigger(distinctive, [w for w in words if w not in distinctive])
        _TRIGGERS[catalog.fingerprint] = trigger
    return trigger


_TRIGGERS: dict[str, Trigger] = {}
DISTINCTIVE_WORDS = frozenset({"barrier", "allreduce", "allgather", "reducescatter", "alltoall"})
_MARKER = re.compile(
    r"\b(?:distributed|deepspeed|accelerate|Accelerator|lightning|pytorch_lightning|megatron|vllm|"
    r"torch_npu|hccl|nccl|gloo|Fabric|parallel_state)\b"
)
