"""Token Recycling (``recycle``): the adjacency matrix and the tree it grows as pure pieces, then the decoder on
tiny models (greedy identical to AR with EOS and the length cap inside a tree, an empty matrix, persistence,
a seed that reproduces). Real-prompt exactness is in tests/test_defaults_exact.py, sampling in
tests/test_sampling_methods.py, the one-line option errors in tests/test_cli_bad_inputs.py."""

from __future__ import annotations

import pytest
import torch

from fastforward.chimera.tree import build_tree
from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.decoders.recycle import Adjacency, RecycleDecoder, RecycleOptions, expand
from fastforward.decoders.registry import build_decoder
from fastforward.errors import FastForwardError

from .conftest import greedy_ar, greedy_config, make_tiny

# repetitive prompts: the matrix learns the pattern from the prompt and the target's own outputs
PROMPTS = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [11, 12, 13, 11, 12, 13, 11], list(range(20, 40))]


def test_seed_learns_bigrams_only_where_a_row_is_empty_and_update_overwrites_rows() -> None:
    m = Adjacency(vocab=10, k=3)
    assert m.known() == 0 and m.rows([4]) == [[-1, -1, -1]]
    m.seed([1, 2, 1, 3])  # 1 -> 2 (first seen) or 3: one of them, never both
    assert m.rows([1])[0][0] in (2, 3) and m.rows([1])[0][1:] == [-1, -1]
    assert m.rows([2]) == [[1, -1, -1]] and m.known() == 2
    logits = torch.zeros(2, 10)
    logits[0, [7, 8, 9]] = torch.tensor([3.0, 2.0, 1.0])
    logits[1, [4, 5, 6]] = torch.tensor([1.0, 3.0, 2.0])
    m.update([2, 3], logits)
    assert m.rows([2, 3]) == [[7, 8, 9], [5, 6, 4]]
    m.seed([2, 0])  # a row the target filled is not replaced by a bigram
    assert m.rows([2]) == [[7, 8, 9]]
    m.reset()
    assert m.known() == 0


def test_expand_follows_each_parents_row_by_rank_and_drops_unknown_subtrees() -> None:
    m = Adjacency(vocab=10, k=2)
    m.ids[1] = torch.tensor([2, 3], dtype=torch.int32)
    m.ids[2] = torch.tensor([4, -1], dtype=torch.int32)  # rank 1 after 2 never seen
    m.ids[3] = torch.tensor([-1, -1], dtype=torch.int32)
    tree = build_tree([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])
    tokens, parents, depth = expand(tree, 1, m)
    # root 1 -> 2 (rank 0), 3 (rank 1); 2 -> 4; (0, 1) and (1, 0) unknown; 4's row empty: (0, 0, 0) dropped
    assert tokens == [1, 2, 3, 4] and parents == [-1, 0, 0, 1] and depth == 2
    assert expand(tree, 9, m) == ([9], [-1], 0)  # an empty row: no tree, an AR step


@pytest.mark.parametrize("tree", ["static", "auto"])
def test_greedy_recycle_equals_ar_with_eos_and_the_cap_inside_a_tree(tree: str) -> None:
    tiny = make_tiny()
    full = [greedy_ar(tiny.model, p, 24) for p in PROMPTS]
    eos = (full[0][9],)  # a token that occurs mid-generation
    cfg = greedy_config(24, eos)
    dec = RecycleDecoder(tiny.model, RecycleOptions(tree=tree), verify_curve=lambda k: 1.0)  # wide is free
    extras = []
    for _ in range(2):  # the second pass reads a matrix the first one filled
        for p in PROMPTS:
            res = dec.generate(p, cfg)
            assert res.tokens == greedy_ar(tiny.model, p, 24, eos)
            extras.append(res.stats.extras)
    assert sum(e["recycle_tree_steps"] for e in extras) > 0
    assert sum(sum(e["recycle_accepted_hist"][1:]) for e in extras) > 0  # trees were partly accepted
    assert dec.matrix.known() > 0
    dec.reopen_estimates()  # a bench's warm-up must not teach the measured run
    assert dec.matrix.known() == 0


def test_an_empty_matrix_without_persistence_starts_each_request_from_its_prompt() -> None:
    tiny = make_tiny()
    dec = RecycleDecoder(tiny.model, RecycleOptions(tree="static", persist=False))
    first = dec.generate([3], greedy_config(6))  # a one-token prompt: no bigram, only the prefill's row
    assert first.tokens == greedy_ar(tiny.model, [3], 6)
    learned = first.stats.extras["recycle_rows_learned"]
    assert learned > 0
    assert dec.matrix.known() == 0  # each request learned into a matrix of its own; nothing was kept
    again = dec.generate([3], greedy_config(6))
    assert again.tokens == first.tokens and again.stats.extras["recycle_rows_learned"] == learned


def test_a_seed_reproduces_whatever_the_matrix_learned_before() -> None:
    tiny = make_tiny()
    dec = RecycleDecoder(tiny.model, RecycleOptions(tree="static"))
    cfg = GenerationConfig(16, (), SamplingConfig(temperature=1.0, seed=5))
    a = dec.generate(PROMPTS[0], cfg).tokens
    dec.generate(PROMPTS[1], greedy_config(16))  # the shared matrix moves on
    assert dec.generate(PROMPTS[0], cfg).tokens == a


def test_options_are_checked_in_one_line() -> None:
    tiny = make_tiny()
    with pytest.raises(FastForwardError, match="ranks .* must be <= topk"):
        build_decoder("recycle", tiny, None, {"ranks": 9, "topk": 8})
    with pytest.raises(FastForwardError, match="too many to score"):
        build_decoder("recycle", tiny, None, {"ranks": 8, "depth": 8})
    with pytest.raises(FastForwardError, match="tree"):
        build_decoder("recycle", tiny, None, {"tree": "huge"})
