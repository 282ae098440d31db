"""Sliding-window models (Gemma 3 style): every method decodes past the window.

A tiny random-init Gemma 3 text model with a window of 6 and a mix of sliding and full layers; prompts are
longer than the window and the output longer again, so every rollback and every tree commit happens with a
filled window. The reference is a cache-free greedy loop (one full forward per token: the model's own
masks, no cache to get wrong); AR and ``generate()`` must equal it, and every lossless method must equal AR.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from fastforward.chimera.train import new_draft
from fastforward.core.cache import keep_positions, new_cache, rollback, sliding_window
from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.core.masks import tree_mask
from fastforward.decoders.chimera import ChimeraDecoder, ChimeraOptions
from fastforward.decoders.registry import build_decoder
from fastforward.errors import FastForwardError
from fastforward.models.loading import LoadedModel

WINDOW = 6
VOCAB = 96


def make_gemma(seed: int = 0, layers: int = 4) -> LoadedModel:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    cfg = Gemma3TextConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"] * (layers // 2),
        max_position_embeddings=512,
        query_pre_attn_scalar=16,
        eos_token_id=VOCAB - 1,
        bos_token_id=0,
        pad_token_id=0,
        attn_implementation="sdpa",
    )
    model = Gemma3ForCausalLM(cfg).eval()
    model.requires_grad_(False)
    return LoadedModel(
        name=f"tiny-gemma3-{seed}", path=Path("."), model=model, tokenizer=None, dtype="float32"
    )


@pytest.fixture(scope="module")
def gemma() -> LoadedModel:
    return make_gemma()


def near_copy(seed: int = 3) -> LoadedModel:
    """The target's weights, perturbed: a draft that agrees often but not always."""
    draft = make_gemma()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.model.parameters():
            p.mul_(1 + 0.3 * torch.randn(p.shape, generator=g))
    return draft


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    out = [torch.randint(1, VOCAB - 1, (n,), generator=g).tolist() for n in (14, 21)]
    # a repetitive prompt, so prompt lookup and lookahead's pool have something to accept
    out.append([5, 6, 7, 8, 9, 10, 11] * 3)
    return out


