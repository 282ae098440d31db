"""Drafters propose a chain of tokens after the committed sequence; the engine's target forward judges them.

A drafter has three verbs: ``reset()`` before a generation, ``propose(ctx) -> Proposal`` (tokens, and the
distributions they were drawn from when sampling) and ``observe(accepted)`` after the verdict. Three kinds:

- :class:`ModelDrafter`: a small model sharing the target's tokenizer, with its own KV cache kept in sync
  by comparing what it has cached with the committed sequence (rollback, never a copy); optionally with a
  reduced-vocabulary LM head (:mod:`fastforward.core.vocab`);
- :class:`PromptLookupDrafter`: n-gram matching over prompt + output (prompt lookup decoding), no model;
- :func:`shallow_view`: the target's first k layers + final norm + LM head as a model of its own (sharing
  the target's weights), driven by :class:`ModelDrafter` for self-speculative layer skipping;
- :class:`CrossTokenizerDrafter`: a draft model with a tokenizer of its own (universal assisted generation):
  the committed text is re-tokenized for the draft, and the draft's continuation for the target;
- :class:`LookupFirstDrafter`: prompt lookup where the text repeats itself, a model drafter elsewhere.

A drafter may also have ``extras() -> dict`` (counters summed into the run's stats), ``finish() -> dict``
(the row is through: what ran its draft model, and the draft's compiled cache given back) and ``models()``
(the draft models it runs whole, the ones ``--compile on`` compiles). ``fresh()`` gives
a drafter of the same configuration with state of its own (models and heads shared): one per batch row.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from fastforward.core.acceptance import common_prefix
from fastforward.core.cache import first_layers
from fastforward.core.compiled import compiled
from fastforward.core.decoder import SamplingConfig
from fastforward.core.engine import DRAFT_ROOM, ModelEngine
from fastforward.core.sampling import processed_probs, sample_from
from fastforward.core.vocab import RestrictedHead, VocabSubset
from fastforward.decoders.ngram import NGramIndex, check_ngram_range
from fastforward.errors import FastForwardError

GREEDY = SamplingConfig()  # temperature 0: how the cross-tokenizer draft drafts, whatever the target samples


@dataclass(frozen=True)
class DraftContext:
    tokens: list[int]  # committed sequence: prompt + output so far
    gamma: int  # propose at most this many tokens
    sampling: SamplingConfig
    generator: torch.Generator | None
    eos_token_ids: tuple[int, ...] = ()
    room: int = (
        DRAFT_ROOM  # tokens the request may still commit: a compiled draft sizes its fixed cache by it
    )
    # the target's engine when the row decodes alone (batch 1): a draft made of the target's first layers
    # drafts on its cache (:class:`ModelDrafter` ``shared_layers``)
    target: ModelEngine | None = None


@dataclass(frozen=True)
class Proposal:
    tokens: list[int]  # [g] draft tokens, g <= gamma (may be empty)
    probs: torch.Tensor | None = None  # [g, V] distributions the tokens were drawn from; None = deterministic


class ModelDrafter:
    """Autoregressive drafting with the draft model on an engine of its own (one row, static cache).

    With ``head`` (a :class:`RestrictedHead`), the draft runs its decoder (``get_decoder()``, public forward)
    and scores only the head's subset of the vocabulary; tokens and distributions are mapped back to full
    ids, so verifiers see nothing different (probabilities are zero outside the subset).

    With ``shared_layers`` (the draft is the target's first that many layers: layerskip's
    :func:`shallow_view`) and the target's engine in the context (the row decodes alone), the draft keeps no
    cache: it feeds the anchor and its own guesses on a layer view of the target's cache, which already holds
    those layers' keys and values for every committed token, and rolls the length back after. So drafting
    never pays a prefill of the prompt or a catch-up over tokens the target committed while the draft was off
    (session 32: 9% of a layerskip run that drafted 12 tokens). A batch row (no engine in the context) or a
    compiled target whose cache the draft's graphs cannot take drafts on a cache of its own, as any draft.

    With ``subset``, the model's own LM head already scores only that subset (:func:`head_inside`: a draft
    this decoder owns, a qsd copy or a layerskip view), so its logits index the subset as a ``head``'s do,
    but the whole model still runs as one forward: compiled, and on the target's cache."""

    def __init__(
        self,
        model: torch.nn.Module,
        stop_below: float = 0.0,
        head: RestrictedHead | None = None,
        use_compiled: bool = True,
        shared_layers: int = 0,
        subset: VocabSubset | None = None,
    ) -> None:
        self.model = model
        # the model's own LM head scores only these ids (``head_inside``): its logits index the subset
        self.subset = subset
        # a reduced head reads the decoder's hidden state, which only a cache of its own gives
        self.shared_layers = shared_layers if head is None else 0
        self.stop_below = stop_below  # stop drafting after a token the draft itself gives p < stop_below
        self.head = head
        self.use_compiled = use_compiled  # the draft's compiled 1-token graph, when it has one
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.softcap = getattr(cfg, "final_logit_softcapping", None)  # Gemma 2: applied after the head
        self.engine: ModelEngine | None = None
        self.reset()

    def reset(self) -> None:
        if self.engine is not None:
            self.engine.close()  # gives a compiled draft's fixed cache back
        self.engine = ModelEngine(self.model, self.use_compiled, widths=(1,))
        self.cached: list[int] = []  # the token ids whose KV the engine's row holds, in order

    def fresh(self) -> ModelDrafter:
        """A drafter for one row of a batch: eager, since a compiled draft's fixed cache serves one row at a
        time and a batch's rows draft side by side."""
        return ModelDrafter(self.model, self.stop_below, self.head, use_compiled=False, subset=self.subset)

    def models(self) -> list[torch.nn.Module]:
        """The draft model, run whole; none with a reduced-vocabulary head (the draft's decoder then runs
        alone, eagerly: :meth:`ModelEngine.feed`), so nothing is compiled for it."""
        return [self.model] if self.head is None else []

    def finish(self) -> dict[str, Any]:
        """The row is through: what ran the draft's forwards (for the row's stats; nothing when the draft never
        ran in this request, e.g. gamma_auto kept it off), and a compiled draft's fixed cache given back for
        the next request or another decoder on the same draft."""
        drafted = self.engine is not None and self.engine.cache is not None
        ran = self.engine.ran if drafted and compiled(self.model) is not None else None
        if self.engine is not None:
            self.engine.close()
        self.cached = []
        return {"draft_forward": ran} if ran else {}

    def _next_logits(self, feed: list[int], room: int = DRAFT_ROOM) -> torch.Tensor:
        """Logits of the next token: over the vocabulary [V], or over the head's subset [K]."""
        out = self.engine.feed(feed, head=self.head is None, room=room)
        self.cached += feed
        if self.head is None:
            return out
        logits = self.head(out)
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    def _on_target(self, ctx: DraftContext) -> bool:
        """Borrow a layer view of the target's cache for this proposal (see the class doc), when it can."""
        target = ctx.target
        if not self.shared_layers or target is None or target.cache is None:
            return False
        if target.lengths != [len(ctx.tokens) - 1]:  # not the one row, anchor uncached: draft as any draft
            return False
        if self.cached:  # a cache of its own from an earlier proposal: given back
            self.reset()
        return self.engine.borrow(first_layers(target.cache, self.shared_layers), target.lengths[0])

    def propose(self, ctx: DraftContext) -> Proposal:
        if self._on_target(ctx):
            length = ctx.target.lengths[0]
            try:
                return self._draft(ctx, ctx.tokens[-1:])
            finally:
                # the target's own length again: its next forward writes over the guesses' entries
                self.engine.truncate(0, length)
                self.cached = []
        # Keep the cached prefix that still agrees with the committed tokens; feed at least one token.
        keep = min(common_prefix(self.cached, ctx.tokens), len(ctx.tokens) - 1)
        if self.cached:
            self.engine.truncate(0, keep)  # a length change: the stale slots are overwritten next
        del self.cached[keep:]
        return self._draft(ctx, ctx.tokens[keep:])

    def _draft(self, ctx: DraftContext, feed: list[int]) -> Proposal:
        """Up to ``ctx.gamma`` tokens, one draft forward each, the first after ``feed``."""
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        subset = self.subset if self.head is None else self.head.subset
        for _ in range(ctx.gamma):
            logits = self._next_logits(feed, ctx.room + ctx.gamma)  # [V], or [K] over the subset
            if ctx.sampling.greedy:
                idx = int(logits.argmax(-1))
                confident = self.stop_below <= 0 or float(logits.float().softmax(-1)[idx]) >= self.stop_below
            else:
                q = processed_probs(logits, ctx.sampling)
                idx = int(sample_from(q, ctx.generator))
                confident = float(q[idx]) >= self.stop_below
                probs.append(q if subset is None else subset.expand(q))
            tok = idx if subset is None else int(subset.ids[idx])
            tokens.append(tok)
            if tok in ctx.eos_token_ids or not confident:
                break
            feed = [tok]
        return Proposal(tokens, torch.stack(probs) if probs else None)

    def observe(self, accepted: int) -> None:
        """Nothing to do: the next ``propose`` trims the cache to what was committed."""


