"""The bundled catalogs (rules/*.toml) are well formed, consistent with each other, and agree with the
libraries they describe.

Nothing here imports the described libraries: their signatures are recorded below as literal data,
taken from the released sources listed with them.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from collcheck.catalog import OP_KINDS, CatalogError, bundled_catalog_paths, load_catalog

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROLE_KEYS = ("group", "root", "group_root", "peer", "reduce_op", "ranks")
LIST_ROLE_KEYS = ("operands", "uniform_after")
# Names a value expression may use (docs/catalog-format.md, "Value expressions").
# torch's own APIs: checked against the installed torch (tests/test_wrapped_models.py), not recorded here.
TORCH_CATALOGS = ("torch.toml", "torch_wrappers.toml")
VALUE_NAMES = {
    *("rank", "world", "local_rank", "node_rank", "local_world"),
    *("group_rank", "group_world", "group_ranks"),
}
# Method names allowed to match on any receiver: distinctive enough that a call by that name is a
# collective whatever the object. Adding one needs the same argument in its catalog comment.
ANY_RECEIVER_OK = {
    "barrier",
    "wait_for_everyone",
    "gather_for_metrics",
    "pad_across_processes",
    "reduce_boolean_decision",
}

# Leading positional parameters (after `self` for methods), read from the released sources:
#   accelerate 1.15.0 (accelerator.py, state.py, utils/operations.py, utils/other.py)
#   deepspeed 0.19.8 sdist (deepspeed/comm/comm.py, deepspeed/comm/utils.py, runtime/engine.py)
#   lightning 2.6.6 / pytorch_lightning 2.6.6 (pytorch/core/module.py, pytorch/trainer/trainer.py,
#     pytorch/strategies/*.py, fabric/fabric.py, fabric/strategies/*.py)
#   megatron-core 0.16.1 (core/parallel_state.py, core/tensor_parallel/mappings.py, .../data.py)
#   Megatron-LM's megatron/training (not in the megatron-core wheel): training/async_utils.py
#   torch_npu 2.14.0 (distributed/distributed_c10d.py; csrc/aten/npu_native_functions_by_codegen.yaml
#     for the torch_npu.npu_* op schemas, keyword-only parameters in schema order)
#   transformers 5.24.0 (trainer_pt_utils.py, training_args.py)
#   vllm 0.33.0 (distributed/communication_op.py, parallel_state.py, device_communicators/pynccl.py)
# Keys are the defining module's qualified name; re-exports (deepspeed.comm.x, accelerate.utils.x,
# megatron.core.mpu.x, ...) are checked through ALIASES.
VERIFIED_PARAMS: dict[str, tuple[str, ...]] = {
    "accelerate.accelerator.Accelerator.check_trigger": (),
    "accelerate.accelerator.Accelerator.gather": ("tensor",),
    "accelerate.accelerator.Accelerator.local_main_process_first": (),
    "accelerate.accelerator.Accelerator.main_process_first": (),
    "accelerate.accelerator.Accelerator.reduce": ("tensor", "reduction", "scale"),
    "accelerate.state.AcceleratorState.local_main_process_first": (),
    "accelerate.state.AcceleratorState.main_process_first": (),
    "accelerate.state.PartialState.local_main_process_first": (),
    "accelerate.state.PartialState.main_process_first": (),
    "accelerate.utils.operations.broadcast": ("tensor", "from_process"),
    "accelerate.utils.operations.broadcast_object_list": ("object_list", "from_process"),
    "accelerate.utils.operations.copy_tensor_to_devices": ("tensor",),
    "accelerate.utils.operations.gather": ("tensor",),
    "accelerate.utils.operations.gather_object": ("object",),
    "accelerate.utils.operations.pad_across_processes": ("tensor", "dim", "pad_index", "pad_first"),
    "accelerate.utils.operations.reduce": ("tensor", "reduction", "scale"),
    "accelerate.utils.other.wait_for_everyone": (),
    "deepspeed.comm.comm.all_gather": (
        "tensor_list",
        "tensor",
        "group",
        "async_op",
        "prof",
        "log_name",
        "debug",
    ),
    "deepspeed.comm.comm.all_gather_coalesced": ("output_tensors", "input_tensors", "group", "async_op"),
    "deepspeed.comm.comm.all_gather_into_tensor": (
        "output_tensor",
        "tensor",
        "group",
        "async_op",
        "prof",
        "log_name",
        "debug",
    ),
    "deepspeed.comm.comm.all_gather_object": ("object_list", "obj", "group", "prof", "log_name", "debug"),
    "deepspeed.comm.comm.all_reduce": ("tensor", "op", "group", "async_op", "prof", "log_name", "debug"),
    "deepspeed.comm.comm.all_reduce_coalesced": (
        "tensors",
        "op",
        "group",
        "async_op",
        "prof",
        "log_name",
        "debug",
    ),
    "deepspeed.comm.comm.all_to_all": (
        "output_tensor_list",
        "input_tensor_list",
        "group",
        "async_op",
        "prof",
        "log_name",
        "debug",
    ),
    "deepspeed.comm.comm.all_to_all_single": (
        "output",
        "tensor",
        "output_split_sizes",
        "input_split_sizes",
        "group",
        "async_op",
        "prof",
        "log_name",
        "debug",
    ),
    "deepspeed.comm.comm.allgather_fn": ("output_tensor", "input_tensor", "group", "async_op", "debug"),
    "deepspeed.comm.comm.barrier": ("group", "async_op", "device_ids", "prof", "log_name", "debug"),
    "deepspeed.comm.comm.batch_isend_irecv": ("p2p_op_list", "prof", "log_name", "debug"),
    "deepspeed.comm.comm.broadcast": ("tensor", "src", "group", "async_op", "prof", "log_name", "debug"),
    "deepspeed.comm.comm.broadcast_object_list": (
        "object_list",
        "src",
        "group",
        "device",
        "prof",
        "log_name",
        "debug",
    ),
    "deepspeed.comm.comm.gather": (
        "tensor",
        "gather_list",
        "dst",
        "group",
        "async_op",
        "prof",
        "log_name",
        "debug",
    ),
    "deepspeed.comm.comm.inference_all_reduce": (
        "tensor",
        "op",
        "group",
        "async_op",
        "prof",
        "log_name",
        "debug",
    ),
    "deepspeed.comm.comm.irecv": ("tensor", "src", "group", "tag", "prof", "log_name", "debug"),
    "deepspeed.comm.comm.isend": ("tensor", "dst", "group", "tag", "prof", "log_name", "debug"),
    "deepspeed.comm.comm.monitored_barrier": (
        "group",
        "timeout",
        "wait_all_ranks",
        "prof",
        "log_name",
        "debug",
    ),
    "deepspeed.comm.comm.new_group": ("ranks",),
    "deepspeed.comm.comm.recv": ("tensor", "src", "group", "tag", "prof", "log_name", "debug"),
    "deepspeed.comm.comm.reduce": ("tensor", "dst", "op", "group", "async_op", "prof", "log_name", "debug"),
    "deepspeed.comm.comm.reduce_scatter": (
        "output",
        "input_list",
        "op",
        "group",
        "async_op",
        "prof",
        "log_name",
        "debug",
    ),
    "deepspeed.comm.comm.reduce_scatter_fn": (
        "output_tensor",
        "tensor",
        "op",
        "group",
        "async_op",
        "prof",
        "debug",
    ),
    "deepspeed.comm.comm.reduce_scatter_tensor": (
        "output_tensor",
        "tensor",
        "op",
        "group",
        "async_op",
        "prof",
        "log_name",
        "debug",
    ),
    "deepspeed.comm.comm.scatter": (
        "tensor",
        "scatter_list",
        "src",
        "group",
        "async_op",
        "prof",
        "log_name",
        "debug",
    ),
    "deepspeed.comm.comm.send": ("tensor", "dst", "group", "tag", "prof", "log_name", "debug"),
    "deepspeed.runtime.engine.DeepSpeedEngine.save_checkpoint": (
        "save_dir",
        "tag",
        "client_state",
        "save_latest",
        "exclude_frozen_parameters",
    ),
    "lightning.fabric.fabric.Fabric.all_gather": ("data", "group", "sync_grads"),
    "lightning.fabric.fabric.Fabric.all_reduce": ("data", "group", "reduce_op"),
    "lightning.fabric.fabric.Fabric.broadcast": ("obj", "src"),
    "lightning.fabric.fabric.Fabric.load": ("path", "state", "strict"),
    "lightning.fabric.fabric.Fabric.rank_zero_first": ("local",),
    "lightning.fabric.fabric.Fabric.save": ("path", "state", "filter"),
    "lightning.fabric.strategies.strategy.Strategy.all_gather": ("tensor", "group", "sync_grads"),
    "lightning.fabric.strategies.strategy.Strategy.all_reduce": ("tensor", "group", "reduce_op"),
    "lightning.fabric.strategies.strategy.Strategy.broadcast": ("obj", "src"),
    "lightning.pytorch.core.module.LightningModule.all_gather": ("data", "group", "sync_grads"),
    "lightning.pytorch.strategies.strategy.Strategy.all_gather": ("tensor", "group", "sync_grads"),
    "lightning.pytorch.strategies.strategy.Strategy.broadcast": ("obj", "src"),
    "lightning.pytorch.strategies.strategy.Strategy.reduce": ("tensor", "group", "reduce_op"),
    "lightning.pytorch.trainer.trainer.Trainer.save_checkpoint": (
        "filepath",
        "weights_only",
        "storage_options",
    ),
    "lightning_fabric.fabric.Fabric.all_gather": ("data", "group", "sync_grads"),
    "lightning_fabric.fabric.Fabric.all_reduce": ("data", "group", "reduce_op"),
    "lightning_fabric.fabric.Fabric.broadcast": ("obj", "src"),
    "lightning_fabric.fabric.Fabric.load": ("path", "state", "strict"),
    "lightning_fabric.fabric.Fabric.rank_zero_first": ("local",),
    "lightning_fabric.fabric.Fabric.save": ("path", "state", "filter"),
    "lightning_fabric.strategies.strategy.Strategy.all_gather": ("tensor", "group", "sync_grads"),
    "lightning_fabric.strategies.strategy.Strategy.all_reduce": ("tensor", "group", "reduce_op"),
    "lightning_fabric.strategies.strategy.Strategy.broadcast": ("obj", "src"),
    "megatron.core.parallel_state.initialize_model_parallel": (
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "virtual_pipeline_model_parallel_size",
        "pipeline_model_parallel_comm_backend",
        "use_sharp",
        "context_parallel_size",
        "hierarchical_context_parallel_sizes",
        "hybrid_context_parallel",
        "expert_model_parallel_size",
        "num_distributed_optimizer_instances",
        "expert_tensor_parallel_size",
        "nccl_communicator_config_path",
        "distributed_timeout_minutes",
        "order",
        "get_embedding_ranks",
        "get_position_embedding_ranks",
        "create_gloo_process_groups",
        "high_priority_stream_groups",
        "sharp_enabled_group",
        "create_all_gather_group",
    ),
    "megatron.core.tensor_parallel.data.broadcast_data": ("keys", "data", "datatype", "tp_group"),
    "megatron.core.tensor_parallel.mappings.all_gather_last_dim_from_tensor_parallel_region": (
        "input_",
        "group",
    ),
    "megatron.core.tensor_parallel.mappings.all_to_all": (
        "group",
        "input_",
        "output_split_sizes_",
        "input_split_sizes",
    ),
    "megatron.core.tensor_parallel.mappings.all_to_all_hp2sp": ("input_", "group"),
    "megatron.training.async_utils.maybe_finalize_async_save": ("blocking", "terminate"),
    "megatron.core.tensor_parallel.mappings.all_to_all_sp2hp": ("input_", "group"),
    "megatron.core.tensor_parallel.mappings.gather_from_sequence_parallel_region": (
        "input_",
        "tensor_parallel_output_grad",
        "group",
        "output_split_sizes",
        "use_global_buffer",
    ),
    "megatron.core.tensor_parallel.mappings.gather_from_tensor_model_parallel_region": ("input_", "group"),
    "megatron.core.tensor_parallel.mappings.reduce_from_tensor_model_parallel_region": ("input_", "group"),
    "megatron.core.tensor_parallel.mappings.reduce_scatter_last_dim_to_tensor_parallel_region": (
        "input_",
        "group",
    ),
    "megatron.core.tensor_parallel.mappings.reduce_scatter_to_sequence_parallel_region": (
        "input_",
        "group",
        "input_split_sizes",
        "use_global_buffer",
    ),
    "pytorch_lightning.core.module.LightningModule.all_gather": ("data", "group", "sync_grads"),
    "pytorch_lightning.strategies.strategy.Strategy.all_gather": ("tensor", "group", "sync_grads"),
    "pytorch_lightning.strategies.strategy.Strategy.broadcast": ("obj", "src"),
    "pytorch_lightning.strategies.strategy.Strategy.reduce": ("tensor", "group", "reduce_op"),
    "pytorch_lightning.trainer.trainer.Trainer.save_checkpoint": (
        "filepath",
        "weights_only",
        "storage_options",
    ),
    "torch_npu.distributed.distributed_c10d._all_gather_into_tensor_uneven": (
        "output",
        "input",
        "output_split_sizes",
        "group",
        "async_op",
    ),
    "torch_npu.distributed.distributed_c10d._all_to_all_vc": (
        "output",
        "input",
        "send_count_matrix",
        "group",
        "async_op",
    ),
    "torch_npu.distributed.distributed_c10d._reduce_scatter_tensor_uneven": (
        "output",
        "input",
        "input_split_sizes",
        "op",
        "group",
        "async_op",
    ),
    "torch_npu.npu_all_gather_base_mm": ("self", "x2", "hcom", "world_size"),
    "torch_npu.npu_all_gather_quant_mm": ("self", "x2", "hcom", "world_size"),
    "torch_npu.npu_all_to_all_matmul": ("x1", "x2", "hcom", "world_size"),
    "torch_npu.npu_all_to_all_quant_matmul": ("x1", "x2", "hcom", "world_size"),
    "torch_npu.npu_alltoallv_gmm": (
        "gmm_x",
        "gmm_weight",
        "hcom",
        "ep_world_size",
        "send_counts",
        "recv_counts",
    ),
    "torch_npu.npu_alltoallv_quant_gmm": (
        "gmm_x",
        "gmm_weight",
        "gmm_x_scale",
        "gmm_weight_scale",
        "hcom",
        "ep_world_size",
        "send_counts",
        "recv_counts",
    ),
    "torch_npu.npu_gmm_alltoallv": (
        "gmm_x",
        "gmm_weight",
        "hcom",
        "ep_world_size",
        "send_counts",
        "recv_counts",
    ),
    "torch_npu.npu_matmul_all_to_all": ("x1", "x2", "hcom", "world_size"),
    "torch_npu.npu_mm_all_reduce_base": ("x1", "x2", "hcom", "reduce_op"),
    "torch_npu.npu_mm_reduce_scatter_base": ("self", "x2", "hcom", "world_size", "reduce_op"),
    "torch_npu.npu_moe_distribute_combine": (
        "expand_x",
        "expert_ids",
        "expand_idx",
        "ep_send_counts",
        "expert_scales",
        "group_ep",
        "ep_world_size",
        "ep_rank_id",
        "moe_expert_num",
    ),
    "torch_npu.npu_moe_distribute_combine_v2": (
        "expand_x",
        "expert_ids",
        "assist_info_for_combine",
        "ep_send_counts",
        "expert_scales",
        "group_ep",
        "ep_world_size",
        "ep_rank_id",
        "moe_expert_num",
    ),
    "torch_npu.npu_moe_distribute_dispatch": (
        "x",
        "expert_ids",
        "group_ep",
        "ep_world_size",
        "ep_rank_id",
        "moe_expert_num",
    ),
    "torch_npu.npu_moe_distribute_dispatch_v2": (
        "x",
        "expert_ids",
        "group_ep",
        "ep_world_size",
        "ep_rank_id",
        "moe_expert_num",
    ),
    "torch_npu.npu_quant_gmm_alltoallv": (
        "gmm_x",
        "gmm_weight",
        "gmm_x_scale",
        "gmm_weight_scale",
        "hcom",
        "ep_world_size",
        "send_counts",
        "recv_counts",
    ),
    "torch_npu.npu_quant_matmul_all_to_all": ("x1", "x2", "hcom", "world_size"),
    "torch_npu.npu_quant_mm_reduce_scatter": ("self", "x2", "hcom", "world_size", "reduce_op"),
    "transformers.trainer_pt_utils.distributed_broadcast_scalars": (
        "scalars",
        "num_total_examples",
        "device",
    ),
    "transformers.trainer_pt_utils.distributed_concat": ("tensor", "num_total_examples"),
    "transformers.training_args.TrainingArguments.main_process_first": ("local", "desc"),
    "vllm.distributed.communication_op.broadcast_tensor_dict": ("tensor_dict", "src"),
    "vllm.distributed.communication_op.tensor_model_parallel_all_gather": ("input_", "dim"),
    "vllm.distributed.communication_op.tensor_model_parallel_all_reduce": ("input_",),
    "vllm.distributed.communication_op.tensor_model_parallel_gather": ("input_", "dst", "dim"),
    "vllm.distributed.communication_op.tensor_model_parallel_reduce_scatter": ("input_", "dim"),
    "vllm.distributed.device_communicators.pynccl.PyNcclCommunicator.all_gather": (
        "output_tensor",
        "input_tensor",
        "stream",
    ),
    "vllm.distributed.device_communicators.pynccl.PyNcclCommunicator.all_gatherv": (
        "output_tensor",
        "input_tensor",
        "sizes",
        "stream",
    ),
    "vllm.distributed.device_communicators.pynccl.PyNcclCommunicator.all_reduce": (
        "in_tensor",
        "out_tensor",
        "op",
        "stream",
    ),
    "vllm.distributed.device_communicators.pynccl.PyNcclCommunicator.broadcast": ("tensor", "src", "stream"),
    "vllm.distributed.device_communicators.pynccl.PyNcclCommunicator.reduce": (
        "output_tensor",
        "input_tensor",
        "root",
        "op",
        "stream",
    ),
    "vllm.distributed.device_communicators.pynccl.PyNcclCommunicator.reduce_scatter": (
        "output_tensor",
        "input_tensor",
        "op",
        "stream",
    ),
    "vllm.distributed.device_communicators.pynccl.PyNcclCommunicator.reduce_scatterv": (
        "output_tensor",
        "input_tensor",
        "sizes",
        "op",
        "stream",
    ),
    "vllm.distributed.device_communicators.pynccl.PyNcclCommunicator.scatter": (
        "output_tensor",
        "input_tensor",
        "sizes",
        "root",
        "stream",
    ),
    "vllm.distributed.parallel_state.GroupCoordinator.all_gather": ("input_", "dim"),
    "vllm.distributed.parallel_state.GroupCoordinator.all_reduce": ("input_",),
    "vllm.distributed.parallel_state.GroupCoordinator.broadcast": ("input_", "src"),
    "vllm.distributed.parallel_state.GroupCoordinator.broadcast_object": ("obj", "src"),
    "vllm.distributed.parallel_state.GroupCoordinator.broadcast_object_list": ("obj_list", "src", "group"),
    "vllm.distributed.parallel_state.GroupCoordinator.broadcast_tensor_dict": (
        "tensor_dict",
        "src",
        "group",
        "metadata_group",
    ),
    "vllm.distributed.parallel_state.GroupCoordinator.gather": ("input_", "dst", "dim"),
    "vllm.distributed.parallel_state.GroupCoordinator.reduce_scatter": ("input_", "dim"),
}

# Re-exporting module -> defining module (each checked in the library's __init__.py).
ALIASES = {
    "deepspeed.comm.": "deepspeed.comm.comm.",
    "accelerate.utils.": "accelerate.utils.operations.",
    "megatron.core.mpu.": "megatron.core.parallel_state.",
    "megatron.core.tensor_parallel.": "megatron.core.tensor_parallel.mappings.",
    "vllm.distributed.": "vllm.distributed.communication_op.",
    "torch_npu.distributed.": "torch_npu.distributed.distributed_c10d._",
}
# Catalog names whose definition is not a plain `def` in the aliased module (checked by hand).
ALIAS_EXCEPTIONS = {
    "accelerate.utils.wait_for_everyone": "accelerate.utils.other.wait_for_everyone",
    "deepspeed.comm.get_world_rank_from_launcher": "deepspeed.comm.utils.get_world_rank_from_launcher",
    "megatron.core.tensor_parallel.broadcast_data": "megatron.core.tensor_parallel.data.broadcast_data",
}


def _documents() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, tomllib.loads(path.read_text(encoding="utf-8"))) for path in bundled_catalog_paths()]


def _entries(kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [(name, entry) for name, data in _documents() for entry in data.get(kind, [])]


def _method_names(entry: dict[str, Any]) -> list[str]:
    methods = entry.get("methods") or [entry["method"]]
    return list(methods)


def _group_names() -> set[str]:
    names = {"world"}
    for _, data in _documents():
        names.update(data.get("groups", {}).values())
    return names


def _group_names_in(expression: str) -> set[str]:
    """The groups named in `group_rank[tp]` / `group_world[tp]`."""
    tree = ast.parse(expression, mode="eval")
    return {
        node.slice.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name)
    }


def _value_names(expression: str) -> set[str]:
    tree = ast.parse(expression, mode="eval")
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return names - _group_names_in(expression)


def _catalog_group_names() -> set[str]:
    names: set[str] = set()
    for _, data in _documents():
        names.update(str(value) for value in data.get("groups", {}).values())
        names.update(data.get("group_members", {}))
    return names


def _value_tables(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(where, name, value expression) for every table that maps names to values."""
    rows: list[tuple[str, str, str]] = []
    for section, default in (("rank", "rank"), ("world", "world")):
        body = data.get(section, {})
        for key, value in body.items():
            if isinstance(value, dict):
                rows.extend((f"[{section}].{key}", name, str(expr)) for name, expr in value.items())
            elif isinstance(value, list):
                implied = {"local_functions": "local_rank", "group_functions": "group_rank"}.get(key, default)
                rows.extend((f"[{section}].{key}", name, implied) for name in value)
    rows.extend(
        ("[rank_decorators]", name, str(expr)) for name, expr in data.get("rank_decorators", {}).items()
    )
    rows.extend(("[launchers]", name, str(expr)) for name, expr in data.get("launchers", {}).items())
    return rows


