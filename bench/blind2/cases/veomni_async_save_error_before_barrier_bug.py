"""
Source: https://github.com/ByteDance-Seed/VeOmni/pull/1181
Project: VeOmni
Reported: 2026-09
Backend: gloo (async DCP group) / NCCL
Hang: Each rank has its own future for an async DCP save, so a write failure surfaces on the failing
rank only. In _drain_slot the failing rank re-raises before the dist.barrier() that its peers enter,
so the peers block in that barrier; in wait_for_pending_save the failing rank raises after the barrier
while its peers carry on into the next training collective. (Found in the PR review thread.)
Fix: After draining, reduce a "this rank failed" flag across all ranks (_any_rank_failed) so every rank
passes the barrier and then raises together.
"""
from typing import Dict, Optional

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from veomni.utils import logging

logger = logging.get_logger(__name__)


def _any_rank_failed(local_failed: bool) -> bool:
    flag = torch.tensor([1 if local_failed else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


class DistributedCheckpointer:
    # one in-flight async save per state owner ("model", "optimizer", "extra")
    _futures: Dict[str, object] = {}
    _async_process_group = None

    @classmethod
    def _drain_slot(cls, slot: str) -> None:
        future = cls._futures.pop(slot, None)
        if future is None:
            return
        rank = dist.get_rank()
        logger.info(f"[RANK {rank}] waiting for pending DCP save ({slot}) to end...")
        future.result()  # DIVERGES: raises on the failing rank only, skipping the barrier below
        if dist.is_initialized():
            dist.barrier()

    @classmethod
    def wait_for_pending_save(cls) -> None:
        rank = dist.get_rank()
        error: Optional[BaseException] = None
        for slot, future in list(cls._futures.items()):
            try:
                future.result()
            except Exception as e:  # noqa: BLE001
                logger.error(f"[RANK {rank}] pending async DCP save ({slot}) raised", exc_info=True)
                if error is None:
                    error = e
        cls._futures.clear()
        if dist.is_initialized():
            dist.barrier()
        if error is not None:  # DIVERGES: only the failing rank stops; peers go on to the next collective
            raise error

    @classmethod
    def save(cls, slot: str, state: dict, path: str) -> None:
        cls._drain_slot(slot)
        if cls._async_process_group is None:
            cls._async_process_group = dist.new_group(backend="gloo")
        cls._futures[slot] = dcp.async_save(
            state, checkpoint_id=path, process_group=cls._async_process_group
        )
