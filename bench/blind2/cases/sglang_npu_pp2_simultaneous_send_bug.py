"""
Source: https://github.com/sgl-project/sglang/pull/38249
Project: SGLang (Ascend NPU)
Reported: 2026-09
Backend: HCCL
Hang: With pipeline parallelism of size 2 on NPU, in the same loop iteration stage 0
sends the proxy (intermediate) tensors to stage 1 while stage 1, the last stage, sends
the previous micro-batch's output back to stage 0. Each side issues its blocking send
first and only then posts the matching recv, so both stages sit in send waiting for a
receiver that is itself stuck in send; on HCCL the pair never completes.
Fix: build the send and the recv as P2POp pairs and issue them together with
dist.batch_isend_irecv, so the simultaneous sends cannot block each other.
"""
import torch
import torch.distributed as dist
import torch_npu  # noqa: F401

from sglang.srt.distributed import get_pp_group


class PPStageComm:
    """Point-to-point traffic between neighbouring pipeline stages."""

    def __init__(self, hidden_size: int, device: str = "npu"):
        self.pp_group = get_pp_group()
        self.pp_rank = self.pp_group.rank_in_group
        self.pp_size = self.pp_group.world_size
        self.hidden_size = hidden_size
        self.device = device

    @property
    def next_rank(self) -> int:
        return self.pp_group.ranks[(self.pp_rank + 1) % self.pp_size]

    @property
    def prev_rank(self) -> int:
        return self.pp_group.ranks[(self.pp_rank - 1) % self.pp_size]

    def send_proxy(self, proxy: torch.Tensor) -> None:
        dist.send(proxy, dst=self.next_rank, group=self.pp_group.device_group)

    def recv_proxy(self, num_tokens: int) -> torch.Tensor:
        buf = torch.empty(num_tokens, self.hidden_size, device=self.device)
        dist.recv(buf, src=self.prev_rank, group=self.pp_group.device_group)
        return buf

    def send_output(self, next_token_ids: torch.Tensor) -> None:
        # last stage -> first stage
        dist.send(next_token_ids, dst=self.next_rank, group=self.pp_group.device_group)

    def recv_output(self, batch_size: int) -> torch.Tensor:
        buf = torch.empty(batch_size, dtype=torch.int64, device=self.device)
        dist.recv(buf, src=self.prev_rank, group=self.pp_group.device_group)
        return buf


class SchedulerPPMixin:
    def event_loop_pp_step(self, comm: PPStageComm, mb_proxy: torch.Tensor,
                           last_output: torch.Tensor, num_tokens: int, batch_size: int):
        if comm.pp_rank == 0:
            # first stage: push this micro-batch forward, then collect an output
            comm.send_proxy(mb_proxy)  # DIVERGES
            out = comm.recv_output(batch_size)
            return out
        else:
            # last stage (pp=2): push last output back, then take the next proxy
            comm.send_output(last_output)  # DIVERGES
            proxy = comm.recv_proxy(num_tokens)
            return proxy
