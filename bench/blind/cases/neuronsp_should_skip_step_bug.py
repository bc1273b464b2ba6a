"""
Source: https://github.com/dylanyunlon/Neuron_SP/issues/154
Project: Neuron_SP (DeepSpeed-based desloc_engine with a Megatron-style DistributedOptimizer)
Reported: 2026-07
Backend: NCCL
Hang: After forward/backward and grad clipping, the engine asks a per-rank grad-norm skip
controller whether to skip the step and calls `optimizer.step()` only `if not _should_skip`. The
distributed optimizer's step starts with a reduce-scatter of gradients over the data-parallel group.
When the controller's (rank-local) decision differs, the stepping rank waits in
`reduce_scatter_tensor` for a rank that skipped the step and went on to the next micro-batch.
Fix: The thread does not show the final patch; the obvious fix written here makes the skip decision
collective (all-reduce MAX of the skip flag over the DP group) so every rank skips or steps together.
"""
import math

import torch
import torch.distributed as dist


class HeteroGradNormSkipController:
    """Skips a step when this rank's grad norm spikes above a running mean."""

    def __init__(self, spike_factor=5.0, warmup=20):
        self.spike_factor = spike_factor
        self.warmup = warmup
        self.history = []

    def should_skip(self, grad_norm: float) -> bool:
        skip = False
        if math.isnan(grad_norm) or math.isinf(grad_norm):
            skip = True
        elif len(self.history) >= self.warmup:
            mean = sum(self.history[-self.warmup:]) / self.warmup
            skip = grad_norm > self.spike_factor * mean
        if not skip:
            self.history.append(grad_norm)
        return skip


class DistributedOptimizer:
    def __init__(self, optimizer, data_parallel_group):
        self.optimizer = optimizer
        self.data_parallel_group = data_parallel_group

    def _reduce_scatter_grads(self):
        for bucket in self.optimizer.grad_buckets:
            dist.reduce_scatter_tensor(bucket.shard, bucket.grad_data, group=self.data_parallel_group)

    def step(self):
        self._reduce_scatter_grads()
        self.optimizer.step()
        for bucket in self.optimizer.grad_buckets:
            dist.all_gather_into_tensor(bucket.param_data, bucket.param_shard, group=self.data_parallel_group)


class DeslocEngine:
    def __init__(self, model, optimizer: DistributedOptimizer, dp_group, clip=1.0):
        self.model = model
        self.optimizer = optimizer
        self.dp_group = dp_group
        self.clip = clip
        self.skip_controller = HeteroGradNormSkipController()

    def _local_grad_norm(self):
        grads = [p.grad.detach().float().norm() for p in self.model.parameters() if p.grad is not None]
        return torch.stack(grads).norm().item() if grads else 0.0

    def train_step(self, micro_batches):
        for mb in micro_batches:
            loss = self.model(**mb).loss / len(micro_batches)
            loss.backward()
        gnorm = self._local_grad_norm()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        _should_skip = self.skip_controller.should_skip(gnorm)
        if not _should_skip:  # DIVERGES
            self.optimizer.step()  # DIVERGES
        self.model.zero_grad(set_to_none=True)
        return gnorm, _should_skip