def test_every_bundled_catalog_loads() -> None:
    paths = bundled_catalog_paths()
    assert {path.name for path in paths} >= {
        "torch.toml",
        "torch_npu.toml",
        "deepspeed.toml",
        "accelerate.toml",
        "lightning.toml",
        "megatron.toml",
        "conventions.toml",
    }
    catalog = load_catalog()
    assert len(catalog.names) == len(paths)
    for _, data in _documents():
        assert isinstance(data.get("catalog", {}).get("name"), str)
    assert catalog.functions and catalog.methods


@pytest.mark.parametrize("kind", ["op", "method"])
def test_entries_are_well_formed(kind: str) -> None:
    groups = _group_names()
    for where, entry in _entries(kind):
        label = f"{where}: {entry.get('names') or _method_names(entry)}"
        assert isinstance(entry.get("op"), str), label
        assert entry.get("kind", "collective") in OP_KINDS, label
        params = entry.get("params", [])
        assert len(set(params)) == len(params), f"{label}: duplicate parameter"
        for role in ROLE_KEYS:
            if role in entry:
                assert entry[role] in params, f"{label}: {role} = {entry[role]!r} is not in params"
        for role in LIST_ROLE_KEYS:
            for item in entry.get(role, []):
                assert item in params, f"{label}: {role} names {item!r}, not in params"
        if "default_group" in entry:
            assert entry["default_group"] in groups, f"{label}: unknown default_group"
        if kind == "op":
            assert entry.get("names"), label
            assert all(name.count(".") >= 1 for name in entry["names"]), label
        else:
            if entry.get("any_receiver"):
                for method in _method_names(entry):
                    assert method in ANY_RECEIVER_OK, f"{label}: any_receiver for {method!r}"
                assert not entry.get("receiver"), f"{label}: both receiver and any_receiver"
            else:
                assert entry.get("receiver"), f"{label}: a method needs receiver or any_receiver"


