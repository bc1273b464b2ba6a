"""
Source: https://github.com/verl-project/verl/pull/5701
Project: verl
Reported: 2026-03
Backend: gloo
Hang: The TRT-LLM rollout adapter builds a CPU "exclude_dp" sub-group per DP replica (the TP/PP ranks of one
replica). The VLM path added a broadcast of the leader's multimodal weight-name list over that sub-group with
src=0, i.e. *global* rank 0, which only belongs to replica 0. Ranks of replica 1, 2, ... never find their
source in their own group: they fail/skip the broadcast while their peers (and the later group barrier) wait,
so multinode rollout with more than one replica hangs.
Fix: Translate group-local rank 0 to the leader's global rank with dist.get_global_rank(group, 0) and use that as src.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Generator

import ray
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from verl.workers.config import HFModelConfig, RolloutConfig
from verl.workers.rollout.base import BaseRollout

logger = logging.getLogger(__file__)


class ServerAdapter(BaseRollout):
    def __init__(self, config: RolloutConfig, model_config: HFModelConfig, device_mesh: DeviceMesh):
        super().__init__(config, model_config, device_mesh)
        self._adapter = None
        assert device_mesh.mesh_dim_names.index("dp") == 0
        # CPU mirror of the rollout mesh, used for control traffic between the ranks of one replica
        self.hybrid_device_mesh = init_device_mesh(
            "cpu", mesh_shape=device_mesh.mesh.shape, mesh_dim_names=device_mesh.mesh_dim_names
        )
        self.hybrid_device_mesh[self.hybrid_device_mesh.mesh_dim_names[1:]]._flatten(mesh_dim_name="exclude_dp")
        self.is_leader_rank = self.hybrid_device_mesh["exclude_dp"].get_local_rank() == 0
        self.replica_rank = self.hybrid_device_mesh["dp"].get_local_rank()
        self.gpu_id = ray.get_gpu_ids()[0]

    @property
    def _replica_group(self):
        return self.hybrid_device_mesh["exclude_dp"].get_group()

    def _is_multimodal(self) -> bool:
        return getattr(self.model_config, "is_vlm", False)

    async def _sync_vision_weight_names(self, names: list[str] | None) -> list[str]:
        """Leader of the replica tells its peers which vision-tower weights the server expects."""
        payload = [names if self.is_leader_rank else None]
        await asyncio.to_thread(
            dist.broadcast_object_list,
            payload,
            src=dist.get_global_rank(self._replica_group, 0),
            group=self._replica_group,
        )
        return payload[0]

    async def _vision_names_from_server(self) -> list[str]:
        await self._init_server_adapter()
        resp = await self._adapter.get_vision_weight_names()
        return list(resp.get("names", []))

    async def update_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None], **kwargs):
        vision_names = None
        if self._is_multimodal():
            if self.is_leader_rank:
                vision_names = await self._vision_names_from_server()
            vision_names = await self._sync_vision_weight_names(vision_names)

        handles = []
        for name, param in weights:
            if vision_names is not None and name.startswith("visual.") and name not in vision_names:
                continue
            handles.append((name, param.detach()))
        await self.update_weights_from_ipc_handles({str(self.gpu_id): handles})
        await asyncio.to_thread(dist.barrier, group=self._replica_group)

    async def update_weights_from_ipc_handles(self, device_handles):
        gathered = [None] * self.hybrid_device_mesh["exclude_dp"].size() if self.is_leader_rank else None
        await asyncio.to_thread(
            dist.gather_object,
            obj=device_handles,
            object_gather_list=gathered,
            group_dst=0,
            group=self._replica_group,
        )
        if self.is_leader_rank:
            merged = {k: v for d in gathered for k, v in d.items()}
            await self._adapter.update_weights(merged)

    async def _init_server_adapter(self):
        if self._adapter is None:
            actor = ray.get_actor(f"trtllm_server_{self.replica_rank}")
            self._adapter = await actor.get_http_adapter.remote()
