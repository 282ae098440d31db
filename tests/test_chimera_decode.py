"""Chimera decoding: greedy tree verification is exactly AR (untrained draft on real prompts, oracle drafts
that force partial and off-chain acceptance), chain mode, typical mode is opt-in and lossy, clear errors."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fastforward.chimera.model import TrigramLRU
from fastforward.chimera.train import new_draft
from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.core.options import check_config
from fastforward.decoders.ar import ARDecoder
from fastforward.decoders.chimera import ChimeraDecoder, ChimeraOptions, build
from fastforward.errors import FastForwardError

from .conftest import HALVES, greedy_ar, greedy_config, make_tiny


class OracleDraft:
    """Proposes the true continuation (from a reference AR run) at rank ``ranks[k]`` for head k; junk elsewhere."""

    def __init__(self, reference: list[int], ranks: list[int], vocab: int) -> None:
        self.reference, self.ranks, self.vocab = reference, ranks, vocab
        self.cfg = SimpleNamespace(num_heads=len(ranks))

    def new_state(self, capacity: int) -> OracleState:
        return OracleState(self)


class OracleState:
    def __init__(self, oracle: OracleDraft) -> None:
        self.oracle, self.tokens, self.cache = oracle, [], TrigramLRU(1)

    def observe(self, tokens: list[int], hidden) -> None:
        assert hidden.shape[0] == len(tokens) - (1 if not self.tokens else 0)
        self.tokens += tokens

    def propose(self, top_k: int, depth: int | None = None):
        import torch

        o, n = self.oracle, len(self.tokens)
        rows = []
        for k, rank in enumerate(o.ranks[:depth]):
            true = o.reference[n + k] if n + k < len(o.reference) else 0
            row = [(true + 1 + r) % o.vocab for r in range(top_k)]
            if rank < top_k:
                row[rank] = true
            rows.append(row)
        return torch.tensor(rows), torch.full((len(rows), top_k), 1.0 / top_k)


def _reference(model, prompt: list[int], n: int, eos=()) -> list[int]:
    return list(prompt) + greedy_ar(model, prompt, n, eos)


@pytest.mark.parametrize(
    ("ranks", "tree", "per_forward"),
    [
        ([0, 0, 0, 0], "default", 5),  # the top-1 chain is right: 4 drafts + bonus per forward
        ([0, 0, 1, 0], "default", 5),  # the right path leaves the chain at depth 3: (0, 0, 1, 0)
        ([1, 5, 5, 5], "default", 2),  # only (1,) is right: the cache keeps a non-prefix path
        ([0, 0, 1, 0], "chain", 3),  # the chain stops where the oracle leaves rank 0
        ([0, 0, 0, 0], "auto", None),  # cost-sized trees: exact whatever tree each step picks
        ([1, 0, 2, 0], "auto", None),
    ],
)
def test_oracle_drafts_commit_exactly_the_ar_tokens_on_tiny(ranks, tree, per_forward):
    tiny = make_tiny()
    prompt, n = list(range(3, 15)), 31
    ref = _reference(tiny.model, prompt, n)
    # auto: a flat cost curve (a wide forward costs a narrow one), not one measured under whatever else runs,
    # so the trees it picks follow the oracle's ranks and not the load of the machine
    flat = (lambda k: 10.0) if tree == "auto" else None
    dec = ChimeraDecoder(tiny.model, OracleDraft(ref, ranks, 512), ChimeraOptions(tree=tree), flat)
    res = dec.generate(prompt, greedy_config(n))
    assert res.tokens == ref[len(prompt) :]
    if per_forward is None:  # auto: the sizer learns the oracle's ranks, so most steps commit several
        assert res.stats.extras["tree"] == "auto"
        assert res.stats.mean_accepted_tokens > 2.0
        return
    assert res.stats.accepted_per_step[0] == 1  # the prefill
    assert res.stats.accepted_per_step[1:-1] == [per_forward] * (len(res.stats.accepted_per_step) - 2)
    assert sum(res.stats.accepted_per_step) == n
    depth = per_forward - 1
    assert res.stats.extras["head_accepted"][:depth] == [res.stats.extras["draft_steps"]] * depth


def test_untrained_draft_greedy_tree_equals_ar_on_tiny_with_eos():
    tiny = make_tiny()
    dec = ChimeraDecoder(tiny.model, new_draft(tiny.model), ChimeraOptions())
    ar = ARDecoder(tiny.model)
    for seed in range(4):
        prompt = [(seed * 37 + i * 11) % 500 for i in range(9)]
        full = ar.generate(prompt, greedy_config(20)).tokens
        eos = (full[7],)  # stop on a token that does occur
        cfg = greedy_config(20, eos)
        assert dec.generate(prompt, cfg).tokens == ar.generate(prompt, cfg).tokens


@pytest.mark.parametrize("half", HALVES)
def test_greedy_tree_verification_equals_ar_on_real_prompts(smollm2, real_prompts, half):
    """6 real prompts (every fourth: GSM8K, MT-bench, HumanEval; 6 more under the slow marker), fp32, an
    untrained draft: acceptance is low
    but every token must match AR (the oracle and lookup tests below add partial and full acceptance)."""
    dec = ChimeraDecoder(smollm2.model, new_draft(smollm2.model), ChimeraOptions())
    cfg = greedy_config(24, smollm2.eos_token_ids)
    lookups = 0
    for ids in real_prompts[2 * half :: 4]:
        res = dec.generate(ids, cfg)
        assert res.tokens == greedy_ar(smollm2.model, ids, 24, smollm2.eos_token_ids)
        assert res.stats.new_tokens == sum(res.stats.accepted_per_step)
        lookups += res.stats.extras["trigram_cache_lookups"]
    assert lookups > 0


# slow: partial acceptance is pinned on tiny models above; real-prompt tree exactness runs by default in
# test_greedy_tree_verification_equals_ar_on_real_prompts (37 s here)
@pytest.mark.slow
def test_oracle_partial_acceptance_is_exact_on_real_model(smollm2, real_prompts):
    cfg = greedy_config(24, smollm2.eos_token_ids)
    for ids, ranks in zip(
        real_prompts[20:24], ([0, 0, 1, 0], [1, 0, 0, 0], [0, 2, 0, 0], [0, 0, 0, 1]), strict=True
    ):
        ref = _reference(smollm2.model, ids, 24, smollm2.eos_token_ids)
        dec = ChimeraDecoder(smollm2.model, OracleDraft(ref, ranks, 49152), ChimeraOptions())
        res = dec.generate(ids, cfg)
        assert res.tokens == ref[len(ids) :]
        assert res.stats.mean_accepted_tokens > 1.5


def test_typical_acceptance_is_opt_in_and_marked_lossy():
    tiny = make_tiny()
    greedy = ChimeraDecoder(tiny.model, new_draft(tiny.model), ChimeraOptions())
    typical = ChimeraDecoder(tiny.model, new_draft(tiny.model), ChimeraOptions(accept="typical"))
    assert greedy.lossless and not typical.lossless
    res = typical.generate(list(range(5, 15)), greedy_config(16))
    assert len(res.tokens) == 16
    sampling = GenerationConfig(8, (), SamplingConfig(temperature=0.8, seed=1))
    # exact acceptance samples too (rejection sampling over the tree, tests/test_sampling_methods.py)
    g = greedy.generate(list(range(5, 15)), sampling).tokens
    assert len(g) == 8
    # seeded: tree=auto then sizes trees from the cost curve and the committed tokens, not measured times
    assert g == greedy.generate(list(range(5, 15)), sampling).tokens
    a = typical.generate(list(range(5, 15)), sampling).tokens
    assert a == typical.generate(list(range(5, 15)), sampling).tokens


def test_build_rejects_missing_heads_and_unknown_options(tmp_path):
    tiny = make_tiny()
    with pytest.raises(FastForwardError, match="heads=PATH"):
        build("chimera", tiny, None, {})
    with pytest.raises(FastForwardError, match="unknown option"):
        build("chimera", tiny, None, {"heads": str(tmp_path), "depth": 3})
    with pytest.raises(FastForwardError, match="no Chimera draft"):
        build("chimera", tiny, None, {"heads": str(tmp_path)})
    with pytest.raises(FastForwardError, match="tree"):
        check_config(ChimeraOptions(tree="dynamic"), "chimera")


def test_reduced_vocabulary_heads_keep_greedy_tree_verification_exact_on_smollm2(smollm2, real_prompts):
    """vocab=2048 (80% of corpus tokens): heads draft only frequent ids; the target still decides every token."""
    from fastforward.data.vocab_corpus import subset_for

    draft = new_draft(smollm2.model)
    draft.restrict_vocab(subset_for(smollm2.tokenizer, 2048, draft.lm_head.shape[0], smollm2.eos_token_ids))
    dec = ChimeraDecoder(smollm2.model, draft, ChimeraOptions())
    ar = ARDecoder(smollm2.model)
    cfg = greedy_config(24, smollm2.eos_token_ids)
    for ids in real_prompts[:3]:
        res = dec.generate(ids, cfg)
        assert res.tokens == ar.generate(ids, cfg).tokens


class NeverRight(OracleDraft):
    """Heads whose candidates are never the target's token: every accepted draft comes from the lookup branch."""

    def __init__(self, vocab: int, heads: int = 4) -> None:
        super().__init__([], [99] * heads, vocab)