def test_no_name_means_two_different_ops() -> None:
    seen: dict[str, tuple[str, str, str]] = {}
    for where, entry in _entries("op"):
        for name in entry["names"]:
            mine = (entry["op"], entry.get("kind", "collective"), where)
            if name in seen:
                assert seen[name][:2] == mine[:2], f"{name}: {seen[name]} vs {mine}"
            seen[name] = mine
    methods: dict[tuple[str, str], tuple[str, str, str]] = {}
    for where, entry in _entries("method"):
        receivers = entry.get("receiver") or ["*"]
        for method in _method_names(entry):
            for receiver in receivers:
                key = (receiver, method)
                mine = (entry["op"], entry.get("kind", "collective"), where)
                assert key not in methods, f"{key} defined twice: {methods.get(key)} and {mine}"
                methods[key] = mine


def test_group_facts_name_catalog_groups() -> None:
    known = _catalog_group_names()
    for where, data in _documents():
        for name, expression in data.get("group_members", {}).items():
            assert name in known and _group_names_in(expression) <= known, f"{where}: {name}"
        for grid_name, grid in data.get("group_grids", {}).items():
            assert set(grid) <= known, f"{where} [group_grids].{grid_name}: {set(grid) - known}"


def test_no_name_has_two_values() -> None:
    values: dict[tuple[str, str], tuple[str, str]] = {}
    for where, data in _documents():
        for table, name, expression in _value_tables(data):
            family = table.split("]")[0] + "]"  # [rank], [world], [rank_decorators]
            key = ("rank" if family in ("[rank]", "[world]") else family, f"{table.split('.')[-1]}:{name}")
            if key in values:
                assert values[key][0] == expression, f"{name}: {values[key]} vs {(expression, where)}"
            values[key] = (expression, where)
        types: dict[str, str] = {}
        for name, value in data.get("types", {}).items():
            assert types.setdefault(name, value) == value


