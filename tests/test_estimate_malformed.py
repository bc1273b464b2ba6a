"""`collcheck estimate --model` on malformed configs: a clear error and exit 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collcheck.cli import main

REPO = Path(__file__).resolve().parents[1]
LLAMA = json.loads((REPO / "fixtures" / "models" / "llama-3-8b.json").read_text())


def _with(**changes: object) -> bytes:
    return json.dumps({**LLAMA, **changes}).encode()


MALFORMED: dict[str, bytes] = {
    "utf16": json.dumps(LLAMA).encode("utf-16"),
    "ff-bytes": b"\xff\xfe\xfd{}",
    "latin1-inside": b'{"num_hidden_layers": 32, "name": "caf\xe9"}',
    "deep-nesting": b"[" * 100_000 + b"]" * 100_000,
    "deep-objects": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "huge-integer-literal": b'{"num_hidden_layers": 1' + b"0" * 5000 + b"}",
    "layers-10e300": _with(num_hidden_layers=10**300),
    "heads-10e300": _with(num_attention_heads=10**300, num_key_value_heads=10**300),
    "context-10e300": _with(max_position_embeddings=10**300),
    "layers-inf": b'{"num_hidden_layers": 1e999, "num_attention_heads": 8, "head_dim": 64}',
    "layers-nan": b'{"num_hidden_layers": NaN, "num_attention_heads": 8, "head_dim": 64}',
    "list": b"[1, 2, 3]",
    "string": b'"config"',
    "null": b"null",
    "empty": b"",
    "negative": _with(num_hidden_layers=-4),
    "zero": _with(num_attention_heads=0),
    "float": _with(head_dim=64.5),
    "bool": _with(num_key_value_heads=True),
    "string-value": _with(hidden_size="4096"),
    "text-config-list": json.dumps({"text_config": [1]}).encode(),
    "dtype-list": _with(torch_dtype=["bfloat16"]),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
@pytest.mark.parametrize("output", ["text", "json"])
def test_malformed_model_config_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, output: str
) -> None:
    config = tmp_path / "config.json"
    config.write_bytes(MALFORMED[name])

    code = main(["estimate", "--model", str(config), "--seq-len", "4096", "--format", output])
    captured = capsys.readouterr()

    if name == "dtype-list":  # an unknown dtype falls back to the default: still a valid estimate
        assert code == 0, captured.err
        return
    assert code == 2, captured.out
    assert captured.err.startswith("collcheck: error: "), captured.err
    assert "Traceback" not in captured.err
    assert len(captured.err) < 2000  # the message names the problem, it does not echo the input


@pytest.mark.parametrize("flag", ["--batch", "--seq-len", "--layers"])
def test_absurd_flags_are_exit_2(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    model = str(REPO / "fixtures" / "models" / "llama-3-8b.json")
    argv = ["estimate", "--model", model, "--seq-len", "4096", flag, str(10**300)]

    code = main(argv)
    captured = capsys.readouterr()

    assert code == 2, captured.out
    assert captured.err.startswith("collcheck: error: ")


def test_a_config_within_bounds_still_estimates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_bytes(_with(num_hidden_layers=2**39))

    assert main(["estimate", "--model", str(config), "--seq-len", "4096"]) == 0
    capsys.readouterr()
