"""
Source: https://github.com/sgl-project/sglang/pull/32210
Project: sglang (Ascend NPU backend)
Reported: 2026-07
Backend: HCCL
Hang: With attention DP and MTP on NPU, the EAGLE draft graph runner decides per rank whether it can replay the
captured NPU graph. An earlier change added a rank-local fallback to eager mode when the DSA top-k seed is not
ready. During decode warm-up a busy rank finds the seed missing and runs the draft forward eagerly, while idle
ranks replay the graph; the eager and graph paths issue different TP/EP collectives, so the ranks deadlock.
Fix: Make the decision collective: combine the local eligibility (including DSA seed readiness) with a MIN
all-reduce across the participating ranks, and replay the graph only if every rank is eligible.
"""
import torch
import torch.distributed as dist
import torch_npu  # noqa: F401

from sglang.srt.distributed import get_tp_group
from sglang.srt.speculative.eagle_draft_cuda_graph_runner import EAGLEDraftCudaGraphRunner
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class EAGLEDraftNpuGraphRunner(EAGLEDraftCudaGraphRunner):
    def __init__(self, eagle_worker):
        super().__init__(eagle_worker)
        self.enable_dp_attention = eagle_worker.server_args.enable_dp_attention
        self.tp_group = get_tp_group()

    def _dsa_seed_ready(self, forward_batch: ForwardBatch) -> bool:
        # the DSA indexer top-k seed is produced by the target model; idle batches carry none
        spec_info = forward_batch.spec_info
        return spec_info is not None and getattr(spec_info, "topk_indices", None) is not None

    def can_run_graph(self, forward_batch: ForwardBatch) -> bool:
        local_ok = super().can_run(forward_batch)
        if not self._dsa_seed_ready(forward_batch):
            local_ok = False
        if not self.enable_dp_attention:
            return local_ok
        flag = torch.tensor([1 if local_ok else 0], dtype=torch.int32, device="npu")
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.tp_group.device_group)
        return bool(flag.item())


class EAGLEWorkerNpu:
    def __init__(self, server_args, draft_model_runner):
        self.server_args = server_args
        self.draft_model_runner = draft_model_runner
        self.cuda_graph_runner = EAGLEDraftNpuGraphRunner(self)

    def draft_forward(self, forward_batch: ForwardBatch):
        # eager forward: per-layer TP all_reduce + EP dispatch/combine launched one by one
        return self.draft_model_runner.model.forward(
            forward_batch.input_ids, forward_batch.positions, forward_batch
        )

    def draft(self, forward_batch: ForwardBatch):
        if self.cuda_graph_runner.can_run_graph(forward_batch):
            return self.cuda_graph_runner.replay(forward_batch)
        return self.draft_forward(forward_batch)