def test_value_expressions_use_known_names() -> None:
    known_groups = _catalog_group_names()  # every catalog parsed once, not once per expression
    for where, data in _documents():
        for table, name, expression in _value_tables(data):
            unknown = _value_names(expression) - VALUE_NAMES
            assert not unknown, f"{where} {table} {name} = {expression!r}: unknown {unknown}"
            groups = _group_names_in(expression) - known_groups
            assert not groups, f"{where} {table} {name} = {expression!r}: no [groups] entry for {groups}"
        for name, value in data.get("nondeterministic", {}).items():
            assert isinstance(value, str) and value, f"{where}: {name}"


def test_groups_table_maps_functions_to_short_names() -> None:
    for where, data in _documents():
        for function, group in data.get("groups", {}).items():
            assert "." in function, f"{where}: {function}"
            assert group.isidentifier(), f"{where}: {function} -> {group!r}"


def _defining_name(name: str) -> str | None:
    if name in VERIFIED_PARAMS:
        return name
    if name in ALIAS_EXCEPTIONS:
        return ALIAS_EXCEPTIONS[name]
    for prefix, target in ALIASES.items():
        if name.startswith(prefix):
            candidate = target + name[len(prefix) :]
            if candidate in VERIFIED_PARAMS:
                return candidate
    return None


