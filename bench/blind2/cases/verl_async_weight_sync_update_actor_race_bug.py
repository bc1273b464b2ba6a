"""
Source: https://github.com/verl-project/verl/pull/7423
Project: verl (Megatron workers, async disaggregated training)
Reported: 2026-08
Backend: NCCL
Hang: In async training the same ActorRolloutRefWorker receives update_actor (run in a
Ray thread-pool thread) and update_weights (a coroutine on the actor's event loop). Both
issue collectives on the same PP/EP communicators: the training step's pipeline p2p and
expert all-to-all, and the weight sync's per-bucket all_gather over the EP group. Nothing
orders the two, so on one rank the weight-sync all_gather is enqueued before the training
all-to-all while on its EP partner the order is reversed; also a fast actor that finished
send_weights can start the next update_actor while slower EP partners are still inside the
all_gather loop. NCCL sequence numbers diverge and the watchdog fires.
Fix: a per-worker threading.Lock serialises update_actor and update_weights, and inside
update_weights the lock is held across an entry barrier, send_weights and an exit barrier.
"""
import asyncio
import threading

import torch
import torch.distributed as dist
from megatron.core import parallel_state as mpu

from verl.single_controller.base.decorator import Dispatch, register
from verl.workers.megatron_workers import ActorRolloutRefWorker as _BaseWorker


class ActorRolloutRefWorker(_BaseWorker):
    def __init__(self, config, role: str):
        super().__init__(config, role)
        self._bucket_size = config.rollout.update_weights_bucket_megabytes << 20

    def _iter_param_buckets(self):
        bucket, size = [], 0
        for name, p in self.actor_module.named_parameters():
            bucket.append((name, p))
            size += p.numel() * p.element_size()
            if size >= self._bucket_size:
                yield bucket
                bucket, size = [], 0
        if bucket:
            yield bucket

    async def send_weights(self):
        ep_group = mpu.get_expert_model_parallel_group()
        for bucket in self._iter_param_buckets():
            gathered = []
            for name, p in bucket:
                out = [torch.empty_like(p) for _ in range(dist.get_world_size(ep_group))]
                dist.all_gather(out, p.data, group=ep_group)
                gathered.append((name, torch.cat(out)))
            await self.rollout_client.push(gathered)

    @register(dispatch_mode=Dispatch.MEGATRON_COMPUTE_PROTO)
    def update_actor(self, data):
        # Ray thread-pool thread: forward/backward with PP p2p and EP all-to-all
        return self.actor.update_policy(data)  # DIVERGES

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    async def update_weights(self):
        # event-loop coroutine: may interleave with update_actor on this worker
        await self.send_weights()  # DIVERGES
