"""torch_npu.distributed: HCCL's own collectives."""

from torch_npu.distributed.distributed_c10d import (
    _all_gather_into_tensor_uneven as all_gather_into_tensor_uneven,
)
from torch_npu.distributed.distributed_c10d import (
    _all_to_all_vc as all_to_all_vc,
)
from torch_npu.distributed.distributed_c10d import (
    _reduce_scatter_tensor_uneven as reduce_scatter_tensor_uneven,
)

__all__ = ["all_gather_into_tensor_uneven", "all_to_all_vc", "reduce_scatter_tensor_uneven"]