def test_parameter_orders_match_the_libraries() -> None:
    checked = 0
    for where, entry in _entries("op"):
        if where in TORCH_CATALOGS:
            continue
        for name in entry["names"]:
            source = _defining_name(name)
            if source is None:
                continue
            assert tuple(entry["params"]) == VERIFIED_PARAMS[source], f"{where}: {name}"
            checked += 1
    for where, entry in _entries("method"):
        for method in _method_names(entry):
            for receiver in entry.get("receiver", []):
                source = f"{receiver}.{method}"
                if source in VERIFIED_PARAMS:
                    assert tuple(entry["params"]) == VERIFIED_PARAMS[source], f"{where}: {source}"
                    checked += 1
    assert checked >= len(VERIFIED_PARAMS)


def test_every_framework_op_was_verified() -> None:
    """Each [[op]] name outside torch.toml resolves to recorded source data (directly or by alias)."""
    unverified = [
        name
        for where, entry in _entries("op")
        if where not in TORCH_CATALOGS
        for name in entry["names"]
        if _defining_name(name) is None and name not in ALIAS_EXCEPTIONS
    ]
    assert not unverified, unverified


def test_loaded_catalog_contents() -> None:
    catalog = load_catalog()
    assert catalog.functions["deepspeed.comm.all_reduce"].reduce_op == "op"
    assert catalog.functions["accelerate.utils.broadcast"].root == "from_process"
    assert (
        catalog.functions["megatron.core.tensor_parallel.reduce_from_tensor_model_parallel_region"].op
        == "all_reduce"
    )
    assert (
        catalog.rank_functions["megatron.core.parallel_state.get_tensor_model_parallel_rank"]
        == "group_rank[tp]"
    )
    assert catalog.groups["megatron.core.parallel_state.get_tensor_model_parallel_group"] == "tp"
    assert catalog.group_members["embd"] == "group_rank[pp] == 0 or group_rank[pp] == group_world[pp] - 1"
    assert ("tp", "cp", "dp", "pp") in catalog.group_grids
    assert catalog.rank_functions["deepspeed.comm.get_local_rank"] == "local_rank"
    assert catalog.rank_attributes["is_main_process"] == "rank == 0"
    assert catalog.rank_attributes["is_local_main_process"] == "local_rank == 0"
    assert catalog.rank_attributes["is_global_zero"] == "rank == 0"
    assert catalog.rank_methods["is_world_process_zero"] == "rank == 0"
    assert catalog.rank_decorators["lightning.pytorch.utilities.rank_zero_only"] == "rank == 0"
    assert catalog.types["deepspeed.initialize"] == "deepspeed.DeepSpeedEngine"
    by_method = defaultdict(list)
    for spec in catalog.methods:
        by_method[spec.method].append(spec)
    assert any(spec.any_receiver for spec in by_method["barrier"])
    assert not any(spec.any_receiver for spec in by_method["reduce"])
    assert not any(spec.any_receiver for spec in by_method["broadcast"])


