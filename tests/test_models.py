"""Model resolution and loading: real registry model, and every bad input a user can give."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fastforward.decoders.ar import ARDecoder
from fastforward.decoders.hf_generate import HFGenerateDecoder
from fastforward.errors import FastForwardError
from fastforward.models.loading import cache_root, is_pulled, load_model
from fastforward.models.registry import REGISTRY

from .conftest import greedy_config


def test_registry_model_loads_from_cache_with_chat_template(smollm2):
    assert smollm2.model.config.model_type == "llama"
    assert smollm2.tokenizer.chat_template
    assert smollm2.eos_token_ids and smollm2.tokenizer.decode([smollm2.eos_token_ids[0]]) == "<|im_end|>"
    assert is_pulled("smollm2-135m")


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FASTFORWARD_CACHE", str(tmp_path))
    assert cache_root() == tmp_path


def test_registry_specs_are_pinned():
    for spec in REGISTRY.values():
        assert len(spec.sha256) == 64 and spec.size > 0 and len(spec.requirements) == len(spec.packages)


@pytest.mark.parametrize(
    "ref, message",
    [
        ("/nonexistent/model", "model not found"),
        ("no-such-model-name", "model not found"),
    ],
)
def test_missing_model_is_a_clear_error(ref, message):
    with pytest.raises(FastForwardError, match=message):
        load_model(ref)


def test_broken_gguf_and_wrong_files_are_clear_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTFORWARD_CACHE", str(tmp_path / "cache"))
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(FastForwardError, match="could not read GGUF"):
        load_model(str(broken))
    txt = tmp_path / "weights.bin"
    txt.write_bytes(b"x")
    with pytest.raises(FastForwardError, match="not a .gguf"):
        load_model(str(txt))
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    with pytest.raises(FastForwardError, match="without config.json"):
        load_model(str(empty_dir))


def test_bad_dtype_is_a_clear_error():
    with pytest.raises(FastForwardError, match="dtype"):
        load_model("smollm2-135m", dtype="int3")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fastforward.cli", *args], capture_output=True, text=True)


def test_cli_missing_model_exits_2_with_one_line_and_no_traceback():
    proc = _cli("generate", "--model", "/nonexistent", "hi")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fastforward: error: model not found")
    assert "Traceback" not in proc.stderr


def test_cli_unknown_method_and_bad_limit_are_clear_errors():
    proc = _cli("bench", "--methods", "ar,warp-drive", "--limit", "1")
    assert (
        proc.returncode == 2
        and "unknown method 'warp-drive'" in proc.stderr
        and "Traceback" not in proc.stderr
    )
    proc = _cli("bench", "--limit", "0")
    assert proc.returncode == 2 and "--limit must be >= 1" in proc.stderr


def test_cli_models_list_names_every_registry_model():
    proc = _cli("models", "list")
    assert proc.returncode == 0
    for name in REGISTRY:
        assert name in proc.stdout


@pytest.mark.slow
def test_second_architecture_gemma3_generates_like_hf():
    gemma = load_model("gemma3-270m", "float32")
    assert gemma.model.config.model_type.startswith("gemma3")
    ids = gemma.tokenizer("The capital of France is")["input_ids"]
    cfg = greedy_config(16, gemma.eos_token_ids)
    assert (
        ARDecoder(gemma.model).generate(ids, cfg).tokens
        == HFGenerateDecoder(gemma.model).generate(ids, cfg).tokens
    )
