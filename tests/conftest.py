"""Shared fixtures: the real SmolLM2 (fp32, for exactness), tiny random-init models (for fast shape and edge
tests), and real prompts from GSM8K held-out, MT-bench and HumanEval rendered with the chat template."""

from __future__ import annotations

import pytest
import torch

from fastforward.core.decoder import GenerationConfig
from fastforward.data import load_dataset, render_prompt
from fastforward.eval.distribution import tiny_model
from fastforward.models.loading import LoadedModel, load_model


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    """A test that runs the CLI in-process may set torch's threads (bench picks the free cores when the
    machine is busy); put them back so one busy moment does not slow every later test."""
    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def smollm2() -> LoadedModel:
    return load_model("smollm2-135m", "float32", threads=2)


@pytest.fixture(scope="session")
def real_prompts(smollm2: LoadedModel) -> list[list[int]]:
    """24 real prompts: 8 GSM8K held-out, 8 MT-bench first turns, 8 HumanEval."""
    samples = load_dataset("gsm8k", 8) + load_dataset("mtbench", 8) + load_dataset("humaneval", 8)
    return [render_prompt(smollm2.tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in samples]


def make_tiny(arch: str = "llama", vocab: int = 512, seed: int = 0) -> LoadedModel:
    """A random-init 2-layer model of the given architecture; tokenizer-free (ids only)."""
    return tiny_model(arch, vocab, seed)


@pytest.fixture()
def tiny() -> LoadedModel:
    return make_tiny()


def greedy_config(n: int, eos: tuple[int, ...] = ()) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=n, eos_token_ids=eos)