def test_function_table_values_survive_loading() -> None:
    catalog = load_catalog()
    first_stage = catalog.rank_functions["megatron.core.parallel_state.is_pipeline_first_stage"]
    assert first_stage == "group_rank[pp] == 0"
    assert (
        catalog.rank_functions["megatron.core.parallel_state.get_data_parallel_world_size"]
        == "group_world[dp]"
    )


def test_user_catalog_extends_the_bundled_ones(tmp_path: Path) -> None:
    user = tmp_path / "collcheck.toml"
    user.write_text(
        '[catalog]\nname = "in-house"\n\n'
        '[[op]]\nop = "all_reduce"\nnames = ["mylib.dist.sync_grads"]\n'
        'params = ["tensor", "group"]\ngroup = "group"\noperands = ["tensor"]\n\n'
        '[rank_decorators]\n"mylib.dist.main_only" = "rank == 0"\n',
        encoding="utf-8",
    )
    catalog = load_catalog([user])
    assert catalog.functions["mylib.dist.sync_grads"].group == "group"
    assert catalog.rank_decorators["mylib.dist.main_only"] == "rank == 0"
    assert "deepspeed.comm.all_reduce" in catalog.functions


def test_disabled_counters_are_keyword_attribute_pairs(tmp_path: Path) -> None:
    assert load_catalog().disabled_counters["tqdm.tqdm"] == "disable:n"
    user = tmp_path / "counters.toml"
    user.write_text('[disabled_counters]\n"mylib.Bar" = "quiet:count"\n', encoding="utf-8")
    assert load_catalog([user]).disabled_counters["mylib.Bar"] == "quiet:count"
    bad = tmp_path / "bad.toml"
    bad.write_text('[disabled_counters]\n"mylib.Bar" = "quiet"\n', encoding="utf-8")
    with pytest.raises(CatalogError, match="KEYWORD:ATTRIBUTE"):
        load_catalog([bad])