@pytest.mark.parametrize("tree", ["auto", "default", "chain"])
def test_lookup_branch_is_exact_and_its_tokens_are_accepted_where_text_repeats(tree):
    """A prompt that holds the model's own continuation twice over: prompt lookup proposes the right tokens;
    the heads never do, so every multi-token step is the grafted branch, and output equals AR exactly."""
    tiny = make_tiny()
    seed = list(range(3, 15))
    cont = _reference(tiny.model, seed, 40)[len(seed) :]
    prompt = seed + cont + seed  # after the second copy of `seed`, lookup proposes `cont`
    ref = _reference(tiny.model, prompt, 40)
    # tree=auto on a flat cost curve: a wider forward costs nothing more, so the branch is always worth it
    flat = (lambda k: 10.0) if tree == "auto" else None  # noqa: E731
    dec = ChimeraDecoder(tiny.model, NeverRight(512), ChimeraOptions(tree=tree, lookup=6, ngram_max=4), flat)
    res = dec.generate(prompt, greedy_config(40))
    assert res.tokens == ref[len(prompt) :]
    extras = res.stats.extras
    assert extras["lookup_steps"] > 0 and extras["lookup_tokens"] > 0
    hist = extras["accepted_drafts_hist"]  # the heads are never right: every accepted draft is the branch's
    assert sum(d * n for d, n in enumerate(hist)) == extras["lookup_tokens"]
    assert res.stats.mean_accepted_tokens > 2.0  # the branch, not the heads, carries the steps
    off = ChimeraDecoder(tiny.model, NeverRight(512), ChimeraOptions(tree=tree)).generate(
        prompt, greedy_config(40)
    )
    assert off.tokens == res.tokens and off.stats.extras["lookup_steps"] == 0
    assert off.stats.mean_accepted_tokens < 1.5


