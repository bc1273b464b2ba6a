"""
Source: https://github.com/meta-pytorch/torchrec/pull/4158 (same symptom reported in https://github.com/meta-pytorch/torchrec/issues/1014)
Project: torchrec
Reported: 2026-04
Backend: NCCL
Hang: TrainPipelineSparseDist prefetches batches and launches the sparse input_dist all-to-all for each batch it
enqueues. When the dataloader is not wrapped in a full-sync datapipe, ranks can hold different numbers of
batches (typical for eval). The rank whose iterator is exhausted first stops enqueuing/progressing, so it never
issues the input_dist all-to-all for the next batch, while the other ranks enter it and wait until the NCCL
watchdog fires.
Fix: Opt-in sync_dataloader_exhaustion: each progress() does a 1-element gloo all_reduce(MIN) of the batch
count (INT_MAX if not exhausted) so all ranks learn when any rank ran dry and truncate their queues to the same
length, draining with matched collectives.
"""
from typing import Deque, Iterator, Optional
from collections import deque

import torch
import torch.distributed as dist

from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.train_pipeline.utils import _start_data_dist, _wait_for_batch


class TrainPipelineSparseDist:
    def __init__(self, model: DistributedModelParallel, optimizer, device: torch.device,
                 execute_all_batches: bool = True):
        self._model = model
        self._optimizer = optimizer
        self._device = device
        self._execute_all_batches = execute_all_batches
        self.batches: Deque = deque()
        self.contexts: Deque = deque()
        self._dataloader_exhausted = False
        self._pipelined_modules = []

    def _next_batch(self, dataloader_iter: Iterator) -> Optional[object]:
        if self._dataloader_exhausted:
            return None
        try:
            return next(dataloader_iter)
        except StopIteration:
            self._dataloader_exhausted = True  # per-rank event
            return None

    def enqueue_batch(self, dataloader_iter: Iterator) -> bool:
        batch = self._next_batch(dataloader_iter)
        if batch is None:
            return False  # DIVERGES  (this rank launches no input_dist for the next slot)
        batch = batch.to(self._device, non_blocking=True)
        context = object()
        _start_data_dist(self._pipelined_modules, batch, context)  # sparse all_to_all over the sharding PG
        self.batches.append(batch)
        self.contexts.append(context)
        return True

    def fill_pipeline(self, dataloader_iter: Iterator) -> None:
        if self.batches:
            return
        self.enqueue_batch(dataloader_iter)
        self.enqueue_batch(dataloader_iter)

    def progress(self, dataloader_iter: Iterator):
        self.fill_pipeline(dataloader_iter)
        if not self.batches:
            raise StopIteration
        self.enqueue_batch(dataloader_iter)
        batch = self.batches.popleft()
        context = self.contexts.popleft()
        _wait_for_batch(batch, context)
        with torch.no_grad() if not self._model.training else torch.enable_grad():
            losses, output = self._model(batch)  # embedding lookups: output_dist all_to_all
        if self._model.training:
            torch.sum(losses).backward()
            self._optimizer.step()
        return output
