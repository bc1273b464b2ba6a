"""
Source: https://github.com/hpcaitech/ColossalAI/issues/2539
Project: ColossalAI
Reported: 2023-02
Backend: NCCL
Hang: Only rank 0 constructs a ColoParameter. Building a ColoTensor without an explicit spec creates a default
ProcessGroup, whose constructor lazily calls torch.distributed.new_group (through the PyTorchProcessGroupDict
cache) for the TP/DP rank lists. new_group is collective over the world, so rank 0 blocks inside it while rank 1
never calls it and the program is stuck.
Fix: The maintainers closed it as wrong usage; the obvious fix (written here) is to construct ColoParameter
(and thus the default ProcessGroup) on every rank and only use it on rank 0.
"""
from typing import List

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


class PyTorchProcessGroupDict:
    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
            cls._instance.dict = {}
        return cls._instance

    def get(self, rank_list: List[int], backend: str = "nccl"):
        key = (backend, tuple(rank_list))
        if key not in self.dict:
            self.dict[key] = dist.new_group(ranks=rank_list, backend=backend)
        return self.dict[key]


PYTORCHPGDICT_ = PyTorchProcessGroupDict()


class ProcessGroup:
    def __init__(self, tp_degree=None, dp_degree=None):
        self._rank = dist.get_rank()
        self._rank_list = list(range(dist.get_world_size()))
        self._tp_degree = tp_degree or 1
        self._dp_degree = dp_degree or len(self._rank_list) // self._tp_degree
        for i in range(self._dp_degree):
            tp_list = [self._rank_list[i * self._tp_degree + j] for j in range(self._tp_degree)]
            PYTORCHPGDICT_.get(tp_list, "nccl")
        for j in range(self._tp_degree):
            dp_list = [self._rank_list[i * self._tp_degree + j] for i in range(self._dp_degree)]
            PYTORCHPGDICT_.get(dp_list, "nccl")


class ColoTensorSpec:
    def __init__(self, pg=None):
        self.pg = pg


class ColoParameter(torch.nn.Parameter):
    def __new__(cls, data=None, requires_grad=True, spec=None):
        if data is None:
            data = torch.empty(0)
        return torch.Tensor._make_subclass(cls, data, requires_grad)

    def __init__(self, data=None, requires_grad=True, spec=None):
        if spec is None:
            spec = ColoTensorSpec(ProcessGroup())
        self.process_group = spec.pg


def launch(config, rank, world_size, host, port, backend, verbose=False):
    dist.init_process_group(backend=backend, init_method=f"tcp://{host}:{port}",
                            rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)


def main(rank):
    launch(dict(), rank, 2, "localhost", 29999, "nccl", verbose=False)
    p = ColoParameter(torch.empty(10))
    if rank == 0:
        print(p.shape)


if __name__ == "__main__":
    mp.spawn(main, nprocs=2)
