"""The engine's static KV cache (:class:`fastforward.core.cache.SlotCache` behind
:class:`fastforward.core.engine.ModelEngine`): writes in place, rollback is a length, committing a tree path
moves only the off-chain nodes, capacity grows when a request outgrows its estimate. Each test compares
logits with a cache-free full forward or with a fresh prefill, bitwise in fp32 where the arithmetic is the
same, on tiny random-init models (Llama, Qwen2, and a Gemma 3 with a sliding window shorter than the
sequence)."""

from __future__ import annotations

import pytest
import torch

from fastforward.core.cache import SlotCache, SlotLayer, cache_length
from fastforward.core.engine import Block, ModelEngine
from tests.conftest import make_tiny
from tests.test_sliding_window import make_gemma

PROMPT = [5, 17, 33, 2, 90, 41, 7, 64, 12, 3, 28]


def full_logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """Logits after every token of ``ids`` from one cache-free forward: the reference no cache can bend."""
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]


@pytest.fixture(params=["llama", "qwen2", "gemma3"])
def model(request) -> torch.nn.Module:
    return make_gemma().model if request.param == "gemma3" else make_tiny(request.param, vocab=96).model


def test_model_writes_through_the_slot_layers(model):
    """Canary for transformers' cache contract: the model calls our layers' ``update`` with [B, H, q, D]
    and reads back the used slots, so a release that bypasses them fails here, not as wrong tokens."""
    engine = ModelEngine(model)
    with torch.inference_mode():
        engine.start(torch.tensor([PROMPT]), capacity=64)
        layers = engine.cache.layers
        assert layers and all(isinstance(layer, SlotLayer) for layer in layers)
        assert all(layer.length == len(PROMPT) and layer.keys.shape[2] == 64 for layer in layers)
        engine.forward([Block.chain([1, 2, 3])])
    assert all(layer.length == len(PROMPT) + 3 for layer in layers)
    assert cache_length(engine.cache) == len(PROMPT) + 3


def test_steps_equal_one_full_forward(model):
    """Chain steps after the prompt, each keeping a prefix of its block (a rollback of the rest): every
    step's logits equal the cache-free forward over the whole sequence (on Gemma the window of the sliding
    layers is shorter than the sequence)."""
    engine = ModelEngine(model)
    with torch.inference_mode():
        out = engine.start(torch.tensor([PROMPT]), capacity=len(PROMPT) + 40)
        seq = [*PROMPT, int(out.logits[0, -1].argmax())]  # the anchor: committed, not yet cached
        for guesses, kept in [([8, 9, 10, 11], 2), ([44, 45], 3), ([70, 71, 72, 73, 74], 1)]:
            assert engine.lengths == [len(seq) - 1]
            step = engine.forward([Block.chain([seq[-1], *guesses])])
            ref = full_logits(model, seq + guesses)[-len(guesses) - 1 :]
            torch.testing.assert_close(step.logits[0], ref, rtol=1e-4, atol=1e-5)
            engine.keep([list(range(kept))])
            seq = seq + guesses[: kept - 1] + [int(step.argmax[0][kept - 1])]


def test_truncate_is_a_length(model):
    """Rolling back a row moves its length (and the cache's, for one row) and nothing else: a forward after
    a rollback into the prompt reads none of the stale guesses left in the slots after it."""
    engine = ModelEngine(model)
    with torch.inference_mode():
        engine.start(torch.tensor([PROMPT]), capacity=64)
        keys = engine.cache.layers[0].keys
        engine.forward([Block.chain([PROMPT[-1], 60, 61, 62, 63])])
        engine.keep([[0, 1, 2, 3, 4]])
        engine.truncate(0, len(PROMPT) - 3)
        assert engine.lengths == [len(PROMPT) - 3] and cache_length(engine.cache) == len(PROMPT) - 3
        after = engine.forward([Block.chain(PROMPT[-3:] + [50])]).logits[0]
    assert engine.cache.layers[0].keys is keys  # in place: the buffer was never replaced
    torch.testing.assert_close(after, full_logits(model, PROMPT + [50])[-4:], rtol=1e-4, atol=1e-5)


def test_keeping_a_tree_path_equals_feeding_the_path(model):
    """Commit an off-chain tree path (nodes move to the slots after the prefix), then step: the logits equal
    those after feeding the same path as a chain."""
    tree = Block([PROMPT[-1], 20, 21, 22, 23, 24], [-1, 0, 0, 2, 2, 4])  # path 0 -> 2 -> 4 -> 5
    path = [0, 2, 4, 5]
    chain = [tree.tokens[i] for i in path]
    with torch.inference_mode():
        a = ModelEngine(model)
        a.start(torch.tensor([PROMPT[:-1]]), capacity=64)
        a.forward([tree])
        a.keep([path])
        b = ModelEngine(model)
        b.start(torch.tensor([PROMPT[:-1]]), capacity=64)
        b.forward([Block.chain(chain)])
        b.keep([list(range(len(chain)))])
        assert a.lengths == b.lengths == [len(PROMPT) - 1 + len(path)]
        got = a.forward([Block.chain([30, 31])]).logits[0]
        ref = b.forward([Block.chain([30, 31])]).logits[0]
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(
        got, full_logits(model, PROMPT[:-1] + chain + [30, 31])[-2:], rtol=1e-4, atol=1e-5
    )


