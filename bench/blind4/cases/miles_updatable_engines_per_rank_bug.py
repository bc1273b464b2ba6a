"""
Source: https://github.com/radixark/miles/pull/947
Project: miles (radixark; slime-derived RL trainer, Megatron actor + SGLang rollout engines)
Reported: 2026-04
Backend: NCCL (+ gloo barrier)
Hang: Every training actor rank asks the rollout manager on its own for the updatable engines and the
number of newly added engines, and only the ranks that see num_new_engines > 0 enter
connect_rollout_engines (which builds the NCCL groups towards the engines) followed by a gloo barrier.
The engine info is mutated by another coroutine of the rollout manager (engine recovery / clearing the
new-engine counter), so ranks that query at slightly different times can get different answers: some
ranks create groups and wait in the barrier while others skip straight into the weight broadcast.
Fix: query get_updatable_engines_and_lock once in the RayTrainGroup driver and pass the same result to
every actor rank, so all ranks take the same branch.
"""
import ray
import torch.distributed as dist

from miles.utils.distributed_utils import get_gloo_group


class MegatronTrainRayActor:
    def __init__(self, args, rollout_manager, weight_updater):
        self.args = args
        self.rollout_manager = rollout_manager
        self.weight_updater = weight_updater

    def update_weights(self) -> None:
        if self.args.debug_train_only or self.args.debug_rollout_only:
            return
        if self.args.use_fault_tolerance:
            if dist.get_rank() == 0:
                ray.get(self.rollout_manager.recover_updatable_engines.remote())
            dist.barrier(group=get_gloo_group())

        # each rank fetches the engine view itself; the manager may change it concurrently
        rollout_engines, rollout_engine_lock, num_new_engines, gpu_counts, gpu_offsets = ray.get(
            self.rollout_manager.get_updatable_engines_and_lock.remote())

        if num_new_engines > 0:  # DIVERGES
            self.weight_updater.connect_rollout_engines(
                rollout_engines, rollout_engine_lock,
                engine_gpu_counts=gpu_counts, engine_gpu_offsets=gpu_offsets)
            dist.barrier(group=get_gloo_group())
            if dist.get_rank() == 0:
                ray.get(self.rollout_manager.clear_updatable_num_new_engines.remote())

        self.weight_updater.update_weights()


class RayTrainGroup:
    def __init__(self, args, actor_handlers, rollout_manager):
        self.args = args
        self._actor_handlers = actor_handlers
        self.rollout_manager = rollout_manager

    async def _broadcast(self, method: str, *args, **kwargs):
        refs = [getattr(a, method).remote(*args, **kwargs) for a in self._actor_handlers]
        return await asyncio_gather(refs)

    async def update_weights(self):
        """Broadcast weights from rank 0 to all other ranks."""
        await self._broadcast("update_weights")


async def asyncio_gather(refs):
    import asyncio
    return await asyncio.gather(*refs)
