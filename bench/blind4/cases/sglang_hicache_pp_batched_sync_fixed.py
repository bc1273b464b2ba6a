"""
Source: https://github.com/bytedance-iaas/sglang/pull/677
Project: SGLang (bytedance-iaas fork, DeepSeek-V4 branch)
Reported: 2026-08
Backend: gloo
Hang: A previous change batched HiCache write/load completion counts into one all_reduce over a dedicated
all-world Gloo group, issued from every PP stage's scheduler inside check_hicache_events(). PP stages are not
in lockstep: PP0 reaches the all-world all_reduce while a downstream stage is still blocked receiving the
previous microbatch's proxy tensors from PP0 over the PP group, so PP0 waits for PP1 in the collective and PP1
waits for PP0 in the point-to-point recv (circular wait before the first prefill batch).
Fix: Drop the all-world group; only PP0 reads its ack prefix, MIN-reduces it over its attention TP group, and
the agreed counts are propagated downstream through the existing PP pipeline send/recv.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from sglang.srt.distributed import get_pp_group
from sglang.srt.mem_cache.hiradix_cache import HiRadixCache as _BaseHiRadixCache


class HiRadixCache(_BaseHiRadixCache):
    def __init__(self, params, server_args):
        super().__init__(params, server_args)
        self.pp_rank = params.pp_rank
        self.pp_size = params.pp_size
        self._completion_counts = torch.zeros(2, dtype=torch.int32)
        self._pending_pp_send = None

    # ---- local ACK inspection -------------------------------------------------
    def _ready_prefix(self, ack_queue) -> int:
        count = 0
        for ack in ack_queue:
            if not ack.finish_event.query():
                break
            count += 1
        return count

    def _sync_completion_counts(self) -> tuple[int, int]:
        pp_group = get_pp_group()
        if self.pp_rank == 0:
            # only the entry stage inspects readiness and agrees within its attention TP group
            self._completion_counts[0] = self._ready_prefix(self.cache_controller.ack_write_queue)
            self._completion_counts[1] = self._ready_prefix(self.cache_controller.ack_load_queue)
            self._all_reduce_attn_groups(self._completion_counts, dist.ReduceOp.MIN)
        else:
            # downstream stages take the decision of the previous stage, in pipeline order
            pp_group.recv(self._completion_counts, src=pp_group.prev_rank)
        if self.pp_size > 1 and not pp_group.is_last_rank:
            if self._pending_pp_send is not None:
                self._pending_pp_send.wait()
            self._pending_pp_send = pp_group.isend(self._completion_counts.clone(), dst=pp_group.next_rank)
        return int(self._completion_counts[0]), int(self._completion_counts[1])

    def _consume_acks(self, ack_queue, ongoing, n: int):
        for _ in range(n):
            ack = ack_queue.pop(0)
            ack.finish_event.synchronize()
            node = ongoing.pop(ack.node_id)
            self.dec_lock_ref(node)

    def check_hicache_events(self):
        write_n, load_n = self._sync_completion_counts()
        self._consume_acks(self.cache_controller.ack_write_queue, self.ongoing_write_through, write_n)
        self._consume_acks(self.cache_controller.ack_load_queue, self.ongoing_load_back, load_n)


class PPSchedulerMixin:
    """Simplified pipeline-parallel event loop of one scheduler process."""

    def event_loop_pp(self):
        pp_group = get_pp_group()
        while True:
            recv_reqs = self.recv_requests()
            self.process_input_requests(recv_reqs)
            if not pp_group.is_first_rank:
                # downstream stage blocks until the previous stage ships the microbatch proxies
                self.pp_proxy_tensors = pp_group.recv_tensor_dict(all_gather_group=self.attn_tp_group)
            self.tree_cache.check_hicache_events()
            batch = self.get_next_batch_to_run()
            result = self.run_batch(batch) if batch is not None else None
            if not pp_group.is_last_rank and result is not None:
                pp_group.send_tensor_dict(result.pp_hidden_states_proxy_tensors, all_gather_group=self.attn_tp_group)
