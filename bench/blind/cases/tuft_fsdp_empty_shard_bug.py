"""
Source: https://github.com/agentscope-ai/TuFT/pull/121
Project: TuFT (FSDP2 training backend, Ray actors)
Reported: 2026-06
Backend: NCCL
Hang: The controller splits an incoming batch across the FSDP actors with `_shard_list`. When the
batch has fewer samples than `world_size`, some actors receive an empty shard; such an actor
returns early from `forward_backward` without running the model, so it never joins the FSDP
all-gathers/reduce-scatters that the actors holding data are issuing. Those actors block forever.
Fix: Fail fast in the controller: raise `ValueError` when `len(data) < world_size` before anything is
dispatched, so no actor runs a partial step (the PR's fix).
"""
import ray
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def _shard_list(items, num_shards):
    """Contiguous, order-preserving split; trailing shards may be empty."""
    per = -(-len(items) // num_shards)
    return [items[i * per:(i + 1) * per] for i in range(num_shards)]


@ray.remote(num_gpus=1)
class FSDPTrainActor:
    def __init__(self, rank, world_size, model_fn, lr):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
        self.rank = rank
        self.model = model_fn().cuda()
        for block in self.model.layers:
            fully_shard(block)
        fully_shard(self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr)

    def forward_backward(self, shard):
        if len(shard) == 0:  # DIVERGES
            return {"loss": 0.0, "num_samples": 0}  # DIVERGES
        input_ids = torch.stack([s["input_ids"] for s in shard]).cuda()
        labels = torch.stack([s["labels"] for s in shard]).cuda()
        logits = self.model(input_ids)  # FSDP all-gather per block
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        loss.backward()  # FSDP reduce-scatter per block
        return {"loss": loss.item(), "num_samples": len(shard)}

    def optim_step(self):
        self.optimizer.step()
        self.optimizer.zero_grad()


class FSDPTrainingBackend:
    def __init__(self, model_config, model_fn, lr=1e-5):
        self.world_size = model_config.fsdp_num_gpus
        self.actors = [
            FSDPTrainActor.remote(r, self.world_size, model_fn, lr) for r in range(self.world_size)
        ]

    def forward_backward(self, data):
        shards = _shard_list(data, self.world_size)
        futures = [a.forward_backward.remote(s) for a, s in zip(self.actors, shards)]
        return ray.get(futures)

    def optim_step(self):
        ray.get([a.optim_step.remote() for a in self.actors])