def reference(model: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    """Greedy tokens from full forwards without a cache: the model's own sliding masks decide."""
    seq = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            seq.append(int(model(input_ids=torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[len(prompt) :]


N = 24
GREEDY = GenerationConfig(max_new_tokens=N)


@pytest.fixture(scope="module")
def refs(gemma: LoadedModel, prompts: list[list[int]]) -> list[list[int]]:
    return [reference(gemma.model, p, N) for p in prompts]


def test_the_tiny_model_really_slides(gemma: LoadedModel, prompts: list[list[int]]) -> None:
    """The window changes the outputs on these prompts, so the tests below exercise it."""
    assert sliding_window(gemma.model) == WINDOW
    wide_cfg = copy.deepcopy(gemma.model.config)
    wide_cfg.sliding_window = 512
    wide = type(gemma.model)(wide_cfg).eval()
    wide.load_state_dict(gemma.model.state_dict())
    ids = torch.tensor([prompts[1]])
    with torch.inference_mode():
        assert not torch.allclose(gemma.model(input_ids=ids).logits[0, -1], wide(input_ids=ids).logits[0, -1])


@pytest.mark.parametrize("method", ["ar", "hf_generate"])
def test_baselines_equal_the_cache_free_reference(gemma, prompts, refs, method) -> None:
    dec = build_decoder(method, gemma)
    for p, ref in zip(prompts, refs, strict=True):
        assert dec.generate(p, GREEDY).tokens == ref


@pytest.mark.parametrize(
    ("method", "options"),
    [
        ("jacobi", {"block_size": 4, "gate": "off"}),
        ("lookahead", {"gate": "off"}),
        ("recycle", {"tree": "static"}),
        ("suffix", {"min_score": 0.0}),
        ("pld", {"gamma": 4, "gamma_auto": False}),
        ("layerskip", {"layers": 2, "gamma_auto": False}),
        ("qsd", {"gamma": 3, "bits": 4, "group_size": 32, "gamma_auto": False}),
        ("sd", {"gamma": 3, "gamma_auto": False}),
        ("hf_assisted", {}),
    ],
)
def test_lossless_methods_equal_ar_past_the_window(gemma, prompts, refs, method, options) -> None:
    """Fixed schedules (gate off, fixed gamma): every step guesses, so rollback past the window is hit."""
    dec = build_decoder(method, gemma, near_copy(), options)
    assert dec.lossless
    # suffix sizes its trees on a cost curve it measures here: on a loaded machine every tree could lose to an
    # AR step (CI once failed so, with packages building beside it); a flat curve keeps every step drafting
    if method == "suffix":
        dec.verify_curve = lambda k: 1.0
    accepted_more = False
    for p, ref in zip(prompts, refs, strict=True):
        res = dec.generate(p, GREEDY)
        assert res.tokens == ref, method
        accepted_more |= res.stats.target_forwards < len(ref)
    if method != "hf_assisted":  # its forwards are not reported
        assert accepted_more, f"{method} never accepted a guess: the test would not exercise rollback"


def test_chimera_tree_commits_past_the_window(gemma, prompts, refs) -> None:
    dec = ChimeraDecoder(gemma.model, new_draft(gemma.model), ChimeraOptions())
    for p, ref in zip(prompts, refs, strict=True):
        assert dec.generate(p, GREEDY).tokens == ref


@pytest.mark.parametrize("method", ["typical", "consultant", "sd-sample"])
def test_lossy_and_sampling_methods_run_past_the_window(gemma, prompts, method) -> None:
    draft = make_gemma(seed=3, layers=2)
    dec = build_decoder(method, gemma, draft, {"gamma": 3})
    sampling = SamplingConfig(temperature=1.0, seed=0) if method == "sd-sample" else SamplingConfig()
    cfg = GenerationConfig(max_new_tokens=N, sampling=sampling)
    for p in prompts:
        res = dec.generate(p, cfg)
        assert len(res.tokens) == N and all(0 <= t < VOCAB for t in res.tokens)
    assert dec.generate(prompts[0], cfg).tokens == dec.generate(prompts[0], cfg).tokens  # seeded


def test_tree_mask_windows_by_position_and_cache_helpers_roll_back_past_the_window(gemma, prompts) -> None:
    """Tree verification over a filled window equals plain forwards of each branch; then compacting the
    accepted branch in place leaves the cache exactly as a forward over that branch alone would."""
    model, prompt = gemma.model, prompts[1]
    ids = torch.tensor([prompt])
    branch_a, branch_b = [3, 4, 5], [7, 8]
    parents = [-1, 0, 1, -1, 3]  # a0 a1 a2 / b0 b1: two chains, each rooted in the prefix
    depths = [0, 1, 2, 0, 1]
    from fastforward.core.masks import tree_visibility

    with torch.inference_mode():
        cache = new_cache(model)
        model(input_ids=ids, past_key_values=cache, use_cache=True)
        P = len(prompt)
        toks = branch_a + branch_b
        out = model(
            input_ids=torch.tensor([toks]),
            position_ids=torch.tensor([depths]) + P,
            attention_mask=tree_mask(model, tree_visibility(parents), depths, P, torch.float32),
            past_key_values=cache,
            use_cache=True,
        ).logits[0]
        for branch, rows in ((branch_a, [0, 1, 2]), (branch_b, [3, 4])):
            plain = model(input_ids=torch.tensor([prompt + branch])).logits[0, P:]
            torch.testing.assert_close(out[rows], plain, atol=1e-4, rtol=1e-4)
        keep_positions(cache, P, [3, 4])  # keep branch b
        nxt = model(
            input_ids=torch.tensor([[9]]),
            position_ids=torch.tensor([[P + 2]]),
            past_key_values=cache,
            use_cache=True,
        ).logits[0, -1]
        plain = model(input_ids=torch.tensor([prompt + branch_b + [9]])).logits[0, -1]
        torch.testing.assert_close(nxt, plain, atol=1e-4, rtol=1e-4)
        rollback(cache, 3)  # far behind the window
        assert cache.get_seq_length() == 3


def test_a_cache_with_sliding_layers_is_refused_in_one_line(gemma, prompts) -> None:
    from transformers import DynamicCache

    cache = DynamicCache(config=gemma.model.config)  # transformers' own: sliding layers drop old entries
    with torch.inference_mode():
        gemma.model(input_ids=torch.tensor([prompts[1]]), past_key_values=cache, use_cache=True)
    with pytest.raises(FastForwardError, match=f"window {WINDOW}") as err:
        rollback(cache, 5)
    assert "\n" not in str(err.value)


def test_trajectory_collection_batches_past_the_window(gemma, prompts, refs, tmp_path) -> None:
    """The batched collector (left-padded rows, per-row windowed masks) reaches AR's fixed points."""
    from fastforward.cllm.collect import CollectConfig, PromptJob, collect_trajectories
    from fastforward.cllm.trajectories import group_by_prompt, read_records

    jobs = [PromptJob(f"p{i}", p) for i, p in enumerate(prompts)]
    out = tmp_path / "traj.jsonl"
    cfg = CollectConfig(block_size=4, max_new_tokens=N, batch_size=2)
    collect_trajectories(gemma.model, [], jobs, str(out), cfg, progress=False)  # no EOS: full length
    groups = group_by_prompt(read_records(out))
    for job, ref in zip(jobs, refs, strict=True):
        last = groups[job.prompt_id][-1]
        assert last.teacher_output_ids[len(job.prompt_ids) :] == ref
