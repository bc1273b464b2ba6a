"""
Source: https://github.com/huggingface/transformers/pull/48382
Project: huggingface/transformers (continuous batching manager, training-while-generating under TP)
Reported: 2026-08 (umbrella transformers#48294; the turn-taking idea later landed as the pause mechanism, #48462)
Backend: NCCL (TP group) + gloo CPU group for the per-step MAX-reduce
Hang: a trainer thread issued TP/gradient collectives concurrently with the CB background loop's collectives, so
the per-rank issue order was a race and the ranks deadlocked.
Fix: training_turn(): the turn request is carried in the loop's existing per-step MAX-reduce, so all ranks agree
on the same step boundary, park the loop there, let the trainer run its collectives alone, then resume.
"""
import contextlib
import threading

import torch
import torch.distributed as dist


class ContinuousBatchingManager:
    def __init__(self, model, tp_group, cpu_group):
        self.model = model
        self.tp_group = tp_group
        self.cpu_group = cpu_group
        self._stop = False
        self._turn_requested = threading.Event()
        self._parked = threading.Event()
        self._resume = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self):
        self._thread.start()

    def _loop(self):
        while True:
            status = torch.tensor(
                [self._next_payload_size(), int(self._stop), int(self._turn_requested.is_set())]
            )
            dist.all_reduce(status, op=dist.ReduceOp.MAX, group=self.cpu_group)
            if status[1].item():
                break
            if status[2].item():
                # every rank sees the same reduced flag, so every rank parks at this same step
                self._parked.set()
                self._resume.wait()
                self._resume.clear()
                continue
            batch = self._next_batch(int(status[0].item()))
            with torch.no_grad():
                self.model(batch)

    @contextlib.contextmanager
    def training_turn(self):
        self._turn_requested.set()
        self._parked.wait()
        try:
            yield
        finally:
            self._turn_requested.clear()
            self._parked.clear()
            self._resume.set()


def train_while_generating(manager, model, optimizer, batches):
    manager.start()
    for batch in batches:
        with manager.training_turn():
            loss = model(batch).loss
            loss.backward()
            for p in model.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad, group=dist.group.WORLD)
            optimizer.step()
            optimizer.zero_grad()
