"""
Source: https://github.com/sgl-project/sglang/pull/26923
Project: SGLang
Reported: 2026-06
Backend: NCCL
Hang: HiMambaRadixCache.writing_check() returns early when the local ongoing_write_through dict is empty,
assuming all TP ranks hold the same set of in-flight write-throughs. write_backup() only enqueues a node on
ranks whose host-pool allocation succeeded, so one TP rank can have pending writes (and enter the MIN
all_reduce) while its peers return early and move on to the next event-loop broadcast of requests; the
collectives are mismatched and the TP group deadlocks.
Fix: Drop the early return so every TP rank always enters the all_reduce; an empty rank contributes 0.
"""
import torch
import torch.distributed as dist


class HiCacheController:
    def __init__(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host
        self.ack_write_queue = []  # list of (ack_id, finish_event)

    def write(self, device_indices, node_id):
        host_indices = self.mem_pool_host.alloc(len(device_indices))
        if host_indices is None:
            # host pool full on *this* rank only
            return None
        event = torch.cuda.Event()
        event.record()
        self.ack_write_queue.append((node_id, event))
        return host_indices


class HiMambaRadixCache:
    def __init__(self, cache_controller, tp_group, tp_world_size):
        self.cache_controller = cache_controller
        self.tp_group = tp_group
        self.tp_world_size = tp_world_size
        self.ongoing_write_through = {}

    def write_backup(self, node):
        host_indices = self.cache_controller.write(node.value, node.id)
        if host_indices is not None:
            node.host_value = host_indices
            self.ongoing_write_through[node.id] = node
            node.lock_ref += 1
            return len(host_indices)
        return 0

    def writing_check(self, write_back=False):
        if write_back:
            while len(self.ongoing_write_through) > 0:
                self._drain_one_blocking()
            return

        # NOTE: all ranks are assumed to hold the same ongoing_write_through
        if len(self.ongoing_write_through) == 0:
            return  # DIVERGES

        finish_count = 0
        for _, finish_event in self.cache_controller.ack_write_queue:
            if not finish_event.query():
                break
            finish_count += 1
        queue_size = torch.tensor(finish_count, dtype=torch.int, device="cpu")
        if self.tp_world_size > 1:
            dist.all_reduce(queue_size, op=dist.ReduceOp.MIN, group=self.tp_group)

        for _ in range(queue_size.item()):
            ack_id, _ = self.cache_controller.ack_write_queue.pop(0)
            node = self.ongoing_write_through.pop(ack_id)
            node.lock_ref -= 1

    def _drain_one_blocking(self):
        ack_id, event = self.cache_controller.ack_write_queue.pop(0)
        event.synchronize()
        self.ongoing_write_through.pop(ack_id).lock_ref -= 1

    def check_hicache_events(self):
        self.writing_check()


class Scheduler:
    def __init__(self, tree_cache, tp_cpu_group, tp_rank):
        self.tree_cache = tree_cache
        self.tp_cpu_group = tp_cpu_group
        self.tp_rank = tp_rank

    def recv_requests(self):
        reqs = [self._poll_zmq()] if self.tp_rank == 0 else [None]
        dist.broadcast_object_list(reqs, src=0, group=self.tp_cpu_group)
        return reqs[0]

    def _poll_zmq(self):
        return []

    def get_new_batch_prefill(self):
        self.tree_cache.check_hicache_events()
        return None

    def event_loop_overlap(self):
        while True:
            recv_reqs = self.recv_requests()
            self.process_input_requests(recv_reqs)
            batch = self.get_new_batch_prefill()
            if batch is not None:
                self.run_batch(batch)

    def process_input_requests(self, reqs):
        pass

    def run_batch(self, batch):
        pass
