"""
Source: https://github.com/vllm-project/vllm-ascend/issues/14121
Project: vllm-ascend (AscendStore KV pool, MemCache backend)
Reported: 2026-08
Backend: HCCL
Hang: The MemCache store is created lazily on the first real request, and creating it
joins the TP ranks into a shared BM group (a group-wide rendezvous). Each TP rank checks
its own init result with a bare assert; a rank that gets a non-zero code fails its save,
stays uninitialized and retries the join on the next request, while the ranks that
succeeded never call init again and go straight into the model's TP collectives. The
ranks now issue different operations in different order (BM join vs. HCCL all_reduce),
so the prefill engines time out (EI0002/507034) and die.
Fix: Thread gives no merged fix; the obvious one (suggested in the report) is to agree on
the init result across the TP group before anyone moves on, so all ranks fail or succeed
together.
"""
import threading
from typing import Optional

import torch
import torch.distributed as dist
import torch_npu  # noqa: F401
from vllm.config import ParallelConfig
from vllm.distributed.parallel_state import get_tp_group
from vllm.logger import init_logger

logger = init_logger(__name__)


class DistributedObjectStore:  # provided by the memcache python package
    def init(self, local_rank: int, init_bm: bool = True) -> int: ...
    def put(self, key: str, addr: int, size: int) -> int: ...
    def register_buffer(self, ptr: int, size: int) -> None: ...


class MemcacheBackend:
    def __init__(self, parallel_config: ParallelConfig, lazy_init: bool = False):
        self.local_rank = parallel_config.rank % parallel_config.tensor_parallel_size
        self._init_bm = True
        self._lazy_init = lazy_init
        self._store_init_lock = threading.Lock()
        self._store_initialized = False
        self._pending_buffers: list[tuple[int, int]] = []
        self.store: Optional[DistributedObjectStore] = None
        if not self._lazy_init:
            self.store = self._setup_store()
            self._store_initialized = True

    def _setup_store(self) -> DistributedObjectStore:
        store = DistributedObjectStore()
        # joins this process into the BM group shared by all TP ranks
        res = store.init(self.local_rank, init_bm=self._init_bm)
        assert res == 0  # DIVERGES: only this rank's own result decides
        for ptr, size in self._pending_buffers:
            store.register_buffer(ptr, size)
        return store

    def _ensure_initialized(self) -> None:
        if self._store_initialized:
            return
        with self._store_init_lock:
            if self._store_initialized:
                return
            logger.info("Initializing Memcache store on first use.")
            self.store = self._setup_store()
            self._store_initialized = True

    def put(self, keys: list[str], addrs: list[int], sizes: list[int]) -> None:
        self._ensure_initialized()
        for key, addr, size in zip(keys, addrs, sizes):
            self.store.put(key, addr, size)


class KVPoolWorker:
    """Per-rank side of the AscendStore connector."""

    def __init__(self, parallel_config: ParallelConfig, use_compress: bool):
        self.use_compress = use_compress
        backend_kwargs = {"lazy_init": self.use_compress}
        self.m_store = MemcacheBackend(parallel_config, **backend_kwargs)

    def save_kv_layer_batch(self, req_id: str, keys, addrs, sizes) -> bool:
        try:
            self.m_store.put(keys, addrs, sizes)
            return True
        except Exception:  # a failed first put leaves the store uninitialized
            logger.exception("KV save for %s failed, will retry init later", req_id)
            return False


class PrefillModelStep:
    def __init__(self, pool_worker: KVPoolWorker, model: torch.nn.Module):
        self.pool_worker = pool_worker
        self.model = model

    def execute(self, req_id: str, keys, addrs, sizes, hidden: torch.Tensor):
        self.pool_worker.save_kv_layer_batch(req_id, keys, addrs, sizes)
        out = self.model(hidden)
        # row-parallel output reduction over the TP group (HCCL)
        return get_tp_group().all_reduce(out)