class PromptLookupDrafter:
    """N-gram matching over prompt + output (Saxena 2023, prompt lookup decoding): deterministic drafts."""

    def __init__(self, ngram_max: int = 3, ngram_min: int = 1, keyed: bool = True) -> None:
        check_ngram_range(ngram_min, ngram_max)
        self.ngram_max, self.ngram_min = ngram_max, ngram_min
        self.keyed = keyed  # gamma_auto chooses each step's gamma from :meth:`key` (option by_match)
        self.reset()

    def reset(self) -> None:
        self.index = NGramIndex(self.ngram_max, self.ngram_min)

    def fresh(self) -> PromptLookupDrafter:
        return PromptLookupDrafter(self.ngram_max, self.ngram_min, self.keyed)

    def key(self, tokens: list[int]) -> int:
        """What this step's draft will be worth before it is drafted: the length of the n-gram it matches
        (0: nothing matches, no draft). ``gamma_auto`` keeps an acceptance estimate per key
        (:class:`~fastforward.core.pacing.CostTracker`): a 1-token match is right far less often than a
        3-token one."""
        self.index.extend(tokens)
        return self.index.match()[0]

    def propose(self, ctx: DraftContext) -> Proposal:
        self.index.extend(ctx.tokens)
        return Proposal(self.index.continuation(ctx.gamma))

    def observe(self, accepted: int) -> None:
        pass


