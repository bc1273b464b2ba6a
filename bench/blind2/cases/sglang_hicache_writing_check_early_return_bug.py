"""
Source: https://github.com/sgl-project/sglang/pull/27489
Project: SGLang (HiCache, UnifiedRadixCache)
Reported: 2026-06
Backend: NCCL
Hang: With hierarchical cache enabled, every scheduler iteration calls writing_check()
and loading_check(), which all_reduce (MIN) the number of finished write-through /
load-back acks over the TP group. Both functions first return early when the local
ongoing_write_through / ongoing_load_back dict is empty. That dict can differ per TP
rank (e.g. write_backup fails to allocate host memory on a subset of ranks), so TP0
enters the all_reduce while TP1-3 take the early return and move on to the next
iteration's broadcast_pyobj in recv_requests: mismatched collectives, watchdog kill.
Fix: drop the early returns and always enter the all_reduce; an empty rank contributes
0 to the MIN and the drain loop becomes a no-op.
"""
import torch
import torch.distributed as dist

from sglang.srt.managers.cache_controller import HiCacheController
from sglang.srt.mem_cache.radix_cache import RadixCache


class UnifiedRadixCache(RadixCache):
    def __init__(self, req_to_token_pool, token_to_kv_pool_allocator, tp_cache_group,
                 host_pool, page_size: int):
        super().__init__(req_to_token_pool, token_to_kv_pool_allocator, page_size)
        self.tp_group = tp_cache_group
        self.tp_world_size = dist.get_world_size(group=self.tp_group)
        self.cache_controller = HiCacheController(token_to_kv_pool_allocator, host_pool,
                                                  page_size, self.tp_group)
        self.ongoing_write_through = {}
        self.ongoing_load_back = {}

    def write_backup(self, node) -> int:
        host_indices = self.cache_controller.write(device_indices=node.value, node_id=node.id)
        if host_indices is None:
            # host pool exhausted on this rank only
            return 0
        self.ongoing_write_through[node.id] = node
        return len(host_indices)

    def _all_reduce_min(self, value: int) -> int:
        t = torch.tensor(value, dtype=torch.int)
        if self.tp_world_size > 1:
            dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.tp_group)
        return int(t.item())

    def writing_check(self, write_back: bool = False):
        if len(self.ongoing_write_through) == 0:
            return  # DIVERGES
        finish_count = self._all_reduce_min(self.cache_controller.ack_write_queue.qsize())
        while finish_count > 0:
            _, ack_id = self.cache_controller.ack_write_queue.get()
            node = self.ongoing_write_through.pop(ack_id)
            self.dec_lock_ref(node)
            finish_count -= 1

    def loading_check(self):
        if len(self.ongoing_load_back) == 0:
            return  # DIVERGES
        finish_count = self._all_reduce_min(self.cache_controller.ack_load_queue.qsize())
        while finish_count > 0:
            ack_id = self.cache_controller.ack_load_queue.get()
            node = self.ongoing_load_back.pop(ack_id)
            self.dec_lock_ref(node)
            finish_count -= 1

    def check_hicache_events(self):
        self.writing_check()
        self.loading_check()
