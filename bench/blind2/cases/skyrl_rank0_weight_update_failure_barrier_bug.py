"""
Source: https://github.com/NovaSky-AI/SkyRL/pull/1737
Project: SkyRL (skyrl_train weight_sync broadcast_strategy)
Reported: 2026-06
Backend: NCCL
Hang: The legacy multi-chunk weight sync brackets the whole transfer with one layerwise-reload
initialize/finalize: rank 0 alone awaits the inference client's start_weight_update RPC, then every
training rank calls torch.distributed.barrier(). If the RPC fails on rank 0 (RPC timeout, network), rank
0 raises and never reaches the barrier while all other ranks sit in it. (Found in the PR review thread.)
Fix: Rank 0 wraps the RPC, broadcasts a success flag to every rank, and all ranks raise together on
failure instead of meeting at a barrier rank 0 cannot reach (reviewer's suggestion).
"""
from typing import Iterable

import torch
import torch.distributed

from skyrl.backends.skyrl_train.weight_sync.base import WeightChunk, WeightSyncStrategy


class BroadcastWeightSyncStrategy(WeightSyncStrategy):
    def __init__(self, inference_client, model_update_group=None):
        self._inference_client = inference_client
        self._model_update_group = model_update_group  # only rank 0 holds it

    async def _send_one_chunk(self, chunk: WeightChunk) -> None:
        rank = torch.distributed.get_rank()
        if rank == 0:
            await self._inference_client.update_named_weights(chunk.metadata())
            for tensor in chunk.tensors:
                torch.distributed.broadcast(tensor, src=0, group=self._model_update_group)

    async def _send_chunks_legacy(self, chunks: Iterable[WeightChunk]) -> None:
        rank = torch.distributed.get_rank()
        if rank == 0:
            assert self._model_update_group is not None, "Rank 0 must have model_update_group"

        # bracket the whole sync with one layerwise-reload initialize/finalize
        if rank == 0:
            await self._inference_client.start_weight_update(is_checkpoint_format=True)  # DIVERGES: may raise on rank 0 only
        torch.distributed.barrier()

        for chunk in chunks:
            await self._send_one_chunk(chunk)
            torch.distributed.barrier()

        if rank == 0:
            await self._inference_client.finish_weight_update()
        torch.distributed.barrier()
