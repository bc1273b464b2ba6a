"""
Source: https://github.com/NVIDIA/TensorRT-LLM/pull/14986
Project: TensorRT-LLM (PyTorch backend)
Reported: 2026-06
Backend: NCCL
Hang: During engine warmup with attention DP, _capture_generation_cuda_graphs walks the
CUDA-graph batch sizes from largest to smallest. KV-cache capacity differs per rank, so
_create_cuda_graph_warmup_request returns None on ranks without room and those ranks
`continue`, while ranks that got a batch run forward(), which issues TP allreduce / DEP
all-to-all. The skipping ranks never reach those collectives and warmup deadlocks.
Fix: before using the batch, check across TP ranks that every rank has a warmup batch
(_assert_all_tp_ranks_have_warmup_batch, as the other warmup paths already do).
"""
import torch

from tensorrt_llm._torch.distributed import Distributed
from tensorrt_llm.mapping import Mapping


class PyTorchModelEngine:
    def __init__(self, mapping: Mapping, dist: Distributed, kv_cache_manager,
                 cuda_graph_batch_sizes, enable_attention_dp: bool):
        self.mapping = mapping
        self.dist = dist
        self.kv_cache_manager = kv_cache_manager
        self._cuda_graph_batch_sizes = cuda_graph_batch_sizes
        self.enable_attention_dp = enable_attention_dp

    def _create_cuda_graph_warmup_request(self, batch_size: int, draft_len: int):
        # Per-rank: under attention DP each rank owns its own KV cache.
        if self.kv_cache_manager.get_num_free_blocks() < batch_size:
            return None
        return self.kv_cache_manager.add_dummy_requests(list(range(batch_size)))

    def _assert_all_tp_ranks_have_warmup_batch(self, batch) -> bool:
        has_batch = self.dist.tp_allgather(batch is not None)
        if any(has_batch) and not all(has_batch):
            raise RuntimeError("warmup batch missing on some TP ranks")
        return all(has_batch)

    def forward(self, scheduled_requests, resource_manager=None):
        # attention-DP model forward: MoE uses all-to-all, dense layers allreduce
        hidden = torch.empty(len(scheduled_requests), 4096, device="cuda")
        self.dist.tp_allgather(hidden.shape[0])
        return hidden

    def _general_warmup_impl(self, resource_manager, batch_size: int):
        batch = self._create_cuda_graph_warmup_request(batch_size, 0)
        if not self._assert_all_tp_ranks_have_warmup_batch(batch):
            return
        self.forward(batch, resource_manager)

    def _capture_generation_cuda_graphs(self, resource_manager):
        for bs in sorted(self._cuda_graph_batch_sizes, reverse=True):
            batch = self._create_cuda_graph_warmup_request(bs, 0)
            if batch is None:
                continue  # DIVERGES
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                self.forward(batch, resource_manager)
            self.kv_cache_manager.free_resources(batch)
