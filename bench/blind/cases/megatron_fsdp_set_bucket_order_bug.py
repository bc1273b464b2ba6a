"""
Source: https://github.com/NVIDIA/Megatron-LM/pull/2218
Project: Megatron-LM (megatron.core.distributed.fsdp, Megatron-FSDP)
Reported: 2025-11
Backend: NCCL
Hang: Megatron-FSDP collected the gradient buckets that became ready in a Python set and then issued one
  reduce_scatter per bucket while iterating over that set. Set iteration order over bucket objects
  depends on per-process hashing/insertion history, so different DP ranks reduce-scatter the buckets
  in different orders; when buckets have different sizes the ranks' reduce_scatter calls no longer
  match and training hangs (rarely, only for some model configurations).
Fix: Keep the ready buckets in an ordered container and reduce them in a deterministic (bucket-id)
  order on every rank.
"""
from typing import Dict, List

import torch
import torch.distributed as dist

from megatron.core.distributed.fsdp.src.megatron_fsdp.param_and_grad_buffer import (
    DataParallelBuffer,
    ParamAndGradBuffer,
)


class _Bucket:
    def __init__(self, bucket_id: int, params: List[torch.nn.Parameter], grad_buffer: DataParallelBuffer):
        self.bucket_id = bucket_id
        self.params = params
        self.grad_buffer = grad_buffer


class GradReducePipeline:
    def __init__(self, param_and_grad_buffer: ParamAndGradBuffer, rs_stream: torch.cuda.Stream):
        self.buffer = param_and_grad_buffer
        self.rs_stream = rs_stream
        self.param_to_bucket: Dict[torch.nn.Parameter, _Bucket] = param_and_grad_buffer.param_to_bucket
        self._ready_params: Dict[int, set] = {}

    def _mark_ready(self, param) -> _Bucket | None:
        bucket = self.param_to_bucket[param]
        ready = self._ready_params.setdefault(bucket.bucket_id, set())
        ready.add(param)
        if len(ready) == len(bucket.params):
            del self._ready_params[bucket.bucket_id]
            return bucket
        return None

    def reduce_gradients(self, params: List[torch.nn.Parameter], suggested_queue_capacity: int = 2):
        ready_buckets = set()
        for param in params:
            bucket = self._mark_ready(param)
            if bucket is not None:
                ready_buckets.add(bucket)
        with torch.cuda.stream(self.rs_stream):
            for bucket in ready_buckets:  # DIVERGES
                self._reduce_scatter_bucket(bucket)

    def _reduce_scatter_bucket(self, bucket: _Bucket):
        grad_buffer = bucket.grad_buffer
        full = grad_buffer.get_bucket_full_tensor(bucket.bucket_id)
        shard = grad_buffer.get_shard_from_local_buffer(bucket.bucket_id)
        dist.reduce_scatter_tensor(output=shard, input=full, op=dist.ReduceOp.SUM,
                                   group=grad_buffer.data_parallel_group)


def register_post_backward_hooks(module: torch.nn.Module, pipeline: GradReducePipeline):
    def _post_backward(mod, *unused):
        params = [p for p in mod.parameters(recurse=False) if p.requires_grad]
        pipeline.reduce_gradients(params)

    for sub in module.modules():
        sub.register_full_backward_hook(_post_backward)
