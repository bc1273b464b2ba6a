"""
Source: https://github.com/huggingface/accelerate/issues/2733
Project: accelerate
Reported: 2024-05
Backend: NCCL
Hang: An inference function launched with notebook_launcher generates text on every process, then wraps the
call to accelerate.utils.gather_object inside `if distributed_state.is_main_process:`. gather_object is an
all_gather_object over every process, so only the main process enters it and blocks forever waiting for the
other workers, which have already returned.
Fix: Call gather_object on every process and only print/use the gathered result on the main process (maintainer
advice in the thread).
"""
import torch
from accelerate import Accelerator, notebook_launcher
from accelerate.utils import gather_object
from transformers import AutoModelForCausalLM, AutoTokenizer

MODEL_PATH = "mistralai/Mistral-7B-Instruct-v0.2"


class Grader:
    def __init__(self, prompts):
        self.distributed_state = Accelerator()
        self.tokenizer = AutoTokenizer.from_pretrained(MODEL_PATH)
        self.model = AutoModelForCausalLM.from_pretrained(MODEL_PATH, torch_dtype=torch.bfloat16)
        self.model.to(self.distributed_state.device)
        self.prompts = prompts

    @property
    def is_reporter(self):
        return self.distributed_state.is_main_process

    def generate_local(self):
        txt_out = []
        with self.distributed_state.split_between_processes(self.prompts) as shard:
            for prompt in shard:
                enc = self.tokenizer(prompt, return_tensors="pt").to(self.distributed_state.device)
                out = self.model.generate(**enc, max_new_tokens=64)
                txt_out.append(self.tokenizer.decode(out[0], skip_special_tokens=True))
        return txt_out

    def report(self, txt_out):
        if self.is_reporter:
            gathered = gather_object(txt_out)  # DIVERGES
            print(gathered[0])
            print(gathered[1])


def grade(inputs):
    grader = Grader(inputs)
    txt_out = grader.generate_local()
    grader.report(txt_out)


if __name__ == "__main__":
    notebook_launcher(grade, (["Grade: 1+1=2", "Grade: 2+2=5"],), num_processes=2)