def head_inside(model: torch.nn.Module, head: RestrictedHead) -> VocabSubset:
    """Make ``head`` the LM head of ``model``, a draft this decoder owns (a qsd copy, a layerskip view; never
    a draft model loaded for several decoders), and return the subset its logits then index.

    Why: a head outside the model made the draft run its decoder eagerly on a cache of its own (a compiled
    graph ends in the model's own head, and only a cache of its own gives the hidden state a separate head
    reads), so ``vocab=K`` lost what the compiled, cache-sharing draft gains. Inside, the graph ends in the
    K-row head: a qsd copy of SmolLM2-135M spends ~21% of its weights on the full 49k-row head."""
    if not isinstance(getattr(model, "lm_head", None), torch.nn.Module):
        raise FastForwardError(f"vocab=K: {type(model).__name__} has no lm_head to replace")
    model.lm_head = head
    return head.subset


def shallow_view(model: torch.nn.Module, layers: int) -> torch.nn.Module:
    """The target's first ``layers`` decoder layers + final norm + LM head, as a model of the same class.

    No weights are copied: the view's submodules ARE the target's. The only architecture assumption (the
    one adapter) is the standard HF decoder layout ``model.model.{embed_tokens, layers, norm, rotary_emb}``
    and ``model.lm_head``; its forward only runs ``config.num_hidden_layers`` layers, so the view is an
    ordinary model with its own (shorter) KV cache.
    """
    inner = getattr(model, "model", None)
    parts = ("embed_tokens", "layers", "norm", "rotary_emb")
    if inner is None or not all(hasattr(inner, p) for p in parts) or not hasattr(model, "lm_head"):
        raise FastForwardError(
            f"layerskip needs a decoder with model.{{{', '.join(parts)}}} and lm_head; "
            f"{type(model).__name__} does not have them"
        )
    total = len(inner.layers)
    if not 1 <= layers < total:
        raise FastForwardError(f"layerskip: layers must be in [1, {total - 1}] for this model, got {layers}")
    cfg = copy.deepcopy(model.config)
    cfg.num_hidden_layers = layers
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = list(cfg.layer_types[:layers])
    with torch.device("meta"):
        view = type(model)(cfg)
    for p in parts:
        setattr(view.model, p, getattr(inner, p))
    view.model.layers = torch.nn.ModuleList(list(inner.layers[:layers]))
    view.lm_head = model.lm_head
    if any(t.is_meta for t in list(view.parameters()) + list(view.buffers())):
        raise FastForwardError(f"layerskip: {type(model).__name__} has parts this view does not share")
    return view.eval()


