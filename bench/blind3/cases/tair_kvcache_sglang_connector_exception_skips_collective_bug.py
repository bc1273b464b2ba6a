"""
Source: https://github.com/alibaba/tair-kvcache/pull/102
Project: tair-kvcache (sglang connector)
Reported: 2026-04
Backend: NCCL (gloo in the PR's tests)
Hang: In the sglang HiCache connector only TP rank 0 talks to the KV-cache manager over gRPC
(start_write_cache / finish_write_cache) and then shares the outcome with the other TP ranks through a broadcast
and an all_reduce. When a manager call raised on rank 0, the exception propagated before rank 0 reached those
collectives, so the other TP ranks waited in broadcast/all_reduce forever.
Fix: Wrap each manager API call in try/except on rank 0 and always run the broadcast/all_reduce, sending a
failure marker so every rank takes the same graceful-error path.
"""
import torch
import torch.distributed as dist

from tair_kvcache.manager_client import ManagerClient


class TairKVCacheStorage:
    def __init__(self, tp_rank, tp_group, manager_addr):
        self.tp_rank = tp_rank
        self.tp_group = tp_group
        self.is_leader = tp_rank == 0
        self.client = ManagerClient(manager_addr) if self.is_leader else None

    def _broadcast_obj(self, obj):
        holder = [obj]
        dist.broadcast_object_list(holder, src=0, group=self.tp_group)
        return holder[0]

    def batch_set(self, keys, host_indices, kv_pool):
        # 1. leader asks the manager where to write
        locations = None
        if self.is_leader:
            locations = self.client.start_write_cache(keys)  # DIVERGES  (raises on rank 0 only)
        locations = self._broadcast_obj(locations)
        if not locations:
            return [False] * len(keys)

        # 2. every TP rank writes its own shard of the KV pages
        ok = kv_pool.write_pages(host_indices, locations)
        status = torch.tensor([1 if ok else 0], dtype=torch.int32)
        dist.all_reduce(status, op=dist.ReduceOp.MIN, group=self.tp_group)

        # 3. leader commits
        committed = True
        if self.is_leader:
            committed = self.client.finish_write_cache(keys, success=bool(status.item()))  # DIVERGES
        committed = self._broadcast_obj(committed)
        return [bool(status.item()) and committed] * len(keys)
