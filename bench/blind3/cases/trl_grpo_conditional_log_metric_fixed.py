"""
Source: https://github.com/huggingface/trl/issues/7310
Project: TRL
Reported: 2026-09
Backend: NCCL
Hang: Reward functions may call trainer.log_metric()/log_extra() only for some completions, so the
_pending_metrics / _pending_extra_logs dicts hold different keys on different processes. _flush_user_logs()
loops over the *local* sorted keys and calls gather_object / accelerator.gather once per key; a process that
recorded an extra metric issues one more gather than its peers, and the ranks block in mismatched collectives.
Fix: First agree on the union of keys across processes (gather_object of the key lists) and loop over that;
processes without a value contribute a zero (sum, count) pair. The fix was proposed in PR #7311 (closed, not
merged); written here from that proposal.
"""
from collections import defaultdict

import torch
from accelerate.utils import gather_object
from transformers import Trainer


class GRPOTrainer(Trainer):
    def __init__(self, model, reward_funcs, args=None, train_dataset=None, **kwargs):
        super().__init__(model=model, args=args, train_dataset=train_dataset, **kwargs)
        self.reward_funcs = reward_funcs
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._logs = {"extra": defaultdict(list)}
        self._pending_metrics = defaultdict(list)
        self._pending_extra_logs = defaultdict(list)

    # public hooks used from inside user reward functions
    def log_metric(self, name, value):
        self._pending_metrics[name].append(float(value))

    def log_extra(self, column, value):
        self._pending_extra_logs[column].append(value)

    def _calculate_rewards(self, prompts, completions):
        rewards = []
        for reward_func in self.reward_funcs:
            rewards.append(reward_func(prompts=prompts, completions=completions, trainer=self))
        return torch.tensor(rewards, device=self.accelerator.device).T

    def _flush_user_logs(self, mode):
        device = self.accelerator.device
        # agree on the same key set on every process before issuing per-key collectives
        all_columns = sorted(set().union(*gather_object([sorted(self._pending_extra_logs)])))
        for column in all_columns:
            self._logs["extra"][column].extend(gather_object(self._pending_extra_logs.get(column, [])))
        self._pending_extra_logs.clear()

        all_names = sorted(set().union(*gather_object([sorted(self._pending_metrics)])))
        for name in all_names:
            values = self._pending_metrics.get(name, [])
            local = torch.tensor([sum(values), float(len(values))], device=device)
            total = self.accelerator.gather(local.unsqueeze(0)).sum(dim=0)
            if total[1] > 0:
                self._metrics[mode][name].append((total[0] / total[1]).item())
        self._pending_metrics.clear()

    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        prompts = [x["prompt"] for x in inputs]
        completions = self._generate(prompts)
        rewards = self._calculate_rewards(prompts, completions)
        self._flush_user_logs(mode)
        return {"prompts": prompts, "completions": completions, "rewards": rewards}

    def _generate(self, prompts):
        return ["" for _ in prompts]


def proof_reward(prompts, completions, trainer, **kwargs):
    scores = []
    for completion in completions:
        if "\\begin{proof}" in completion:
            # only some processes see completions that trigger this metric
            trainer.log_metric("proof_accuracy", 1.0)
        scores.append(float(len(completion) > 0))
    return scores
