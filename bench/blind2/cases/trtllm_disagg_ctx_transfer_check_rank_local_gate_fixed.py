"""
Source: https://github.com/NVIDIA/TensorRT-LLM/pull/14020
Project: TensorRT-LLM (PyExecutor, disaggregated serving)
Reported: 2026-05
Backend: NCCL
Hang: On the context (prefill) server with TP >= 2, the executor loop calls
_check_disagg_ctx_cache_transfer_status (whose checkContextTransferStatus does a TP-wide
allgather) only when the local capacity scheduler fits no request. num_fitting_reqs is
computed from each rank's own free KV-block count, which can drift by a block between
ranks under load. On one iteration rank 0 fits 1 request and goes on to the forward (MLA
attention's TP allreduce) while rank 4 fits 0 and enters the transfer-status allgather:
half the ranks wait in one collective, half in another, and the hang detector fires.
Fix: OR-reduce the gating condition across TP ranks, so if any rank needs the transfer
check, every rank performs it.
"""
from tensorrt_llm._torch.distributed import Distributed
from tensorrt_llm._torch.pyexecutor.scheduler import ScheduledRequests


class PyExecutor:
    def __init__(self, dist: Distributed, scheduler, kv_cache_transceiver, model_engine):
        self.dist = dist
        self.scheduler = scheduler
        self.kv_cache_transceiver = kv_cache_transceiver
        self.model_engine = model_engine
        self.active_requests = []

    def _check_disagg_ctx_cache_transfer_status(self, at_least_num: int = 0):
        # C++ checkContextTransferStatus: TP-collective allgather of completed transfers
        self.kv_cache_transceiver.check_context_transfer_status(at_least_num)

    def _schedule(self) -> ScheduledRequests:
        scheduled, _, num_fitting_reqs = self.scheduler.schedule_request(self.active_requests)
        return scheduled, num_fitting_reqs

    def _executor_loop_step(self):
        scheduled_batch, num_fitting_reqs = self._schedule()  # per-rank KV capacity
        need_check = self.kv_cache_transceiver is not None and num_fitting_reqs == 0
        if self.kv_cache_transceiver is not None:
            # OR across TP ranks: if any rank must wait, all ranks do the check
            need_check = any(self.dist.tp_allgather(need_check))
        if need_check:
            # wait for at least one context transfer to free blocks
            self._check_disagg_ctx_cache_transfer_status(1)
            return None
        # forward: MLA attention TP allreduce, etc.
        return self.model_engine.forward(scheduled_batch)
