"""Shared fixtures: the real SmolLM2 (fp32, for exactness), tiny random-init models (for fast shape and edge
tests), and real prompts from GSM8K held-out, MT-bench and HumanEval rendered with the chat template."""

from __future__ import annotations

import contextlib
import os
import weakref
from pathlib import Path

import pytest
import torch

from fastforward.core.decoder import GenerationConfig
from fastforward.data import load_dataset, render_prompt
from fastforward.eval.distribution import tiny_model
from fastforward.models.loading import LoadedModel, load_model

# `make test` runs two pytest workers (pytest-xdist) on a 2-core machine: most tests run tiny models, whose
# steps are Python overhead on one core, so two at a time use both cores. Each worker's torch then gets one
# thread, so the real-model tests of the two workers share the cores instead of oversubscribing them.
TEST_THREADS = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2


def pytest_configure(config: pytest.Config) -> None:
    if torch.get_num_threads() != TEST_THREADS:
        torch.set_num_threads(TEST_THREADS)


# What the suite shares with the user's cache ($FASTFORWARD_CACHE): pulled models, compiled packages, inductor's
# kernels, vocabulary counts and llama.cpp builds (costly to make, the same for every run). Not shared: the
# measured step costs ("costs") and auto's choices ("auto").
INDUCTOR_DIR = "TORCHINDUCTOR_CACHE_DIR"
SHARED_CACHE = ("models", "compiled", "inductor", "vocab", "llamacpp")
USER_CACHE: list[Path] = []  # the cache root the session was started with (set by _own_measurements)


