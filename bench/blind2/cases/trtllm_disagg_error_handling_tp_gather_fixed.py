"""
Source: https://github.com/NVIDIA/TensorRT-LLM/pull/13902
Project: TensorRT-LLM (PyTorch backend, PyExecutor, disaggregated serving with attention DP)
Reported: 2026-05
Backend: MPI (TP collectives of the executor) / NCCL underneath
Hang: With attention DP, a NIXL/UCX KV-transfer failure is seen only by the DP rank whose request
failed. That rank enters _check_cache_transfer_errors -> _handle_errors -> _enqueue_responses, which
issues tp_gather; the ranks without a local error go on to _can_queue, which issues tp_allgather. Two
different collectives on the same TP group: both sides wait forever (one rank in tp_gather, fifteen in
tp_allgather in the dep16 repro).
Fix: At the top of every executor loop iteration, tp_allgather a "have local errors" flag and, if any
rank has one, let all ranks call _handle_errors together (each with its possibly empty list).
"""
from typing import List

from tensorrt_llm._torch.pyexecutor.llm_request import LlmRequest, LlmRequestState
from tensorrt_llm.logger import logger


class PyExecutor:
    def __init__(self, dist, kv_cache_transceiver, scheduler, enable_attention_dp: bool):
        self.dist = dist  # MPIDist / TorchDist wrapper: tp_gather, tp_allgather, ...
        self.kv_cache_transceiver = kv_cache_transceiver
        self.scheduler = scheduler
        self.enable_attention_dp = enable_attention_dp
        self.active_requests: List[LlmRequest] = []
        self.is_shutdown = False

    # ---- response path -------------------------------------------------
    def _enqueue_responses(self, responses):
        if self.enable_attention_dp and self.dist.world_size != 1:
            gathered = self.dist.tp_gather(responses)  # collective on the TP group
            if self.dist.rank == 0 and gathered:
                for resp_list in gathered:
                    self._publish(resp_list)
        else:
            self._publish(responses)

    def _publish(self, responses):
        for r in responses:
            logger.debug(f"response {r}")

    def _handle_errors(self, error_msg: str, requests: List[LlmRequest]):
        responses = []
        for req in requests:
            req.state = LlmRequestState.GENERATION_COMPLETE
            responses.append((req.py_request_id, error_msg))
            self.active_requests.remove(req)
        self._enqueue_responses(responses)

    def _check_cache_transfer_errors(self, where: str):
        error_requests = [
            req for req in self.active_requests if req.state == LlmRequestState.DISAGG_TRANS_ERROR
        ]
        if error_requests:
            self._handle_errors(f"KV cache transfer error ({where})", error_requests)

    def _handle_disagg_cache_errors_synced(self, where: str):
        local_error_requests = [
            req for req in self.active_requests if req.state == LlmRequestState.DISAGG_TRANS_ERROR
        ]
        if not (self.enable_attention_dp and self.dist.world_size != 1):
            if local_error_requests:
                self._handle_errors(f"KV cache transfer error ({where})", local_error_requests)
            return
        any_error = self.dist.tp_allgather(bool(local_error_requests))
        if not any(any_error):
            return
        # every rank enters _handle_errors (and hence tp_gather) together
        self._handle_errors(f"KV cache transfer error ({where})", local_error_requests)

    # ---- scheduling path -----------------------------------------------
    def _can_queue(self, scheduled_batch) -> bool:
        if self.enable_attention_dp:
            num_tokens = [len(scheduled_batch)]
            all_counts = self.dist.tp_allgather(num_tokens)  # collective on the TP group
            return sum(c[0] for c in all_counts) > 0
        return len(scheduled_batch) > 0

    def _executor_loop_overlap(self):
        while not self.is_shutdown:
            self._handle_disagg_cache_errors_synced("executor loop")
            scheduled_batch = self.scheduler.schedule(self.active_requests)
            if not self._can_queue(scheduled_batch):
                continue
            self._forward_step(scheduled_batch)

    def _forward_step(self, batch):
        self.kv_cache_transceiver.check_context_transfer_status(0)
