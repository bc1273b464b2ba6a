"""
Source: https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/4985
Project: Megatron-Bridge (MIMO model provider)
Reported: 2026-07
Backend: NCCL
Hang: torch.distributed.new_group() is collective over the default group: every rank must
create the same groups in the same global order. The MIMO provider built the word- and
position-embedding groups from each rank's *own* pipeline group only (first and last stage
of the local PP group). With several PP groups (PP=2, DP=2) rank 0 creates [0, 2] while
rank 1 creates [1, 3] at the same creation ordinal, so the communicators are matched by
ordinal, not by membership: the logical groups cross-talk and an all_reduce over
[0, 2] silently sums values of all four ranks (5.0/5.0 instead of 4.0/6.0); with other
layouts the creation itself can block.
Fix: enumerate every PP subgroup of the HyperCommGrid in a stable global order, call
new_group for each derived embedding group on every rank, and keep the ones this rank
belongs to.
"""
from typing import List, Optional

import torch.distributed as dist
from megatron.core.hyper_comm_grid import HyperCommGrid


def _embedding_ranks(pp_ranks: List[int]) -> List[int]:
    return [pp_ranks[0]] if len(pp_ranks) == 1 else [pp_ranks[0], pp_ranks[-1]]


def _position_embedding_ranks(pp_ranks: List[int]) -> List[int]:
    return [pp_ranks[0]]


class MimoModelProvider:
    def __init__(self, language_grid: HyperCommGrid):
        self.grid = language_grid
        self.embd_group: Optional[dist.ProcessGroup] = None
        self.pos_embd_group: Optional[dist.ProcessGroup] = None

    def _local_pp_ranks(self) -> List[int]:
        pp_pg = self.grid.get_pg("pp")
        return dist.get_process_group_ranks(pp_pg)

    def _all_pp_rank_lists(self) -> List[List[int]]:
        # every PP subgroup of the grid, in the same order on every rank
        return self.grid._gen_rank_enum(["pp"])

    def build_embedding_groups(self) -> None:
        rank = dist.get_rank()
        pp_ranks = self._local_pp_ranks()  # differs per PP group
        # one new_group call per kind, each rank passing its *own* rank list
        pos_ranks = _position_embedding_ranks(pp_ranks)
        pos_group = dist.new_group(ranks=pos_ranks)  # DIVERGES
        if rank in pos_ranks:
            self.pos_embd_group = pos_group
        embd_ranks = _embedding_ranks(pp_ranks)
        embd_group = dist.new_group(ranks=embd_ranks)  # DIVERGES
        if rank in embd_ranks:
            self.embd_group = embd_group

    def allreduce_word_embedding_grads(self, grad) -> None:
        if self.embd_group is not None:
            dist.all_reduce(grad, group=self.embd_group)
