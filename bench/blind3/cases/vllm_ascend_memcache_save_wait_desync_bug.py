"""
Source: https://github.com/vllm-project/vllm-ascend/issues/14106
Project: vllm-ascend (AscendStore KV pool, MemCache backend, non-layerwise save)
Reported: 2026-08
Backend: HCCL
Hang: Each TP rank hands its KV blocks to a background sending thread and, at the end of
the step, blocks in wait_for_save() on an unbounded Queue.join(). The backend put() return
code is ignored and a raised error leaves the queued item unfinished, so a slow or failed
put on one TP rank keeps only that rank stuck in its local wait (or lets it fail alone)
while its peers return and enter the next step's HCCL collectives. The TP group is split
(some ranks in all_reduce, one rank still waiting on its save), the collective times out
and all prefill engines are killed.
Fix: Thread gives no merged fix; the obvious one (the report's suggested direction) is a
bounded wait plus a TP-wide status consensus inside wait_for_save(), so every rank takes
the same fail/bypass branch before any rank enters the next collective.
"""
import queue
import threading
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch_npu  # noqa: F401
from vllm.distributed.parallel_state import get_tp_group
from vllm.logger import init_logger

logger = init_logger(__name__)


@dataclass
class ReqMeta:
    req_id: str
    keys: list = field(default_factory=list)
    addrs: list = field(default_factory=list)
    sizes: list = field(default_factory=list)


class KVCacheStoreSendingThread(threading.Thread):
    def __init__(self, m_store, tp_rank: int):
        super().__init__(daemon=True, name=f"kv-send-{tp_rank}")
        self.m_store = m_store
        self.tp_rank = tp_rank
        self.request_queue: "queue.Queue[ReqMeta]" = queue.Queue()

    def add_request(self, req: ReqMeta) -> None:
        self.request_queue.put(req)

    def _handle_request(self, req: ReqMeta) -> None:
        # return code of put() is not checked; an exception escapes before task_done()
        self.m_store.put(req.keys, req.addrs, req.sizes)
        self.request_queue.task_done()

    def run(self) -> None:
        while True:
            req = self.request_queue.get()
            try:
                self._handle_request(req)
            except Exception:
                logger.exception("rank %d failed to save %s", self.tp_rank, req.req_id)


class KVPoolWorker:
    def __init__(self, m_store, tp_rank: int):
        self.tp_rank = tp_rank
        self.kv_send_thread = KVCacheStoreSendingThread(m_store, tp_rank)
        self.kv_send_thread.start()

    def start_save(self, reqs: list[ReqMeta]) -> None:
        for req in reqs:
            self.kv_send_thread.add_request(req)

    def wait_for_save(self) -> None:
        # rank-local completion contract: no deadline, no agreement with peers
        self.kv_send_thread.request_queue.join()  # DIVERGES


class AscendStoreConnectorWorker:
    def __init__(self, pool_worker: KVPoolWorker):
        self.pool_worker = pool_worker

    def save_kv_layer(self, reqs: list[ReqMeta]) -> None:
        self.pool_worker.start_save(reqs)

    def wait_for_save(self) -> None:
        self.pool_worker.wait_for_save()


class PrefillRunner:
    def __init__(self, connector: AscendStoreConnectorWorker, model: torch.nn.Module):
        self.connector = connector
        self.model = model

    def step(self, reqs: list[ReqMeta], hidden: torch.Tensor) -> torch.Tensor:
        out = self.model(hidden)
        out = get_tp_group().all_reduce(out)
        self.connector.save_kv_layer(reqs)
        self.connector.wait_for_save()
        return out

    def serve(self, batches) -> None:
        for reqs, hidden in batches:
            self.step(reqs, hidden)