def test_attribute_types_are_flattened_and_checked(tmp_path: Path) -> None:
    catalog = load_catalog()
    assert catalog.attribute_types["transformers.Trainer.accelerator"] == "accelerate.Accelerator"
    assert catalog.types["trl.GRPOTrainer"] == "transformers.Trainer"
    assert "accelerator" in catalog.typed_attributes and "args" not in catalog.typed_attributes
    # A module that imports only TRL reaches the Accelerator through its trainer's attribute.
    assert {"accelerate", "transformers", "trl"} <= catalog.receiver_packages(("accelerate.Accelerator",))
    # Owners of owners: LightningModule.trainer -> Trainer.strategy -> the Strategy's methods.
    assert "lightning" in catalog.receiver_packages(("lightning.pytorch.strategies.Strategy",))
    assert catalog.receiver_packages(("deepspeed.DeepSpeedEngine",)) == {"deepspeed"}
    user = tmp_path / "mine.toml"
    user.write_text('[attribute_types]\n"acme.Runner" = { comm = "acme.Comm" }\n', encoding="utf-8")
    assert load_catalog([user]).attribute_types["acme.Runner.comm"] == "acme.Comm"
    bad = ['"acme.Runner" = "acme.Comm"', '"acme.Runner" = { comm = 3 }', '"acme.Runner" = { "a b" = "T" }']
    for index, entry in enumerate(bad):  # one file each: catalogs are cached by path
        broken = tmp_path / f"broken{index}.toml"
        broken.write_text(f"[attribute_types]\n{entry}\n", encoding="utf-8")
        with pytest.raises(CatalogError, match="attribute_types"):
            load_catalog([broken])


def test_launchers_give_the_callables_first_parameter_a_value() -> None:
    launchers = load_catalog().launchers
    assert launchers["torch.multiprocessing.spawn"] == "local_rank"
    assert launchers["torch.multiprocessing.start_processes"] == "local_rank"


def test_coordinator_attributes_name_a_size_or_a_member_list(tmp_path: Path) -> None:
    assert load_catalog().coordinator_attributes == {"world_size": "group_world", "ranks": "group_ranks"}
    user = tmp_path / "mine.toml"
    user.write_text('[coordinator]\nattributes = { members = "group_ranks" }\n')
    assert load_catalog([user]).coordinator_attributes["members"] == "group_ranks"
    bad = tmp_path / "bad.toml"
    bad.write_text('[coordinator]\nattributes = { members = "rank" }\n')
    with pytest.raises(CatalogError, match="coordinator"):
        load_catalog([bad])
    bad.write_text('coordinator = "ranks"\n')
    with pytest.raises(CatalogError, match="coordinator"):
        load_catalog([bad])
