"""
Source: https://github.com/sgl-project/sglang/pull/38273
Project: SGLang (srt/mem_cache/hiradix_cache.py, HiCache storage prefetch)
Reported: 2026-09
Backend: gloo
Hang: check_prefetch_progress returns True at once when the request id is not in this rank's
  ongoing_prefetch map; otherwise it calls can_terminate_prefetch, which MAX-all-reduces the
  termination state over the TP group. ongoing_prefetch can differ between ranks for the same request
  (prefetch completion/revocation timing), so some ranks enter the all_reduce and others skip it and go
  on to the next scheduler iteration; the shared gloo group is left with mismatched collectives and all
  ranks freeze.
Fix: When the request is not in ongoing_prefetch, still join the same all_reduce with a neutral
  contribution ([1, 0]: cannot terminate, not terminated) so every rank issues the collective.
"""
import time

import torch
import torch.distributed as dist

from sglang.srt.mem_cache.radix_cache import RadixCache


class HiRadixCache(RadixCache):
    def __init__(self, params, server_args, tp_cache_group):
        super().__init__(params)
        self.tp_group = tp_cache_group
        self.tp_world_size = dist.get_world_size(group=tp_cache_group)
        self.prefetch_stop_policy = server_args.hicache_storage_prefetch_policy
        self.prefetch_timeout = 10.0
        self.ongoing_prefetch = {}

    def _sync_termination(self, can_terminate: bool, operation_terminated: bool):
        states = torch.tensor([1 - int(can_terminate), int(operation_terminated)], dtype=torch.int)
        dist.all_reduce(states, op=dist.ReduceOp.MAX, group=self.tp_group)
        return states[0].item() == 0, states[1].item() == 1

    def can_terminate_prefetch(self, operation) -> bool:
        can_terminate = True
        if self.prefetch_stop_policy == "best_effort":
            return can_terminate
        operation_terminated = operation.is_terminated()
        completed = operation.completed_tokens == len(operation.hash_value)
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        elif self.prefetch_stop_policy == "timeout":
            can_terminate = completed or (time.monotonic() - operation.start_time > self.prefetch_timeout)
        if self.tp_world_size > 1:
            can_terminate, operation_terminated = self._sync_termination(can_terminate, operation_terminated)
        return can_terminate or operation_terminated

    def check_prefetch_progress(self, req_id: str) -> bool:
        if req_id not in self.ongoing_prefetch:
            # no prefetch here, but peers may have one: join their all_reduce with a no-op value
            if self.prefetch_stop_policy != "best_effort" and self.tp_world_size > 1:
                self._sync_termination(can_terminate=False, operation_terminated=False)
            return True
        last_host_node, token_ids, host_indices, operation = self.ongoing_prefetch[req_id]
        if not self.can_terminate_prefetch(operation):
            return False
        completed_tokens, hash_value = self.cache_controller.terminate_prefetch(operation)
        self._insert_prefetched(last_host_node, token_ids, host_indices, completed_tokens, hash_value)
        del self.ongoing_prefetch[req_id]
        return True


class Scheduler:
    def _get_new_batch_prefill_raw(self):
        adder = self._make_prefill_adder()
        for req in self.waiting_queue:
            if self.enable_hicache_storage:
                if not self.tree_cache.check_prefetch_progress(req.rid):
                    continue
            adder.add_one_req(req)
        return adder.build_batch()
