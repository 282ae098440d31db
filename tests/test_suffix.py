"""SuffixDecoding (``suffix``): the suffix trie, the best-first tree and its cost-sized prefix as pure pieces,
the global trie's memory bound, then the decoder on tiny models (greedy identical to AR with EOS inside a
tree, a repeated request copying its earlier output, scopes kept apart, seeds). Real-prompt exactness is in
tests/test_defaults_exact.py, sampling in tests/test_sampling_methods.py, API-key isolation through the
server in tests/test_serve.py."""

from __future__ import annotations

import pytest

from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.decoders.registry import build_decoder
from fastforward.decoders.suffix import (
    GlobalTries,
    SuffixDecoder,
    SuffixOptions,
    SuffixTrie,
    best_prefix,
    fill_width,
    grow_tree,
    planned,
)
from fastforward.errors import FastForwardError
from fastforward.models.costs import interpolate

from .conftest import greedy_ar, make_tiny

PROMPTS = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [11, 12, 13, 11, 12, 13, 11], list(range(20, 40))]
FREE = lambda k: 1.0  # noqa: E731 - a machine where a wide forward costs what a narrow one does


def test_the_trie_counts_every_substring_up_to_its_depth_and_matches_the_longest_suffix() -> None:
    trie = SuffixTrie(depth=3)
    trie.add([1, 2, 3, 1, 2, 4])
    one_two = trie.root.children[1].children[2]
    assert one_two.count == 2 and sorted(one_two.children) == [3, 4]
    assert not one_two.children[3].children  # depth 3: "1 2 3" grows no further
    node, n = trie.match([9, 1, 2], max_len=2)
    assert node is one_two and n == 2
    node, n = trie.match([7, 7, 4], max_len=2)  # 4 ends the text: nothing continues it
    assert node is None and n == 0


def test_remove_undoes_add_and_frees_the_nodes() -> None:
    trie = SuffixTrie(depth=4)
    trie.add([1, 2, 3])
    base = trie.nodes
    trie.add([1, 2, 9, 9, 9])
    assert trie.nodes > base
    trie.remove([1, 2, 9, 9, 9])
    assert trie.nodes == base and trie.root.children[1].children[2].count == 1
    assert 9 not in trie.root.children


def test_grow_tree_is_best_first_within_budget_and_score_floor() -> None:
    trie = SuffixTrie(depth=6)
    trie.add([1, 2, 3, 1, 2, 3, 1, 2, 4])
    node, _ = trie.match([1, 2], 2)  # after "1 2": 3 twice, 4 once
    tokens, parents, scores = grow_tree(node, budget=10, min_score=0.0)
    assert tokens[0] == 3 and parents[0] == -1 and scores[0] == pytest.approx(2 / 3)
    assert scores == sorted(scores, reverse=True)
    assert all(p < i for i, p in enumerate(parents))  # every prefix of the order is a tree
    assert len(grow_tree(node, budget=2, min_score=0.0)[0]) == 2
    assert grow_tree(node, budget=10, min_score=0.5)[0] == [3, 1, 2]  # 4 (1/3) and below left out


def test_best_prefix_takes_wide_trees_only_where_they_pay() -> None:
    scores = [0.9, 0.8, 0.3, 0.05]
    assert best_prefix(scores, FREE)[0] == 4  # free width: every node adds expected tokens
    assert best_prefix(scores, lambda k: float(k))[0] == 0  # cost linear in width: AR wins
    assert best_prefix([], FREE) == (0, 1.0)


def test_planned_nodes_are_the_budget_s_prefix_above_the_score_floor() -> None:
    scores = [0.9, 0.5, 0.2, 0.04, 0.01]
    assert planned(scores, budget=10, min_score=0.05) == 3
    assert planned(scores, budget=2, min_score=0.05) == 2
    assert planned([], budget=4, min_score=0.0) == 0


def test_fill_width_fills_a_padded_bucket_and_nothing_else() -> None:
    stairs = interpolate(
        [{"k": k, "ms": ms, "engine": "compiled-x"} for k, ms in ((1, 10), (2, 12), (4, 13), (8, 20))]
    )
    assert fill_width(2, available=9, verify_ms=stairs) == 3  # 3 tokens run the 4-token graph: one more guess
    assert fill_width(4, available=9, verify_ms=stairs) == 7  # 5 tokens run the 8-token graph: up to 8
    assert fill_width(4, available=5, verify_ms=stairs) == 5  # no more nodes than the trie gave
    assert fill_width(3, available=9, verify_ms=stairs) == 3  # already a full bucket
    assert fill_width(0, available=9, verify_ms=stairs) == 0  # an AR step stays one
    linear = interpolate([{"k": k, "ms": 10 + k} for k in (1, 2, 4, 8)])  # eager: every token costs
    assert fill_width(2, available=9, verify_ms=linear) == 2


