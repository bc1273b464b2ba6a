"""ProcessGroupHCCL, standing in over gloo: gloo's collectives plus HCCL's own entry points."""

import torch
from torch._C._distributed_c10d import AllreduceOptions, AllToAllOptions, ProcessGroupGloo


class _Done:
    """What batch_isend_irecv returns here: waits for every transfer of the batch."""

    def __init__(self, works):
        self._works = works

    def wait(self, timeout=None):
        for work in self._works:
            work.wait()
        return True


class ProcessGroupHCCL(ProcessGroupGloo):
    def batch_isend_irecv(self, op_type, tensors, remote_rank_list):
        works = []
        for kind, tensor, peer in zip(op_type, tensors, remote_rank_list, strict=True):
            if kind == "isend":
                works.append(ProcessGroupGloo.send(self, [tensor], peer, 0))
            else:
                works.append(ProcessGroupGloo.recv(self, [tensor], peer, 0))
        return _Done(works)

    def reduce_scatter_tensor_uneven(self, output, input, input_split_sizes, opts):
        sizes = list(input_split_sizes) or [input.shape[0] // self.size()] * self.size()
        total = input.clone()
        options = AllreduceOptions()
        options.reduceOp = opts.reduceOp
        work = ProcessGroupGloo.allreduce(self, [total], options)
        work.wait()
        start = sum(sizes[: self.rank()])
        output.copy_(total[start : start + sizes[self.rank()]])
        return work

    def all_gather_into_tensor_uneven(self, output, input, output_split_sizes):
        sizes = list(output_split_sizes) or [output.shape[0] // self.size()] * self.size()
        longest = max(sizes)
        padded = torch.zeros((longest, *input.shape[1:]), dtype=input.dtype)
        padded[: input.shape[0]] = input
        gathered = torch.empty((longest * self.size(), *input.shape[1:]), dtype=input.dtype)
        work = ProcessGroupGloo._allgather_base(self, gathered, padded)
        work.wait()
        start = 0
        for rank, size in enumerate(sizes):
            output[start : start + size] = gathered[rank * longest : rank * longest + size]
            start += size
        return work

    def alltoallvc(self, output, input, send_count_matrix):
        n, me = self.size(), self.rank()
        send = [int(count) for count in send_count_matrix[me * n : (me + 1) * n]]
        receive = [int(send_count_matrix[source * n + me]) for source in range(n)]
        return ProcessGroupGloo.alltoall_base(self, output, input, receive, send, AllToAllOptions())
