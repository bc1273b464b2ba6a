"""
Source: https://github.com/verl-project/verl/pull/1482
Project: verl (AsyncSGLangRollout / SGLang rollout worker)
Reported: 2025-05
Backend: NCCL
Hang: The rollout shares generation results inside each tensor-parallel group with SGLang's
`broadcast_pyobj`. After SGLang changed that helper to decide "am I the sender" by `rank == src`
with `src` a *global* rank, verl still passed its TP-local rank (`self._tp_rank`) while passing the
global rank of the TP group's first member as `src`. In every TP group except the first (dp > 1),
no process matches, so all members take the receiver path and wait in `dist.broadcast` for a
sender that never sends.
Fix: Pass the global rank (`self._rank`) to `broadcast_pyobj`, matching the global `src`.
"""
import pickle

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh


def broadcast_pyobj(data, rank, dist_group=None, src=0, force_cpu_device=True):
    """SGLang helper (after the PP change): sender is the process whose `rank` equals `src`."""
    device = torch.device("cpu" if force_cpu_device else "cuda")
    if rank == src:
        serialized = pickle.dumps(data)
        size = torch.tensor([len(serialized)], dtype=torch.long, device=device)
        payload = torch.ByteTensor(np.frombuffer(serialized, dtype=np.uint8)).to(device)
        dist.broadcast(size, src=src, group=dist_group)
        dist.broadcast(payload, src=src, group=dist_group)
        return data
    size = torch.tensor([0], dtype=torch.long, device=device)
    dist.broadcast(size, src=src, group=dist_group)
    payload = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.broadcast(payload, src=src, group=dist_group)
    return pickle.loads(payload.cpu().numpy().tobytes())


class AsyncSGLangRollout:
    def __init__(self, config, tensor_parallel_size):
        self.config = config
        self._rank = dist.get_rank()
        world_size = dist.get_world_size()
        self._device_mesh_cpu = init_device_mesh(
            "cpu",
            mesh_shape=(world_size // tensor_parallel_size, tensor_parallel_size),
            mesh_dim_names=["dp", "tp"],
        )
        self._tp_rank = self._device_mesh_cpu["tp"].get_local_rank()
        self._tp_size = tensor_parallel_size
        self._engine = None  # created only on tp rank 0 in the real worker

    def _generate_on_tp_leader(self, prompts):
        if self._tp_rank == 0:
            return self._engine.generate(prompts, sampling_params=self.config.sampling_params)
        return None

    def generate_sequences(self, prompts):
        output = self._generate_on_tp_leader(prompts)
        tp_mesh = self._device_mesh_cpu["tp"]
        [output] = broadcast_pyobj(
            data=[output],
            rank=self._rank,
            dist_group=tp_mesh.get_group(),
            src=tp_mesh.mesh[0].item(),  # global rank of the TP leader
            force_cpu_device=False,
        )
        return output
