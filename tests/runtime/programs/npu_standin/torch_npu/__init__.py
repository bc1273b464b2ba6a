"""A stand-in for torch_npu's distributed side, over gloo on the CPU (no NPU needed).

It has torch_npu's structure, written for collcheck's tests: importing it registers a backend named
"hccl" through `torch.distributed.Backend.register_backend` (extended API, here for the "cpu"
device), whose objects are `torch_npu._C._distributed_c10d.ProcessGroupHCCL`; it replaces
`torch.distributed.gather`, `gather_object` and `batch_isend_irecv` (and their `distributed_c10d`
names) with functions that call the backend object directly, and `torch_npu.distributed` offers
`reduce_scatter_tensor_uneven`, `all_gather_into_tensor_uneven` and `all_to_all_vc`, which do too.
The "npu" device of torch_npu is the CPU here.
"""

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from torch_npu import npu  # noqa: F401
from torch_npu._C._distributed_c10d import ProcessGroupHCCL
from torch_npu.distributed import distributed_c10d as _npu_c10d

_backends = []  # the backend objects stay alive, so `_get_backend` returns them (and their class)


def _create_hccl(options, pg_options):
    backend = ProcessGroupHCCL(options.store, options.group_rank, options.group_size, options.timeout)
    _backends.append(backend)
    return backend


dist.Backend.register_backend("hccl", _create_hccl, extended_api=True, devices=["cpu"])

for _name, _replacement in (
    ("gather", _npu_c10d._gather),
    ("gather_object", _npu_c10d._gather_object),
    ("batch_isend_irecv", _npu_c10d._batch_isend_irecv),
):
    setattr(dist, _name, _replacement)
    setattr(c10d, _name, _replacement)