@pytest.fixture(scope="session", autouse=True)
def _own_measurements(tmp_path_factory: pytest.TempPathFactory):
    """The suite's own cache root: links to the user's shared folders, and empty folders for measurements.

    Why: tests measure step costs on a loaded machine (two workers, one thread each) and used to file them
    in the user's cache, where a later real run with those threads took them as this machine's costs; and a
    test could start from a user's measurements instead of its own. Each session now measures its own, and
    the two workers of one `make test` share them (the session's common temporary folder), as they shared the
    user's before."""
    from fastforward.core.compiled import inductor_cache
    from fastforward.models.cache import cache_root

    real = cache_root().absolute()  # a relative FASTFORWARD_CACHE must not make links into the tmp folder
    USER_CACHE[:] = [real]
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "fastforward-cache"
    root.mkdir(exist_ok=True)
    for name in SHARED_CACHE:
        if name in ("compiled", "inductor"):  # made by the suite's first build: kept for the next session
            (real / name).mkdir(parents=True, exist_ok=True)
        if (real / name).is_dir():
            with contextlib.suppress(FileExistsError):  # the other worker linked it first
                (root / name).symlink_to(real / name, target_is_directory=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FASTFORWARD_CACHE", str(root))
        # a test's own torch.compile too keeps inductor's kernels in a folder of this process's ISA, as the
        # engine's builds do: from torch's shared default folder, a run under the AVX2 cap read kernels an
        # uncapped run had written and the compiled attention test got garbage (session 61)
        saved = os.environ.get(INDUCTOR_DIR)
        inductor_cache(str(root))  # writes the environment itself: set again below through the monkeypatch,
        keyed = os.environ.get(INDUCTOR_DIR)  # which puts back (or unsets) the variable at the session's end
        if keyed is not None and keyed != saved:
            if saved is None:
                del os.environ[INDUCTOR_DIR]
            else:
                os.environ[INDUCTOR_DIR] = saved
            mp.setenv(INDUCTOR_DIR, keyed)
        yield root


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
    return load_model("smollm2-135m", "float32", threads=TEST_THREADS)


@pytest.fixture(scope="session")
def real_prompts(smollm2: LoadedModel) -> list[list[int]]:
    """24 real prompts: 8 GSM8K held-out, 8 MT-bench first turns, 8 HumanEval."""
    samples = load_dataset("gsm8k", 8) + load_dataset("mtbench", 8) + load_dataset("humaneval", 8)
    return [render_prompt(smollm2.tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in samples]


# The fp32 real-prompt identity tests of the heaviest methods check every other prompt in `make test` (4 per
# dataset) and the other half under the slow marker (`make bench-slow`): all 24 are still checked, and the
# default suite stays within its time budget on a 2-core AVX2-only CPU.
HALVES = [pytest.param(0, id="even"), pytest.param(1, id="odd", marks=pytest.mark.slow)]


def prepacked_refusal(dtype: torch.dtype) -> str | None:
    """Why ``--path prepacked`` cannot run ``dtype`` on this CPU (None where it can): oneDNN runs bf16 only
    with avx512bw/vl/dq or avx_ne_convert, so on AVX2-only CPUs a bf16 prepacked test skips with this reason
    and its float32 counterpart carries the check."""
    from fastforward.errors import FastForwardError
    from fastforward.models.kernels import check_path

    try:
        check_path("prepacked", dtype)
    except FastForwardError as e:
        return str(e)
    return None


def make_tiny(arch: str = "llama", vocab: int = 512, seed: int = 0) -> LoadedModel:
    """A random-init 2-layer model of the given architecture; tokenizer-free (ids only)."""
    return tiny_model(arch, vocab, seed)


@pytest.fixture()
def tiny() -> LoadedModel:
    return make_tiny()


def greedy_config(n: int, eos: tuple[int, ...] = ()) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=n, eos_token_ids=eos)


# model -> (prompt, eos, weight version) -> (greedy AR tokens, the length limit they were computed with).
# Keyed by the model object, weakly: an id() key was reused by the next tiny model once the first was
# collected, and a test then compared with another model's tokens.
_AR_MEMO: weakref.WeakKeyDictionary[torch.nn.Module, dict[tuple, tuple[list[int], int]]] = (
    weakref.WeakKeyDictionary()
)
AR_MEMO_MIN = 32  # compute at least this many tokens, so tests asking 21, 24 or 32 share one generation


def _weights_version(model: torch.nn.Module) -> int:
    """Grows with every in-place change of a parameter (an optimizer step, a load_state_dict), so a model
    trained after its reference was computed gets a fresh one."""
    return sum(p._version for p in model.parameters())


def greedy_ar(model: torch.nn.Module, prompt, n: int, eos=()) -> list[int]:
    """Greedy AR tokens of ``model`` after ``prompt`` (at most ``n``, stopping at ``eos``), computed once per
    session: the exactness tests of every method compare with the same references, and on a 2-core AVX2
    CPU recomputing them per test cost minutes. AR's first n tokens do not depend on the length limit, so one
    generation of ``max(n, AR_MEMO_MIN)`` tokens answers every shorter request."""
    from fastforward.decoders.ar import ARDecoder

    memo = _AR_MEMO.setdefault(model, {})
    ids = tuple(int(t) for t in prompt)
    key = (ids, tuple(eos), _weights_version(model))
    cached = memo.get(key)
    if cached is None or (len(cached[0]) >= cached[1] and cached[1] < n):  # not computed far enough
        limit = max(n, AR_MEMO_MIN)
        tokens = ARDecoder(model).generate(list(ids), greedy_config(limit, tuple(eos))).tokens
        cached = memo[key] = (tokens, limit)
    return list(cached[0][:n])


def assert_wider_forwards_keep_step_bits(model: torch.nn.Module, prompt: list[int]) -> None:
    """On ``model``'s compiled graphs (widths 1 and 4), after ``prompt``: a 4-token chain gives each token
    the logits of its own 1-token step, bit for bit, and so does a 3-node tree to its nodes on that path
    (the last node's ancestors are the first node and the prompt; its sibling's slot lies between them).
    Why bits: W8A8's products are exact, so a width whose float parts round otherwise can move a token
    across an int8 rounding edge and its method off its AR (tests/test_weights.py, tests/test_int8_gemm.py)."""
    from fastforward.core.engine import Block, ModelEngine

    engine = ModelEngine(model)
    with torch.inference_mode():
        engine.start(torch.tensor([prompt]), capacity=len(prompt) + 8)
        steps = []
        for t in prompt[:4]:
            steps.append(engine.forward([Block.chain([t])]).logits[0][-1].clone())
            engine.keep([[0]])
        engine.truncate(0, len(prompt))
        wide = engine.forward([Block.chain(prompt[:4])]).logits[0].clone()
        engine.truncate(0, len(prompt))
        tree = engine.forward([Block([prompt[0], 50, prompt[1]], [-1, 0, 0])]).logits[0].clone()
    assert engine.ran == "compiled"
    assert all(torch.equal(wide[i], steps[i]) for i in range(4))
    assert torch.equal(tree[0], steps[0]) and torch.equal(tree[2], steps[1])