def retokenize_continuation(tokenizer, tail: list[int], text: str) -> list[int]:
    """Target ids for ``text`` written after the committed ids ending in ``tail``, or [] where the new text
    would change how the tail itself tokenizes (a word continued across the boundary: the committed tokens
    are final, so such a draft cannot be expressed as new ids).

    The tail is re-encoded together with the text, so a token that spans the boundary is seen as one."""
    if not text:
        return []
    base = tokenizer.decode(tail, skip_special_tokens=False)
    ids = tokenizer(base + text, add_special_tokens=False)["input_ids"]
    keep = common_prefix(ids, tail)
    return list(ids[len(tail) :]) if keep == len(tail) else []


class CrossTokenizerDrafter:
    """A draft model whose tokenizer differs from the target's (e.g. SmolLM2 drafting for Qwen2.5).

    Each step decodes the committed target ids to text, encodes it with the draft's tokenizer (the draft's
    KV cache is kept for the common prefix by :class:`ModelDrafter`), drafts ``gamma`` draft tokens, and
    re-encodes their text as target ids (:func:`retokenize_continuation`). The draft's probabilities live on
    another vocabulary, so the re-encoded ids are point-mass drafts (``probs=None``): greedy verification
    keeps outputs identical to AR, and under sampling rejection sampling with a point mass keeps the
    target's distribution, whatever the draft proposes. The draft itself always drafts greedily (its most
    likely text is the best point mass to propose)."""

    TAIL = 8  # committed target tokens re-encoded with the draft text (boundary merges)

    def __init__(
        self,
        model: torch.nn.Module,
        draft_tokenizer,
        target_tokenizer,
        stop_below: float = 0.0,
        head: RestrictedHead | None = None,
    ) -> None:
        if draft_tokenizer is None or target_tokenizer is None:
            raise FastForwardError("cross-tokenizer drafting needs a tokenizer for both draft and target")
        self.inner = ModelDrafter(model, stop_below, head)
        self.draft_tok, self.target_tok = draft_tokenizer, target_tokenizer
        eos = getattr(draft_tokenizer, "eos_token_id", None)
        self.draft_eos = () if eos is None else (int(eos),)
        self.reset()

    def reset(self) -> None:
        self.inner.reset()

    def fresh(self) -> CrossTokenizerDrafter:
        inner = self.inner
        out = CrossTokenizerDrafter(
            inner.model, self.draft_tok, self.target_tok, inner.stop_below, inner.head
        )
        out.inner = inner.fresh()  # a batch row's: eager (see ModelDrafter.fresh)
        return out

    def finish(self) -> dict[str, Any]:
        return self.inner.finish()

    def models(self) -> list[torch.nn.Module]:
        return self.inner.models()

    def propose(self, ctx: DraftContext) -> Proposal:
        text = self.target_tok.decode(ctx.tokens, skip_special_tokens=False)
        draft_ids = self.draft_tok(text, add_special_tokens=False)["input_ids"]
        if not draft_ids:
            return Proposal([])
        drafted = self.inner.propose(
            DraftContext(draft_ids, ctx.gamma, GREEDY, None, self.draft_eos, ctx.room)
        )
        base = self.draft_tok.decode(draft_ids, skip_special_tokens=False)
        full = self.draft_tok.decode(draft_ids + drafted.tokens, skip_special_tokens=False)
        if not full.startswith(base):  # the draft rewrote the boundary (e.g. a split multi-byte character)
            return Proposal([])
        new = retokenize_continuation(self.target_tok, ctx.tokens[-self.TAIL :], full[len(base) :])
        return Proposal(new[: ctx.gamma])

    def observe(self, accepted: int) -> None:
        """Nothing to do: the next ``propose`` re-encodes the committed text and keeps the common prefix."""


