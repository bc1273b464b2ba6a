"""
Source: https://github.com/verl-project/verl/pull/7846
Project: verl (with vLLM data-parallel engine cores)
Reported: 2026-09
Backend: gloo (vLLM DP coordination group)
Hang: In fully-async weight sync, verl restores the KV cache (which already resumes vLLM scheduling) and then
calls resume_generation(), which opens the request gate and resumes the scheduler a second time. vLLM's
DPEngineCoreProc.resume_scheduler() decides whether to enter its DP resume collective from the rank-local
engines_running flag. Because the gate is already open, waiting generation tasks start a new DP wave while the
duplicate resume is still running: on some DP ranks the wave has set engines_running=True and they return,
others still see False and enter the collective, so engine cores and workers wait on each other until gloo
times out.
Fix: Resume in two ordered phases: keep admission closed while the head server resumes all DP engine cores and
waits for that RPC, and open the submission gates on all servers only afterwards.
"""
import asyncio

import torch
import torch.distributed as dist


class DPEngineCoreProc:
    """Simplified vLLM v1 DP engine core (one per DP rank)."""

    def __init__(self, scheduler, dp_group):
        self.scheduler = scheduler
        self.dp_group = dp_group
        self.engines_running = False

    def start_dp_wave(self, wave: int):
        # coordinator wave message, arrives independently of utility RPCs
        self.engines_running = True

    def resume_scheduler(self):
        self.scheduler.resume()
        if self.engines_running:
            return
        flag = torch.tensor([1], dtype=torch.int32)
        dist.all_reduce(flag, group=self.dp_group)
        self.engines_running = bool(flag.item())


class AsyncLLMClient:
    def __init__(self, engine_cores):
        self.engine_cores = engine_cores

    async def wake_up(self, tags):
        for core in self.engine_cores:
            core.resume_scheduler()  # restoring the KV cache implicitly resumes scheduling

    async def resume_scheduler(self):
        await asyncio.gather(*[asyncio.to_thread(c.resume_scheduler) for c in self.engine_cores])

    async def generate(self, prompt, wave):
        for core in self.engine_cores:
            core.start_dp_wave(wave)
        return prompt


class vLLMHttpServer:
    def __init__(self, engine: AsyncLLMClient, is_head: bool):
        self.engine = engine
        self.is_head = is_head
        self._submission_gate = asyncio.Event()
        self._wave = 0

    async def wake_up(self):
        await self.engine.wake_up(tags=["kv_cache"])

    async def resume_engines(self):
        # phase 1: only the head resumes all DP engine cores, with admission still closed
        if self.is_head:
            await self.engine.resume_scheduler()

    def open_submission_gate(self):
        # phase 2: requests may start a new DP wave only after the resume RPC returned
        self._submission_gate.set()

    async def resume_generation(self):
        await self.resume_engines()
        self.open_submission_gate()

    async def generate(self, prompt):
        await self._submission_gate.wait()
        self._wave += 1
        return await self.engine.generate(prompt, self._wave)


class vLLMReplica:
    def __init__(self, servers):
        self.servers = servers

    @property
    def head(self):
        return next(s for s in self.servers if s.is_head)

    async def resume(self):
        await asyncio.gather(*[s.wake_up() for s in self.servers])
        await self.head.resume_engines()
        for s in self.servers:
            s.open_submission_gate()


class FullyAsyncRollouter:
    def __init__(self, replicas):
        self.replicas = replicas

    async def update_weights_and_resume(self, weights):
        for replica in self.replicas:
            await replica.resume()
