"""
Source: https://github.com/OpenRLHF/OpenRLHF/pull/803
Project: OpenRLHF
Reported: 2025-03
Backend: NCCL
Hang: With ring attention only ring-attention rank 0 generates rollouts and broadcasts the list of Samples to
the other ranks of its ring group with broadcast_object_list. Rank 0's list has one entry per micro rollout
batch of rollout_batch_size * n_samples_per_prompt samples, but the receiving ranks size their placeholder list
from rollout_batch_size alone. When n_samples_per_prompt > 1 the ranks pass lists of different lengths, so the
object-size broadcast inside broadcast_object_list does not match across the ring group and the ranks hang.
Fix: Size the receivers' placeholder list as rollout_batch_size * n_samples_per_prompt // world_size //
micro_rollout_batch_size, matching what rank 0 broadcasts.
"""
import torch
import torch.distributed as dist


class RemoteExperienceMaker:
    def __init__(self, actor, critic, reward_model, initial_model, tokenizer, prompt_max_len, strategy,
                 vllm_engines=None):
        self.actor = actor
        self.critic = critic
        self.reward_model = reward_model
        self.initial_model = initial_model
        self.tokenizer = tokenizer
        self.prompt_max_len = prompt_max_len
        self.strategy = strategy
        self.vllm_engines = vllm_engines

    def generate_samples(self, all_prompts, all_labels, **generate_kwargs):
        args = self.strategy.args
        all_prompts = sum([[p] * args.n_samples_per_prompt for p in all_prompts], [])
        samples_list = []
        for i in range(0, len(all_prompts), args.micro_rollout_batch_size):
            prompts = all_prompts[i: i + args.micro_rollout_batch_size]
            samples_list.append(self._generate_vllm(prompts, **generate_kwargs))
        return samples_list

    def _generate_vllm(self, prompts, **kwargs):
        return {"prompts": prompts}

    @torch.no_grad()
    def make_experience_list(self, all_prompts, all_labels, **generate_kwargs):
        args = self.strategy.args
        if self.strategy.ring_attn_group is not None:
            # only ring rank 0 generates, then broadcasts to its ring group
            if self.strategy.ring_attn_rank == 0:
                samples_list = self.generate_samples(all_prompts, all_labels, **generate_kwargs)
                dist.broadcast_object_list(samples_list, src=dist.get_rank(),
                                           group=self.strategy.ring_attn_group)
            else:
                world_size = dist.get_world_size() // args.ring_attn_size
                samples_list = [None] * (
                    args.rollout_batch_size * args.n_samples_per_prompt // world_size
                    // args.micro_rollout_batch_size)
                dist.broadcast_object_list(samples_list, src=self.strategy.ring_attn_ranks[0],
                                           group=self.strategy.ring_attn_group)
        else:
            samples_list = self.generate_samples(all_prompts, all_labels, **generate_kwargs)
        dist.barrier()

        experiences = []
        for samples in samples_list:
            experiences.append(self.make_experience(samples))
        return experiences

    def make_experience(self, samples):
        return samples