STAIRS = interpolate(  # a compiled forward's curve: a width costs what its bucket does
    [{"k": k, "ms": ms, "engine": "compiled-x"} for k, ms in ((1, 10.0), (2, 10.5), (4, 11.0), (8, 16.0))]
)


def test_a_row_alone_fills_its_padded_bucket_with_guesses_and_still_commits_ar_s_tokens() -> None:
    tiny = make_tiny()
    dec = SuffixDecoder(tiny.model, SuffixOptions(spec_factor=2.0), verify_curve=STAIRS)
    runs = [dec.generate(p, GenerationConfig(24)) for p in PROMPTS]
    assert [r.tokens for r in runs] == [greedy_ar(tiny.model, p, 24) for p in PROMPTS]
    filled = sum(r.stats.extras["suffix_filled"] for r in runs)
    assert 0 < filled < sum(r.stats.extras["suffix_drafted"] for r in runs)
    unfilled = SuffixDecoder(tiny.model, SuffixOptions(spec_factor=2.0), verify_curve=lambda k: 10.0 + k)
    assert all(unfilled.generate(p, GenerationConfig(24)).stats.extras["suffix_filled"] == 0 for p in PROMPTS)


def test_the_global_trie_keeps_the_last_outputs_per_scope_within_its_bound() -> None:
    tries = GlobalTries(depth=4, outputs=2, scopes=2)
    tries.add("a", [1, 2, 3])
    tries.add("a", [4, 5, 6])
    only_last_two = tries.get("a").nodes
    tries.add("a", [7, 8, 9])  # the first output is evicted
    reference = SuffixTrie(4)
    reference.add([4, 5, 6])
    reference.add([7, 8, 9])
    assert tries.get("a").nodes == reference.nodes == only_last_two
    assert 1 not in tries.get("a").root.children
    tries.add("b", [1])
    tries.add("c", [1])  # three scopes, room for two: "a" (least recent) goes
    assert tries.get("a") is None and tries.get("b") is not None


def test_greedy_suffix_equals_ar_and_a_repeated_request_copies_its_earlier_output() -> None:
    tiny = make_tiny()
    eos = (greedy_ar(tiny.model, PROMPTS[0], 24)[9],)
    dec = SuffixDecoder(tiny.model, SuffixOptions(), verify_curve=FREE)
    cfg = GenerationConfig(24, eos)
    first = [dec.generate(p, cfg) for p in PROMPTS]
    again = [dec.generate(p, cfg) for p in PROMPTS]
    for p, a, b in zip(PROMPTS, first, again, strict=True):
        assert a.tokens == b.tokens == greedy_ar(tiny.model, p, 24, eos)
    assert sum(r.stats.target_forwards for r in again) < sum(r.stats.target_forwards for r in first)
    assert all(r.stats.extras["suffix_global"] == 1 for r in again)
    assert sum(r.stats.extras["suffix_from_global"] for r in again) > 0
    dec.reopen_estimates()  # a bench's warm-up must not teach the measured run
    assert dec.global_tries.nodes() == 0


def test_scopes_do_not_see_each_others_outputs_and_seeds_reproduce() -> None:
    tiny = make_tiny()
    dec = SuffixDecoder(tiny.model, SuffixOptions(), verify_curve=FREE)
    fresh = SuffixDecoder(tiny.model, SuffixOptions(), verify_curve=FREE)
    dec.generate(PROMPTS[2], GenerationConfig(24, scope="alice"))
    bob = dec.generate(PROMPTS[2], GenerationConfig(24, scope="bob"))
    alone = fresh.generate(PROMPTS[2], GenerationConfig(24, scope="bob"))
    assert bob.stats.extras["suffix_global"] == 0
    assert bob.tokens == alone.tokens and bob.stats.target_forwards == alone.stats.target_forwards
    seeded = GenerationConfig(16, sampling=SamplingConfig(temperature=1.0, seed=3), scope="alice")
    a = dec.generate(PROMPTS[0], seeded).tokens
    dec.generate(PROMPTS[0], GenerationConfig(16, scope="alice"))  # alice's history moves on
    assert dec.generate(PROMPTS[0], seeded).tokens == a


def test_options_are_checked_in_one_line() -> None:
    tiny = make_tiny()
    with pytest.raises(FastForwardError, match="max_match .* must be < depth"):
        build_decoder("suffix", tiny, None, {"max_match": 8, "depth": 8})
    with pytest.raises(FastForwardError, match="min_score"):
        build_decoder("suffix", tiny, None, {"min_score": 2})
