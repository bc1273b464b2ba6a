"""
Source: https://github.com/ray-project/ray/pull/66030
Project: ray (RLlib, TorchLearner with torch DDP)
Reported: 2026-09
Backend: NCCL (gloo on CPU learners)
Hang: With several Learners wrapped in torch DDP, not every Learner always receives training data for an
update. A Learner with an empty batch skips its update (no forward/backward), while the other Learners run
backward and wait in DDP's gradient all-reduce for it. Learners can also iterate over a different number of
minibatches, so even non-empty Learners can fall out of step. The DDP all-reduce never completes.
Fix: Before the DDP step all Learners agree (one all_reduce) on whether every Learner has data and on how many
minibatch iterations to run; if any Learner is empty, all skip the update together, otherwise all run the same
number of steps.
"""
import torch
import torch.distributed as dist

from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.minibatch_utils import MiniBatchCyclicIterator


class DDPTorchLearner(TorchLearner):
    def _iter_minibatches(self, batch, minibatch_size, num_epochs):
        return MiniBatchCyclicIterator(batch, minibatch_size=minibatch_size, num_iters=num_epochs)

    def _agree_on_num_steps(self, local_steps: int) -> int:
        # every Learner reports how many minibatch steps it could take; 0 if it has no data
        t = torch.tensor([local_steps], dtype=torch.int64, device=self._device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return int(t.item())

    def update(self, batch, minibatch_size=None, num_epochs=1):
        minibatches = []
        if batch is not None and len(batch) > 0:
            minibatches = list(self._iter_minibatches(batch, minibatch_size, num_epochs))
        num_steps = self._agree_on_num_steps(len(minibatches))
        if num_steps == 0:
            return {}  # all Learners skip together
        results = []
        for minibatch in minibatches[:num_steps]:
            fwd_out = self._module.forward_train(minibatch)  # DDP-wrapped RLModules
            loss_per_module = self.compute_losses(fwd_out=fwd_out, batch=minibatch)
            total = sum(loss_per_module.values())
            self._optimizer_zero_grad()
            total.backward()  # DDP gradient all-reduce
            self.apply_gradients({})
            results.append({k: v.item() for k, v in loss_per_module.items()})
        return results
