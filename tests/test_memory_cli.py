"""`collcheck estimate` through `collcheck.cli.main`: JSON contract, text table, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collcheck.cli import main

MODELS = Path(__file__).resolve().parent.parent / "fixtures" / "models"
CONTRACT = (
    "bytes_per_token",
    "local_bytes",
    "gathered_bytes",
    "peak_bytes",
    "budget_bytes",
    "fits",
    "max_seq_len",
    "advice",
)


def estimate_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, object]]:
    code = main(["estimate", "--format", "json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_seed_example_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = estimate_json(
        capsys,
        "--model",
        str(MODELS / "seed-warning-1.json"),
        "--seq-len",
        "32768",
        "--tp",
        "8",
        "--budget",
        "4GiB",
    )
    assert code == 1
    assert tuple(data)[: len(CONTRACT)] == CONTRACT
    assert data["gathered_bytes"] == 4_294_967_296
    assert data["local_bytes"] == 536_870_912
    assert data["peak_bytes"] == 4_831_838_208
    assert data["budget_bytes"] == 4_294_967_296
    assert data["fits"] is False
    assert data["max_seq_len"] == 29_127  # 4 GiB // (16,384 + 131,072) bytes per token
    advice = data["advice"]
    assert isinstance(advice, list)
    assert advice[0] == {
        "change": "chunks",
        "flags": "--chunks 2",
        "peak_bytes": 2_684_354_560,
        "summary": "gather in 2 chunks of 16 layer-head(s) per rank, dropping each before the next",
    }


def test_by_hand_matches_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--layers", "1", "--kv-heads", "256", "--head-dim", "128", "--seq-len", "32768", "--tp", "8"]
    code, data = estimate_json(
        capsys, *args, "--dtype", "fp16", "--chunk-by", "layer", "--budget", "4831838208"
    )
    assert code == 0
    assert (data["gathered_bytes"], data["peak_bytes"], data["fits"]) == (4_294_967_296, 4_831_838_208, True)


def test_vllm_capacity_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = estimate_json(capsys, "--model", str(MODELS / "llama-3.1-8b.json"), "--seq-len", "31232")
    assert code == 0
    assert (data["bytes_per_token"], data["local_bytes"]) == (131_072, 4_093_640_704)
    assert data["fits"] is None and data["budget_bytes"] is None


def test_deepseek_v3_mla(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = estimate_json(
        capsys, "--model", str(MODELS / "deepseek-v3.json"), "--seq-len", "1", "--tp", "8"
    )
    assert code == 0
    assert data["bytes_per_token"] == data["local_bytes"] == data["peak_bytes"] == 70_272


def test_list_form_on_gloo_and_quantized(capsys: pytest.CaptureFixture[str]) -> None:
    model = ["--model", str(MODELS / "llama-3-8b.json"), "--seq-len", "1", "--tp", "8"]
    quant = ["--gather", "list", "--kv-quant", "int8", "--scale", "per-token-head", "--budget", "1MiB"]
    code, data = estimate_json(capsys, *model, *quant)
    assert code == 0
    per_token = 32 * 8 * 2 * (128 + 4)
    assert data["bytes_per_token"] == per_token
    assert data["peak_bytes"] == per_token // 8 + 2 * per_token


def test_text_table_shows_gib_and_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    seed = str(MODELS / "seed-warning-1.json")
    code = main(["estimate", "--model", seed, "--seq-len", "32768", "--tp", "8", "--budget", "4GiB"])
    out = capsys.readouterr().out
    assert code == 1
    assert "4 GiB         4,294,967,296 B" in out
    assert "does NOT fit" in out and "--chunks 2" in out


SMALL = ["--layers", "2", "--kv-heads", "8", "--head-dim", "64", "--seq-len", "8"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([*SMALL, "--budget", "16G"], "cannot read size"),
        (["--layers", "2", "--kv-heads", "8", "--seq-len", "8"], "--head-dim"),
        (["--model", "missing.json"], "cannot read"),
        ([*SMALL, "--tp", "3"], "does not divide"),
        ([*SMALL, "--chunks", "2", "--chunk-by", "layer"], "not both"),
        ([*SMALL, "--scale", "per-row"], "unknown scale"),
    ],
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    assert main(["estimate", *args]) == 2
    assert message in capsys.readouterr().err


def test_missing_model_field_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_attention_heads": 8, "head_dim": 64}))
    assert main(["estimate", "--model", str(tmp_path), "--seq-len", "8"]) == 2
    assert "'num_hidden_layers'" in capsys.readouterr().err


def test_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "--help"]) == 0
    out = capsys.readouterr().out
    options = (
        "--model",
        "--kv-heads",
        "--seq-len",
        "--tp",
        "--kv-quant",
        "--chunk-by",
        "--gather",
        "--budget",
    )
    for option in (*options, "--plot", "Exit status 1"):
        assert option in out


def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / "peak.png"
    model = str(MODELS / "llama-3-8b.json")
    args = ["--model", model, "--seq-len", "131072", "--tp", "8", "--budget", "16GiB", "--plot", str(target)]
    code = main(["estimate", *args])
    assert code == 1
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
