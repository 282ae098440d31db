"""Chimera draft model: trigrams, the LRU trigram cache, the training mask, and train/inference agreement."""

from __future__ import annotations

import pytest
import torch

from fastforward.chimera.model import (
    ChimeraConfig,
    ChimeraDraft,
    TrigramLRU,
    training_mask,
    trigram_ids,
    trigram_inputs,
    vocab_parameter_bytes,
)


def test_first_two_trigrams_collapse_to_unigram_and_bigram():
    toks = [5, 6, 7, 8]
    assert trigram_ids(toks, 0) == (-1, -1, 5)
    assert trigram_ids(toks, 1) == (-1, 5, 6)
    assert trigram_ids(toks, 3) == (6, 7, 8)
    emb = torch.arange(1, 9, dtype=torch.float32).view(1, 4, 2)  # e(x_i) = [2i+1, 2i+2]
    t = trigram_inputs(emb)  # [1, 4, 6]
    assert t[0, 0].tolist() == [0, 0, 0, 0, 1, 2]
    assert t[0, 1].tolist() == [0, 0, 1, 2, 3, 4]
    assert t[0, 3].tolist() == [3, 4, 5, 6, 7, 8]


def test_lru_evicts_least_recently_used_and_counts_hits():
    lru = TrigramLRU(2)
    a, b, c = (1, 2, 3), (2, 3, 4), (3, 4, 5)
    assert lru.get(a) is None
    lru.put(a, torch.zeros(1))
    lru.put(b, torch.ones(1))
    assert lru.get(a) is not None  # a is now the most recent
    lru.put(c, torch.ones(1))  # evicts b
    assert lru.get(b) is None and lru.get(c) is not None and lru.get(a) is not None
    assert len(lru.entries) == 2
    assert (lru.hits, lru.lookups) == (3, 5)
    assert lru.hit_rate == pytest.approx(0.6)
    with pytest.raises(ValueError):
        TrigramLRU(0)


def test_training_mask_hides_future_trigrams_and_late_target_states():
    m = training_mask(4, 2)  # [2*4, 8]: keys = 4 target states then 4 trigrams
    assert m.shape == (8, 8)
    llm, tri = m[:, :4], m[:, 4:]
    # head 0, query j: target states <= j-1, trigrams <= j
    assert llm[:4].int().tolist() == [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]]
    assert tri[:4].int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    # head 1: one target state less (it drafts one token further from the target's last state)
    assert llm[4:].int().tolist() == [[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0]]
    assert torch.equal(tri[4:], tri[:4])


def _random_draft(variant: str = "chimera", vocab: str = "shared", seed: int = 0) -> ChimeraDraft:
    torch.manual_seed(seed)
    d, v = 32, 50
    cfg = ChimeraConfig(hidden_size=d, vocab_size=v, num_heads=3, variant=variant, vocab=vocab, attn_heads=2)
    draft = ChimeraDraft(cfg, torch.randn(v, d), torch.randn(v, d))
    for head in draft.heads:  # make the residual correction non-trivial
        torch.nn.init.normal_(head.w2.weight, std=0.2)
    return draft.eval()


@pytest.mark.parametrize("variant", ["chimera", "no_residual", "medusa"])
def test_teacher_forced_training_pass_equals_inference_chain(variant):
    """The training mask reproduces exactly what each head sees when drafting (cached keys, LRU, chain)."""
    draft = _random_draft(variant)
    length, n = 12, 6
    ids = torch.randint(0, 50, (1, length), generator=torch.Generator().manual_seed(1))
    h = torch.randn(1, length, 32)
    with torch.no_grad():
        z, _ = draft(ids, h)  # [1, K, L, d]
        state = draft.new_state(4)
        state.observe(ids[0, :3].tolist(), h[0, :2])  # commit in two chunks, like prefill + one step
        state.observe(ids[0, 3 : n + 1].tolist(), h[0, 2:n])
        top_ids, top_p = state.propose(5, force=ids[0, n + 1 : n + 3].tolist())
    for k in range(3):
        p = draft.logits(z[0, k, n + k], k).softmax(-1)
        ref = p.topk(5)
        assert torch.equal(top_ids[k], ref.indices)
        assert torch.allclose(top_p[k], ref.values, atol=1e-5)
    assert (state.cache.lookups > 0) == (variant != "medusa")  # Medusa heads read no trigrams
    with torch.no_grad():  # a shallow tree runs only its first heads, which propose what they did before
        short, short_p = state.propose(5, force=ids[0, n + 1 : n + 3].tolist(), depth=2)
    assert short.shape == (2, 5) and torch.equal(short, top_ids[:2])
    assert torch.allclose(short_p, top_p[:2])


def test_untrained_heads_predict_through_the_lm_head_and_own_vocab_starts_equal():
    shared, own = _random_draft(vocab="shared"), _random_draft(vocab="own")
    z = torch.randn(4, 32)
    assert torch.allclose(shared.logits(z, 1), own.logits(z, 1))
    assert (
        sum(p.numel() for p in own.parameters()) - sum(p.numel() for p in shared.parameters()) == 3 * 50 * 32
    )
    assert "embed" not in shared.state_dict() and "lm_head" not in shared.state_dict()


def test_vocab_memory_accounting():
    assert vocab_parameter_bytes(576, 49152, 4, "shared") == 0
    assert vocab_parameter_bytes(576, 49152, 4, "own") == 4 * 576 * 49152 * 4  # 453 MB fp32
    assert vocab_parameter_bytes(896, 151936, 4, "own", bytes_per=2) == 4 * 896 * 151936 * 2


@pytest.mark.parametrize("vocab", ["shared", "own"])
def test_restricted_heads_propose_the_best_ids_of_their_subset(vocab):
    """restrict_vocab: every proposed id lies in the subset and equals the full head's best subset ids."""
    from fastforward.core.vocab import VocabSubset

    draft = _random_draft(vocab=vocab)
    keep = torch.tensor([1, 4, 7, 9, 13, 20, 22, 31, 40, 49])
    ids = torch.randint(0, 50, (1, 10), generator=torch.Generator().manual_seed(2))
    h = torch.randn(1, 10, 32)
    with torch.no_grad():
        z, _ = draft(ids, h)
        draft.restrict_vocab(VocabSubset(keep, 50))
        state = draft.new_state(8)
        state.observe(ids[0, :7].tolist(), h[0, :6])
        top_ids, _ = state.propose(3, force=ids[0, 7:9].tolist())
        draft.restrict_vocab(None)
        full = [draft.logits(z[0, k, 6 + k], k) for k in range(3)]
    assert set(top_ids.flatten().tolist()) <= set(keep.tolist())
    for k in range(3):
        assert top_ids[k].tolist() == keep[full[k][keep].topk(3).indices].tolist()