def test_capacity_grows_mid_request(model):
    """A request that outgrows the slots it reserved gets a longer buffer (used slots copied once), and
    decoding goes on unchanged."""
    engine = ModelEngine(model)
    seq = list(PROMPT)
    with torch.inference_mode():
        engine.start(torch.tensor([seq]), capacity=len(seq) + 2)
        before = engine.cache.layers[0].keys.shape[2]
        block = [seq[-1], 3, 4, 5, 6, 7]
        out = engine.forward([Block.chain(block)])
    assert engine.cache.layers[0].keys.shape[2] > before
    torch.testing.assert_close(out.logits[0], full_logits(model, seq + block)[-6:], rtol=1e-4, atol=1e-5)


def test_rows_joined_at_different_lengths_equal_batch_one(model):
    """Rows of different lengths in one static cache (joined by :meth:`ModelEngine.add`, one row later
    truncated) give each row the logits it gets alone."""
    from fastforward.core.engine import prefill

    prompts = [PROMPT, PROMPT[:5], [9, 8, 7, 6, 5, 4, 3, 2]]
    engine = ModelEngine(model)
    blocks = [Block.chain([1, 2, 3]), Block([4, 5, 6], [-1, 0, 0]), Block.chain([7])]
    with torch.inference_mode():
        for p in prompts:
            cache, _ = prefill(model, torch.tensor([p]))
            engine.add(cache, len(p))
        assert isinstance(engine.cache, SlotCache)
        engine.truncate(0, 7)
        got = engine.forward(blocks).logits
        for r, (p, blk) in enumerate(zip([PROMPT[:7], *prompts[1:]], blocks, strict=True)):
            alone = ModelEngine(model)
            alone.start(torch.tensor([p]))
            ref = alone.forward([blk]).logits[0]
            torch.testing.assert_close(got[r], ref, rtol=1e-4, atol=1e-5)


def test_a_prompt_prefilled_in_chunks_equals_one_forward(model):
    """A long prompt goes in several forwards (each after the cache the earlier ones filled): the first
    token's logits, every position's hidden states and the next step equal a cache-free full forward (the
    Gemma 3 model's window of 6 is shorter than a chunk of 7 and than the prompt)."""
    from fastforward.core.engine import prefill

    prompt = PROMPT * 3  # 33 tokens: chunks of 7, 7, 7, 7, 5
    ref = full_logits(model, prompt + [9])
    with torch.inference_mode():
        _, whole = prefill(model, torch.tensor([prompt]), hidden=True, cache=SlotCache(64), chunk=512)
        cache, out = prefill(model, torch.tensor([prompt]), hidden=True, cache=SlotCache(64), chunk=7)
        assert cache_length(cache) == len(prompt)
        torch.testing.assert_close(out.logits[0, -1], ref[len(prompt) - 1], rtol=1e-4, atol=1e-4)
        assert len(out.hidden_states) == len(whole.hidden_states)
        for mine, one in zip(out.hidden_states, whole.hidden_states, strict=True):
            assert mine.shape == one.shape == (1, len(prompt), one.shape[-1])
            torch.testing.assert_close(mine, one, rtol=1e-4, atol=1e-4)
        nxt = model(input_ids=torch.tensor([[9]]), past_key_values=cache, use_cache=True).logits[0, -1]
    torch.testing.assert_close(nxt, ref[-1], rtol=1e-4, atol=1e-4)


