"""
Source: https://github.com/huggingface/transformers/pull/48382
Project: huggingface/transformers (continuous batching manager, training-while-generating under TP)
Reported: 2026-08 (umbrella transformers#48294; the turn-taking idea later landed as the pause mechanism, #48462)
Backend: NCCL (TP group) + gloo CPU group for the per-step MAX-reduce
Hang: the CB engine decodes in a background thread, issuing the TP collectives of each forward plus a per-step
MAX all_reduce (payload size / stop status). A trainer thread in the same process keeps using the same model
(forward/backward/optimizer step on the shared TP weights) and issues its own TP collectives at the same time.
Which thread reaches the communicator first is a per-rank race, so rank 0 may issue [loop all_reduce, trainer
all_reduce] while rank 1 issues [trainer all_reduce, loop all_reduce]; NCCL needs one consistent order on every
rank, so the run deadlocks.
Fix: ContinuousBatchingManager.training_turn(): the trainer requests a turn; the request rides on the loop's
existing per-step MAX-reduce, so every rank agrees on the same step boundary, parks the loop there, runs the
trainer's work, then resumes the loop.
"""
import threading

import torch
import torch.distributed as dist


class ContinuousBatchingManager:
    def __init__(self, model, tp_group, cpu_group):
        self.model = model
        self.tp_group = tp_group
        self.cpu_group = cpu_group
        self._stop = False
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self):
        self._thread.start()

    def _loop(self):
        while True:
            status = torch.tensor([self._next_payload_size(), int(self._stop)])
            dist.all_reduce(status, op=dist.ReduceOp.MAX, group=self.cpu_group)
            if status[1].item():
                break
            batch = self._next_batch(int(status[0].item()))
            with torch.no_grad():
                self.model(batch)  # TP all_reduces on tp_group inside the forward


def train_while_generating(manager, model, optimizer, batches):
    manager.start()
    for batch in batches:
        loss = model(batch).loss  # DIVERGES  (trainer-thread TP collectives race the loop thread's; order differs per rank)
        loss.backward()
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad, group=dist.group.WORLD)  # DIVERGES  (interleaves with the loop's collectives in a per-rank order)
        optimizer.step()
        optimizer.zero_grad()
