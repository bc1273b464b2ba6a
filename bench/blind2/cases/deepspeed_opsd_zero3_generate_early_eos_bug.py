"""
Source: https://github.com/deepspeedai/DeepSpeed/issues/8262
Project: DeepSpeed (DeepSpeedExamples OPSD trainer, Hybrid Engine rollout)
Reported: 2026-08
Backend: NCCL
Hang: The student is ZeRO-3 partitioned, so every decode forward all-gathers its
parameters across the data-parallel ranks. Each rank generates for its own prompts with
HF generate() and the default EOS stopping criterion. A rank that emits EOS early leaves
generate() and goes on to the teacher forward (a different collective), while the other
ranks enter the next decode step and wait in the student's ZeRO-3 parameter all-gather.
Fix: generate with synced_gpus=True under ZeRO-3 so finished ranks keep running dummy
decode forwards until every rank is done (obvious fix; the thread validates
synced_gpus=True in a harness).
"""
import deepspeed
import torch
import torch.distributed as dist


class OPSDRolloutConfig:
    def __init__(self, max_new_tokens=512, temperature=1.0, zero_stage=3):
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.zero_stage = zero_stage


class OPSDTrainer:
    def __init__(self, student_engine, teacher_engine, tokenizer, cfg: OPSDRolloutConfig):
        self.student = student_engine  # DeepSpeedHybridEngine, ZeRO-3
        self.teacher = teacher_engine  # ZeRO-3 inference engine
        self.tokenizer = tokenizer
        self.cfg = cfg

    def _generation_kwargs(self) -> dict:
        return dict(
            max_new_tokens=self.cfg.max_new_tokens,
            do_sample=True,
            temperature=self.cfg.temperature,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
        )

    @torch.no_grad()
    def generate_sequences(self, prompts: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        self.student.eval()
        # each DP rank has different prompts -> stops at its own EOS step
        seq = self.student.module.generate(  # DIVERGES
            input_ids=prompts, attention_mask=mask, **self._generation_kwargs())
        self.student.train()
        return seq

    @torch.no_grad()
    def teacher_logprobs(self, seq: torch.Tensor) -> torch.Tensor:
        logits = self.teacher(seq).logits
        return torch.log_softmax(logits.float(), dim=-1)

    def train_step(self, batch) -> float:
        seq = self.generate_sequences(batch["prompts"], batch["prompt_mask"])
        t_logp = self.teacher_logprobs(seq)
        s_logits = self.student(seq).logits
        s_logp = torch.log_softmax(s_logits.float(), dim=-1)
        loss = torch.nn.functional.kl_div(s_logp, t_logp, log_target=True, reduction="batchmean")
        self.student.backward(loss)
        self.student.step()
        return loss.item()
