"""
Source: https://github.com/Lightning-AI/litData/issues/233
Project: litData (Lightning-AI; PyTorch Lightning / Fabric ecosystem)
Reported: 2024-07
Backend: gloo
Hang: StreamingDataset first hands whole chunks to each rank and only then splits a rank's samples over its
dataloader workers. Because chunks hold different numbers of items, ranks end up with different sample counts and
drop_last is applied per worker, so each rank's StreamingDataLoader yields a different number of batches. In a
Fabric/DDP loop every batch ends in a gradient all-reduce; the ranks with extra batches wait in that all-reduce
(or the epoch-end barrier) for ranks that already finished the epoch.
Fix: Assign samples directly across the combined (ranks x workers) world and trim every worker to the same
number of samples when drop_last is set, so every rank yields the same number of batches (litData PR #237).
"""
from typing import Any, List, Tuple

import torch
from lightning.fabric import Fabric
from litdata import StreamingDataLoader, StreamingDataset, TokensLoader
from litdata.streaming.shuffle import Shuffle
from litdata.utilities.env import _DistributedEnv


def _associate_chunks_and_intervals_to_ranks(
    distributed_env: _DistributedEnv, indexes: List[int], chunk_intervals: List[Tuple[int, int, int, int]]
):
    """Whole chunks are dealt round-robin to ranks: item counts per rank depend on chunk sizes."""
    chunks_per_ranks: List[List[int]] = [[] for _ in range(distributed_env.world_size)]
    intervals_per_ranks: List[List[Tuple[int, int, int, int]]] = [[] for _ in range(distributed_env.world_size)]
    for i, (chunk_index, interval) in enumerate(zip(indexes, chunk_intervals)):
        rank = i % distributed_env.world_size
        chunks_per_ranks[rank].append(chunk_index)
        intervals_per_ranks[rank].append(interval)
    return chunks_per_ranks, intervals_per_ranks


class NoShuffle(Shuffle):
    def get_chunks_and_intervals_per_ranks(self, distributed_env: _DistributedEnv, current_epoch: int):
        chunk_intervals = self.cache.get_chunk_intervals()
        indexes = list(range(len(chunk_intervals)))
        return _associate_chunks_and_intervals_to_ranks(distributed_env, indexes, chunk_intervals)

    def get_len(self, distributed_env: _DistributedEnv, current_epoch: int) -> int:
        _, intervals_per_ranks = self.get_chunks_and_intervals_per_ranks(distributed_env, current_epoch)
        items_per_process = [sum(end - begin for _, begin, end, _ in intervals) for intervals in intervals_per_ranks]
        return items_per_process[distributed_env.global_rank]


class RankStreamingDataset(StreamingDataset):
    def _worker_slices(self, worker_id: int, num_workers: int, batch_size: int) -> List[int]:
        _, intervals_per_ranks = self.shuffler.get_chunks_and_intervals_per_ranks(
            self.distributed_env, self.current_epoch
        )
        my_intervals = intervals_per_ranks[self.distributed_env.global_rank]  # DIVERGES: per-rank item count
        indices = [i for _, begin, end, _ in my_intervals for i in range(begin, end)]
        worker_indices = indices[worker_id::num_workers]
        if self.drop_last:
            worker_indices = worker_indices[: len(worker_indices) - len(worker_indices) % batch_size]
        return worker_indices

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker_id, num_workers = (info.id, info.num_workers) if info else (0, 1)
        for index in self._worker_slices(worker_id, num_workers, self.batch_size):
            yield self.cache[index]


def train(fabric: Fabric, model: torch.nn.Module, optimizer: Any, input_dir: str) -> None:
    dataset = RankStreamingDataset(input_dir=input_dir, item_loader=TokensLoader(block_size=10), drop_last=True)
    dataloader = StreamingDataLoader(dataset, batch_size=2, num_workers=1, drop_last=True)
    model, optimizer = fabric.setup(model, optimizer)
    for batch in dataloader:  # DIVERGES: number of iterations differs per rank
        loss = model(batch.float()).sum()
        fabric.backward(loss)  # DDP gradient all-reduce
        optimizer.step()
        optimizer.zero_grad()
    fabric.barrier()


def main():
    fabric = Fabric(accelerator="cpu", devices=4)
    fabric.launch()
    model = torch.nn.Linear(10, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train(fabric, model, optimizer, "data/fake-data")