def test_lookup_branch_with_eos_and_an_untrained_draft_equals_ar_on_tiny():
    tiny = make_tiny()
    ar = ARDecoder(tiny.model)
    dec = ChimeraDecoder(tiny.model, new_draft(tiny.model), ChimeraOptions(lookup=5))
    for seed in range(4):
        prompt = [(seed * 37 + i * 11) % 500 for i in range(9)] * 2
        full = ar.generate(prompt, greedy_config(30)).tokens
        cfg = greedy_config(30, (full[9],))
        assert dec.generate(prompt, cfg).tokens == ar.generate(prompt, cfg).tokens


def test_lookup_branch_keeps_greedy_exact_on_real_prompts(smollm2, real_prompts):
    """The static tree takes the branch on every step lookup finds one (tree=auto decides by measured time)."""
    dec = ChimeraDecoder(smollm2.model, new_draft(smollm2.model), ChimeraOptions(tree="default", lookup=6))
    ar = ARDecoder(smollm2.model)
    cfg = greedy_config(32, smollm2.eos_token_ids)
    steps = 0
    for ids in real_prompts[:4]:
        res = dec.generate(ids, cfg)
        assert res.tokens == ar.generate(ids, cfg).tokens
        steps += res.stats.extras["lookup_steps"]
    assert steps > 0


def test_lookup_options_are_checked():
    with pytest.raises(FastForwardError, match="ngram_min <= ngram_max"):
        check_config(ChimeraOptions(lookup=4, ngram_min=3, ngram_max=2), "chimera")
    with pytest.raises(FastForwardError, match="lookup"):
        check_config(ChimeraOptions(lookup=-1), "chimera")