def test_the_head_reads_only_the_kept_positions_and_as_a_tensor_of_their_own(model):
    """``keep=1`` gives the last position's logits, equal to a full forward's, and the LM head receives that
    row as a tensor of its own (strides of its own shape): a view into the whole prompt's hidden states
    sends torch's CPU ``linear`` down a path that copies the head's weight on every call."""
    from fastforward.core.call import kept_positions, model_call

    assert kept_positions(torch.zeros(1, 5, dtype=torch.long), 0) == 0
    assert kept_positions(torch.zeros(1, 5, dtype=torch.long), 5) == 5
    assert kept_positions(torch.zeros(1, 5, dtype=torch.long), 2).tolist() == [3, 4]
    seen = []
    hook = model.get_output_embeddings().register_forward_hook(lambda m, args, out: seen.append(args[0]))
    try:
        with torch.inference_mode():
            out = model_call(model, torch.tensor([PROMPT]), None, None, SlotCache(32), keep=1)
    finally:
        hook.remove()
    (x,) = seen
    assert x.shape[1] == 1 and x.stride() == torch.empty(x.shape).stride()
    torch.testing.assert_close(out.logits[0, -1], full_logits(model, PROMPT)[-1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("chunk", [10, 512])
def test_the_compiled_fixed_cache_prefills_in_chunks_too(chunk):
    """The compiled path's prefill (the fixed cache, explicit masks) in chunks of up to 32 tokens (the
    decoding-width attention) or all at once (SDPA; the mask then covers only the filled slots and the
    attention reads no more of the cache): the same first token's logits and the same next step as the
    eager engine given the whole prompt at once."""
    import fastforward.core.engine as engine_module
    from fastforward.core.engine import compile_forward

    eager, fast = make_tiny("llama", vocab=96, seed=3), make_tiny("llama", vocab=96, seed=3)
    runner = compile_forward(fast.model, capacity=256, mode=None)
    prompt = PROMPT * 3
    with torch.inference_mode():
        ref = ModelEngine(eager.model)
        want = ref.start(torch.tensor([prompt]), capacity=64)
        engine = ModelEngine(fast.model)
        engine._runner, engine.cache = runner, runner.acquire(len(prompt) + engine_module.BUCKETS[-1])
        got = engine._fixed_prefill(torch.tensor([prompt]), hidden=False, chunk=chunk)  # 10, 10, 10, 3 or 33
        assert engine.lengths == [len(prompt)]
        torch.testing.assert_close(got.logits[0, -1], want.logits[0, -1], rtol=1e-4, atol=1e-4)
        step, ref_step = engine.forward([Block.chain([9, 4])]), ref.forward([Block.chain([9, 4])])
        torch.testing.assert_close(step.logits[0], ref_step.logits[0], rtol=1e-4, atol=1e-4)
        engine.reset()


def _reference_inputs(lengths, blocks, cache_len, k, slots, pad_id=0):
    """block_inputs over a fixed span, spelled out slot by slot (the definition the fast paths must meet)."""
    from fastforward.core.masks import tree_depths, tree_visibility

    b = len(blocks)
    ids = torch.full((b, k), pad_id, dtype=torch.long)
    pos = torch.zeros((b, k), dtype=torch.long)
    allowed = torch.zeros((b, k, slots), dtype=torch.bool)
    for r, (n, blk) in enumerate(zip(lengths, blocks, strict=True)):
        m = len(blk.tokens)
        ids[r, :m] = torch.tensor(blk.tokens)
        pos[r, :m] = torch.tensor(tree_depths(blk.parents)) + n
        pos[r, m:] = n
        vis = tree_visibility(blk.parents)
        for i in range(k):
            allowed[r, i, :n] = True  # its own prefix, never another row's or stale slots
            allowed[r, i, cache_len + i] = True  # itself (a pad node: only itself and the prefix)
            for j in range(m):
                if i < m and vis[i, j]:
                    allowed[r, i, cache_len + j] = True
    return ids, pos, allowed


@pytest.mark.parametrize("case", ["ar", "full chain", "short chain", "tree", "two rows"])
def test_fixed_span_inputs_match_their_definition(model, case):
    """The inputs of a compiled step (a fixed span of cache slots): the plain-chain fast path (a slice of a
    causal mask made once) and the batched build give the slot-by-slot definition, on full-attention and
    sliding-window models alike."""
    from fastforward.core.engine import block_inputs

    blocks, lengths, width = {
        "ar": ([Block.chain([7])], [9], 1),
        "full chain": ([Block.chain([7, 8, 9, 10])], [9], 4),
        "short chain": ([Block.chain([7, 8, 9])], [9], 8),
        "tree": ([Block([7, 8, 9, 10, 11], [-1, 0, 0, 1, 2])], [9], 8),
        "two rows": ([Block([7, 8, 9], [-1, 0, 0]), Block.chain([5, 6])], [6, 9], 4),
    }[case]
    slots = 32
    ids, pos, mask = block_inputs(model, lengths, blocks, 9, 0, torch.float32, "cpu", width=width, span=slots)
    want_ids, want_pos, allowed = _reference_inputs(lengths, blocks, 9, width, slots)
    assert torch.equal(ids, want_ids) and torch.equal(pos, want_pos)
    masks = mask.values() if isinstance(mask, dict) else [mask]
    full = [m for m in masks if torch.equal(m[:, 0] == 0, allowed)]  # a sliding layer's mask may hide more
    assert len(full) == 1 and all(m.shape == (len(blocks), 1, width, slots) for m in masks)
    assert all(m.is_contiguous() for m in masks)


def test_forward_argmax_is_the_first_maximum_of_the_fed_positions():
    """Greedy tokens are ``max``'s indices (faster than ``argmax`` on bfloat16): ties go to the first index,
    as argmax breaks them, and a compiled bucket's padded positions are not read."""
    from fastforward.core.engine import Forward

    logits = torch.zeros(2, 4, 6, dtype=torch.bfloat16)
    logits[0, 0, [2, 4]] = 1.0  # a tie: the first index wins
    logits[0, 1, 5] = 1.0
    logits[1, 0, [1, 3]] = 2.0
    logits[:, 2:] = float("nan")  # padding past the longest block: never read
    fwd = Forward(logits, [2, 1], None, 8, 0.0)
    assert fwd.argmax == [[2, 5], [1]]
    assert fwd.argmax[0] == logits[0, :2].argmax(-1).tolist()
