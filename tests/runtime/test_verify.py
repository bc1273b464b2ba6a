"""The pure parts of cross-rank verification: comparisons, stall reports, wait cycles."""

from __future__ import annotations

import pytest

from collcheck.runtime.record import CallSite, CollectiveEvent
from collcheck.runtime.verify import (
    Position,
    find_wait_cycle,
    fingerprint,
    mismatch_kind,
    mismatch_text,
    stall_text,
)


def _fp(rank: int, numel: int, line: int, group: str = "0", seq: int = 1) -> dict[str, object]:
    event = CollectiveEvent(
        rank=rank,
        group=group,
        group_ranks=(0, 1),
        seq=seq,
        op="all_reduce",
        shapes=((numel,),),
        dtypes=("float32",),
        reduce_op="sum",
        site=CallSite("train.py", line),
    )
    return fingerprint(event)


def test_mismatch_kinds() -> None:
    assert mismatch_kind(_fp(0, 4, 10), _fp(1, 4, 10)) is None
    assert mismatch_kind(_fp(0, 4, 10), _fp(1, 4, 12)) == "callsite"
    assert mismatch_kind(_fp(0, 4, 10), _fp(1, 8, 10)) == "mismatch"


def test_mismatch_text_names_both_sides_lowest_rank_first() -> None:
    assert mismatch_text(_fp(1, 4096, 16), _fp(0, 1024, 13)) == (
        "rank 0 all_reduce(float32[1024]) at train.py:13 vs rank 1 all_reduce(float32[4096]) at train.py:16 "
        "(group 0, #1)"
    )


def _blocked(rank: int, group: str, line: int) -> dict[str, object]:
    return dict(_fp(rank, 8, line, group=group), since=0.0)


def test_cross_group_cycle() -> None:
    positions: dict[int, Position | None] = {
        0: Position(0, 10.0, issued={"1": 1}, inflight=[_blocked(0, "1", 12)]),
        1: Position(1, 10.0, issued={"2": 1}, inflight=[_blocked(1, "2", 15)]),
    }
    cycle = find_wait_cycle(positions)
    assert [(rank, blocked["g"]) for rank, blocked in cycle] == [(0, "1"), (1, "2")]
    assert "wait cycle:" in stall_text(0, _blocked(0, "1", 12), positions, now=10.0)


def test_stall_names_missing_rank_and_where_it_is() -> None:
    last = _fp(1, 4, 9)
    positions: dict[int, Position | None] = {
        0: Position(0, 10.0, issued={"0": 2}, inflight=[dict(_blocked(0, "0", 12), n=2)]),
        1: Position(1, 10.0, issued={"0": 1}, last=last, last_done=True),
    }
    text = stall_text(0, dict(_blocked(0, "0", 12), n=2), positions, now=10.0)
    assert "not issued by: rank 1" in text
    assert "rank 1: last all_reduce(float32[4]) at train.py:9 (group 0, #1), completed" in text
    assert "wait cycle" not in text


class _DeletingStore:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    def delete_key(self, key: str) -> bool:
        self.deleted.append(key)
        return True


def test_fingerprints_far_behind_the_newest_are_deleted_a_batch_per_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from collcheck.runtime import verify

    monkeypatch.setattr(verify, "KEY_WINDOW", 10)
    monkeypatch.setattr(verify, "PRUNE_PER_TICK", 4)
    config = verify.MonitorConfig(rank=0, verify=True, strict=False, timeout_s=5.0, world_size=2)
    monitor = verify.Monitor(config, writer=None, store_factory=None)  # type: ignore[arg-type]
    monitor._published["0"] = 17
    store = _DeletingStore()
    monitor._prune(store)
    assert store.deleted == ["fp/0/1", "fp/0/2", "fp/0/3", "fp/0/4"]
    monitor._prune(store)
    monitor._prune(store)
    assert store.deleted[-1] == "fp/0/7" and len(store.deleted) == 7  # the newest 10 are kept
    monitor._published["0"] = 18
    monitor._prune(store)
    assert store.deleted[-1] == "fp/0/8" and len(store.deleted) == 8
