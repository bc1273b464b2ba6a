"""
Source: https://github.com/lightseekorg/tokenspeed/pull/786
Project: tokenspeed
Reported: 2026-07
Backend: NCCL
Hang: With attention DP=2 and TP=4, each DP rank's scheduler broadcasts the received requests to its TP group
with broadcast_pyobj(data, rank, group, src). The scheduler passed its TP-local rank while src is a global rank
(4 for the second DP group). On DP1 the real source (global rank 4, TP-local 0) compares 0 != 4, takes the
receiver branch and waits for a size broadcast nobody sends; the requests are dropped and the TP group stalls.
Fix: Pass the global rank to broadcast_pyobj so the source test uses the same namespace as src.
"""
import pickle

import numpy as np
import torch
import torch.distributed as dist


def broadcast_pyobj(data, rank, dist_group, src=0):
    """Broadcast a python object from global rank `src` to every member of dist_group (gloo)."""
    if rank == src:  # DIVERGES  (rank is TP-local, src is global)
        if not data:
            tensor_size = torch.tensor([0], dtype=torch.long)
            dist.broadcast(tensor_size, src=src, group=dist_group)
            return data
        serialized = pickle.dumps(data)
        size = len(serialized)
        tensor_data = torch.ByteTensor(np.frombuffer(serialized, dtype=np.uint8))
        tensor_size = torch.tensor([size], dtype=torch.long)
        dist.broadcast(tensor_size, src=src, group=dist_group)
        dist.broadcast(tensor_data, src=src, group=dist_group)
        return data
    tensor_size = torch.tensor([0], dtype=torch.long)
    dist.broadcast(tensor_size, src=src, group=dist_group)
    size = tensor_size.item()
    if size == 0:
        return []
    tensor_data = torch.empty(size, dtype=torch.uint8)
    dist.broadcast(tensor_data, src=src, group=dist_group)
    return pickle.loads(tensor_data.numpy().tobytes())


class Scheduler:
    def __init__(self, server_args, gpu_id, tp_rank, dp_rank, tp_cpu_group):
        self.server_args = server_args
        self.tp_rank = tp_rank  # rank inside this DP replica's TP group
        self.dp_rank = dp_rank
        self.attn_tp_size = server_args.tp_size // server_args.dp_size
        self.tp_cpu_group = tp_cpu_group
        self.global_rank = dist.get_rank()
        # first global rank of this DP replica's TP group
        self.entry_rank = dp_rank * self.attn_tp_size
        self.recv_from_tokenizer = None

    def _recv_from_zmq(self):
        reqs = []
        if self.global_rank == self.entry_rank and self.recv_from_tokenizer is not None:
            while self.recv_from_tokenizer.poll(0):
                reqs.append(self.recv_from_tokenizer.recv_pyobj())
        return reqs

    def recv_requests(self):
        recv_reqs = self._recv_from_zmq()
        if self.attn_tp_size > 1:
            recv_reqs = broadcast_pyobj(
                recv_reqs,
                self.tp_rank,
                self.tp_cpu_group,
                src=self.entry_rank,
            )
        return recv_reqs
