"""
Source: https://github.com/huggingface/trl/pull/5841
Project: TRL (trl/experimental/openenv/utils.py, vLLM server mode)
Reported: 2026-05
Backend: NCCL
Hang: In server mode only the main process talks to the vLLM server, so
_generate_rollout_completions_server gathers every rank's prompts with gather_object, lets rank 0
generate, and hands each rank its slice with broadcast_object_list. The public wrapper
generate_rollout_completions returns [] straight away when the local prompt list is empty, so a rank
with no prompts never enters those two collectives while the ranks with prompts block in gather_object.
(Found in the PR review thread.)
Fix (thread gives no merged fix; obvious one): Drop the early return in server mode (let every rank enter the gather/broadcast, contributing an
empty list) so all processes run the same collective sequence.
"""
from accelerate.utils import broadcast_object_list, gather_object


def _generate_rollout_completions_server(trainer, prompts, generation_kwargs, as_chat: bool):
    accelerator = trainer.accelerator
    all_prompts = gather_object(prompts)  # collective over all processes
    counts = gather_object([len(prompts)])
    payload = None
    if accelerator.is_main_process:
        client = trainer.vllm_generation.vllm_client
        if as_chat:
            output = client.chat(
                messages=all_prompts,
                **generation_kwargs,
                chat_template_kwargs=trainer.chat_template_kwargs,
                tools=trainer.tools or None,
                chat_template=trainer.chat_template,
            )
        else:
            output = client.generate(prompts=all_prompts, **generation_kwargs)
        payload = (output, counts)
    # Broadcast the completions from the main process to all processes; each keeps its slice.
    obj_list = [payload]
    broadcast_object_list(obj_list, from_process=0)
    output, counts = obj_list[0]
    start = sum(counts[: accelerator.process_index])
    end = start + counts[accelerator.process_index]
    return [
        {"prompt_ids": output["prompt_ids"][i], "completion_ids": output["completion_ids"][i]}
        for i in range(start, end)
    ]


def _generate_rollout_completions_colocate(trainer, prompts, generation_kwargs, as_chat: bool):
    llm = trainer.vllm_generation.llm
    outs = llm.chat(prompts, **generation_kwargs) if as_chat else llm.generate(prompts, **generation_kwargs)
    return [{"prompt_ids": o.prompt_token_ids, "completion_ids": o.outputs[0].token_ids} for o in outs]


def generate_rollout_completions(trainer, prompts, generation_kwargs=None, as_chat=None):
    generation_kwargs = generation_kwargs or {}
    if not prompts:  # DIVERGES: a rank with nothing to roll out leaves before the server-mode collectives
        return []
    if as_chat is None:
        as_chat = isinstance(prompts[0], list)
    if trainer.vllm_mode == "server":
        return _generate_rollout_completions_server(trainer, prompts, generation_kwargs, as_chat)
    return _generate_rollout_completions_colocate(trainer, prompts, generation_kwargs, as_chat)