class LookupFirstDrafter:
    """Prompt lookup first, the draft model where lookup finds nothing (``lookup_first=true``).

    On a CPU a model draft is a large share of each step (0.4-0.6 of it for Qwen2.5-Coder-0.5B int4 drafting
    for the 1.5B target), while an n-gram lookup costs nothing: where the output copies the prompt or
    itself (code, quoted text, lists) the lookup's chain is taken and the draft model is not run at all;
    elsewhere the model drafts as usual. The model drafter's cache catches up on the next model step
    (:class:`ModelDrafter` feeds every committed token it has not seen in one forward).

    Lookup chains are point masses (``probs=None``), model chains carry their distributions; each step's
    verifier handles either, so greedy stays identical to AR and sampling keeps the target's distribution.
    Counters: ``spec_lookup_steps`` (steps drafted by lookup) and ``spec_model_steps``."""

    def __init__(self, lookup: PromptLookupDrafter, model, min_tokens: int = 1) -> None:
        self.lookup, self.model, self.min_tokens = lookup, model, min_tokens
        self.reset()

    def reset(self) -> None:
        self.lookup.reset()
        self.model.reset()
        self.lookup_steps = self.model_steps = 0

    def fresh(self) -> LookupFirstDrafter:
        return LookupFirstDrafter(self.lookup.fresh(), self.model.fresh(), self.min_tokens)

    def finish(self) -> dict[str, Any]:
        return self.model.finish()

    def models(self) -> list[torch.nn.Module]:
        return self.model.models()

    def propose(self, ctx: DraftContext) -> Proposal:
        return self.propose_with(ctx, ctx.gamma)[0]

    def propose_with(self, ctx: DraftContext, lookup_gamma: int) -> tuple[Proposal, str]:
        """The chain and who drafted it (``"lookup"``, ``"model"``, or ``""`` for none), the lookup's chain at
        most ``lookup_gamma`` tokens and the model's at most ``ctx.gamma``: with ``gamma_auto`` each source
        has a schedule of its own (:class:`~fastforward.decoders.speculative.engine.SpecProposer`), so a
        model draft that does not pay on this machine (0 tokens) leaves the free lookup running."""
        if lookup_gamma > 0:
            found = self.lookup.propose(dataclasses.replace(ctx, gamma=lookup_gamma))
            if len(found.tokens) >= self.min_tokens:
                self.lookup_steps += 1
                return found, "lookup"
        if ctx.gamma <= 0:
            return Proposal([]), ""
        self.model_steps += 1
        return self.model.propose(ctx), "model"

    def observe(self, accepted: int) -> None:
        self.lookup.observe(accepted)
        self.model.observe(accepted)

    def extras(self) -> dict:
        return {"spec_lookup_steps": self.lookup_steps, "spec_model_steps": self.model_steps}
