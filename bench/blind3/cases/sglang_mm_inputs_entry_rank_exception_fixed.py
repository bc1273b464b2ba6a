"""
Source: https://github.com/sgl-project/sglang/pull/37030
Project: SGLang
Reported: 2026-08
Backend: gloo (scheduler TP cpu_group)
Hang: With --enable-broadcast-mm-inputs-process only the TP entry rank deserializes / preprocesses a request's
multimodal inputs and then shares them with broadcast_object_list; the other scheduler ranks wait in the same
broadcast to receive them. If preprocessing raises on the entry rank (an invalid image, a bad mm payload), the
exception propagates before the entry rank reaches the broadcast, so the peer ranks block forever in
broadcast_object_list and one bad request hangs the whole scheduler group.
Fix: Always broadcast from the entry rank: either the prepared multimodal inputs or a typed error envelope;
every rank then turns an error envelope into a request-level error response and keeps serving.
"""
import torch

from sglang.srt.managers.schedule_batch import MultimodalInputs, Req


class Scheduler:
    def __init__(self, server_args, tp_group, tp_cpu_group, model_config):
        self.server_args = server_args
        self.tp_group = tp_group
        self.cpu_group = tp_cpu_group
        self.model_config = model_config
        self.waiting_queue = []

    @property
    def is_entry_rank(self):
        return self.tp_group.rank == 0

    def _process_and_broadcast_mm_inputs(self, raw_mm_inputs):
        group_world_size = self.tp_group.world_size
        if self.is_entry_rank:
            try:
                payload = ("ok", MultimodalInputs.from_dict(raw_mm_inputs))
            except Exception as e:  # send an error envelope instead of skipping the broadcast
                payload = ("error", repr(e))
            if group_world_size > 1:
                obj_list = [payload]
                torch.distributed.broadcast_object_list(obj_list, src=self.tp_group.first_rank,
                                                        group=self.cpu_group)
                payload = obj_list[0]
        else:
            obj_list = [None]
            torch.distributed.broadcast_object_list(obj_list, src=self.tp_group.first_rank,
                                                    group=self.cpu_group)
            payload = obj_list[0]
        status, value = payload
        if status == "error":
            raise ValueError(value)
        return value

    def handle_generate_request(self, recv_req):
        req = Req(recv_req.rid, recv_req.input_text, recv_req.input_ids, recv_req.sampling_params)
        if recv_req.mm_inputs is not None:
            if self.server_args.enable_broadcast_mm_inputs_process:
                try:
                    image_inputs = self._process_and_broadcast_mm_inputs(recv_req.mm_inputs)
                except ValueError as e:  # same decision on every rank
                    self.abort_request_with_error(recv_req, str(e))
                    return
            else:
                image_inputs = MultimodalInputs.from_dict(recv_req.mm_inputs)
            req.origin_input_ids = self.pad_input_ids_func(req.origin_input_ids, image_inputs)
            req.extend_image_inputs(image_inputs)
        self.waiting_queue.append(req)

    def pad_input_ids_func(self, input_ids, image_inputs):
        return input_ids

    def abort_request_with_error(self, recv_req, message):
        pass
