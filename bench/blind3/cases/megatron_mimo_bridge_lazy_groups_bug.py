"""
Source: https://github.com/NVIDIA/Megatron-LM/pull/5370
Project: Megatron-LM
Reported: 2026-06
Backend: NCCL
Hang: The MIMO BridgeCommunicator (which moves activations between the encoder grid and the language-model grid)
created its P2P process group and its per-grid broadcast groups lazily, on first use. dist.new_group is a
collective over all ranks that must be called in the same order everywhere, but under the 1F1B schedule source
ranks first reach send_forward() while destination ranks first reach recv_forward()/send_backward(), so ranks
create the groups at different points and in a different order relative to their other collectives; the
schedule deadlocks at the first bridge step.
Fix: Create the bridge P2P group and both broadcast groups eagerly in the constructor, on every rank and in a
fixed order (the PR also makes the leader-side broadcasts unconditional).
"""
from typing import List, Optional

import torch
import torch.distributed as dist


class HyperCommGrid:
    def __init__(self, ranks: List[int], tp: int, dp: int):
        self.ranks = ranks
        self.tp = tp
        self.dp = dp

    def leader_ranks(self) -> List[int]:
        return [self.ranks[i * self.tp] for i in range(self.dp)]


class BridgeCommunicator:
    def __init__(self, src_grid: HyperCommGrid, dest_grid: HyperCommGrid, dim_mapping=None,
                 comm_dtype=torch.bfloat16):
        self.src_grid = src_grid
        self.dest_grid = dest_grid
        self.dim_mapping = dim_mapping or {"s": 0, "b": 1, "h": 2}
        self.comm_dtype = comm_dtype
        self.current_rank = dist.get_rank()
        self.is_src = self.current_rank in src_grid.ranks
        self.is_dest = self.current_rank in dest_grid.ranks
        self._p2p_pg: Optional[dist.ProcessGroup] = None
        self._src_bcast_pg: Optional[dist.ProcessGroup] = None
        self._dest_bcast_pg: Optional[dist.ProcessGroup] = None

    # ---- lazily materialized groups ----
    def _get_p2p_group(self):
        if self._p2p_pg is None:
            ranks = sorted(self.src_grid.leader_ranks() + self.dest_grid.leader_ranks())
            self._p2p_pg = dist.new_group(ranks=ranks)  # DIVERGES
        return self._p2p_pg

    def _get_src_bcast_group(self):
        if self._src_bcast_pg is None:
            self._src_bcast_pg = dist.new_group(ranks=self.src_grid.ranks)
        return self._src_bcast_pg

    def _get_dest_bcast_group(self):
        if self._dest_bcast_pg is None:
            self._dest_bcast_pg = dist.new_group(ranks=self.dest_grid.ranks)
        return self._dest_bcast_pg

    # ---- communication used by the 1F1B schedule ----
    def send_forward(self, tensor: torch.Tensor):
        if self.current_rank in self.src_grid.leader_ranks():
            dst = self.dest_grid.leader_ranks()[0]
            dist.send(tensor.to(self.comm_dtype), dst=dst, group=self._get_p2p_group())

    def recv_forward(self, shape) -> torch.Tensor:
        buf = torch.empty(shape, dtype=self.comm_dtype, device="cuda")
        leader = self.dest_grid.leader_ranks()[0]
        if self.current_rank == leader:
            dist.recv(buf, src=self.src_grid.leader_ranks()[0], group=self._get_p2p_group())
        dist.broadcast(buf, src=leader, group=self._get_dest_bcast_group())
        return buf

    def send_backward(self, grad: torch.Tensor):
        if self.current_rank == self.dest_grid.leader_ranks()[0]:
            dist.send(grad.to(self.comm_dtype), dst=self.src_grid.leader_ranks()[0], group=self._get_p2p_group())

    def recv_backward(self, shape) -> torch.Tensor:
        buf = torch.empty(shape, dtype=self.comm_dtype, device="cuda")
        leader = self.src_grid.leader_ranks()[0]
        if self.current_rank == leader:
            dist.recv(buf, src=self.dest_grid.leader_ranks()[0], group=self._get_p2p_group())
        dist.broadcast(buf, src=leader, group=self._get_src_bcast_group())
        return buf
