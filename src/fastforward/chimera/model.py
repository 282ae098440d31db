"""The Chimera draft model: trigram encoder -> full-context encoder -> K residual decoding heads.

Indexing (0-based, used everywhere in this package): ``x[i]`` are tokens, ``h_llm[i]`` the target's last
hidden state after reading ``x[i]`` (its LM head predicts ``x[i+1]``). After a target forward we know tokens
``x[0..n]`` and target states ``h_llm[0..n-1]`` (``x[n]`` is the token the target just produced).

- Trigram encoder (eq. 2): ``h_tri[j] = W2 SiLU(W1 [e(x[j-2]); e(x[j-1]); e(x[j])])`` with the target's frozen
  embeddings ``e``; the first two positions collapse to a uni-/bigram by zero-filling the missing slots.
- Full-context encoder (eq. 3): one transformer block whose queries are trigram states and whose keys/values
  are ``[h_llm ; h_tri]``. ``h_full[j]`` approximates ``h_llm[j]`` (distilled with MSE, eq. 6).
- Head k (eq. 4) drafts ``x[n+1+k]`` from ``[h_llm[n-1] ; h_full[n+k]]``. ``h_full[n+k]`` needs the trigram of
  ``x[n+k-2..n+k]``: the tokens drafted by heads < k (their top-1), so drafting is a short chain inside the
  draft model while the target's states stop at ``n-1``. Training reproduces exactly this visibility with
  one mask per head (:func:`training_mask`): query ``j`` of head k sees ``h_llm[<= j-1-k]`` and ``h_tri[<= j]``.

A head maps to the vocabulary either through the target's frozen LM head (``vocab="shared"``, default: a
d x d correction, no V-sized parameters) or with its own V x d matrix initialised from the LM head
(``vocab="own"``); see docs/chimera.md for the memory each costs.

Ablations (same recipe): ``variant="medusa"`` (no trigram/context encoder, heads read ``h_llm[n-1]`` only),
``variant="no_residual"`` (heads read ``h_full`` only).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

from fastforward.core.vocab import VocabSubset

VARIANTS = ("chimera", "no_residual", "medusa")
VOCAB_MODES = ("shared", "own")


@dataclass(frozen=True)
class ChimeraConfig:
    hidden_size: int  # d: the target's hidden size
    vocab_size: int  # V: the target's vocabulary
    num_heads: int = 4  # K decoding heads
    variant: str = "chimera"  # chimera | no_residual | medusa
    vocab: str = "shared"  # shared: project into the target's frozen LM head; own: V x d per head
    attn_heads: int = 0  # attention heads of the context block; 0 = d // 64 (at least 1)
    ffn_mult: int = 2  # context-block MLP width = ffn_mult * d
    rope_theta: float = 10000.0

    def validate(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.vocab not in VOCAB_MODES:
            raise ValueError(f"vocab must be one of {VOCAB_MODES}, got {self.vocab!r}")
        if self.num_heads < 1:
            raise ValueError("num_heads must be >= 1")
        if self.hidden_size % self.n_attn != 0:
            raise ValueError(f"hidden_size {self.hidden_size} not divisible by {self.n_attn} attention heads")

    @property
    def n_attn(self) -> int:
        return self.attn_heads or max(1, self.hidden_size // 64)

    def to_dict(self) -> dict:
        return asdict(self)


def vocab_parameter_bytes(hidden: int, vocab: int, num_heads: int, mode: str, bytes_per: int = 4) -> int:
    """Bytes of the V-sized parameters the heads add: 0 for ``shared`` (reuses the target's LM head)."""
    return 0 if mode == "shared" else num_heads * hidden * vocab * bytes_per


# --------------------------------------------------------------------------- trigrams


def trigram_ids(tokens: list[int], j: int) -> tuple[int, int, int]:
    """The trigram ending at position j; missing slots before the start are -1 (uni-/bigram collapse)."""
    return tuple(tokens[i] if i >= 0 else -1 for i in (j - 2, j - 1, j))  # type: ignore[return-value]


def trigram_inputs(emb: torch.Tensor) -> torch.Tensor:
    """[B, L, d] embeddings -> [B, L, 3d] = [e(j-2); e(j-1); e(j)], zeros before the sequence start."""
    prev1 = F.pad(emb, (0, 0, 1, 0))[:, :-1]
    prev2 = F.pad(emb, (0, 0, 2, 0))[:, :-2]
    return torch.cat([prev2, prev1, emb], dim=-1)


class TrigramLRU:
    """Fixed-capacity LRU map trigram ids -> trigram-encoder output, with hit counters (paper sec. 4.1.1).

    Evicted entries are simply recomputed when seen again (the encoder is two small matmuls), so no
    secondary storage is needed."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.entries: OrderedDict[tuple[int, int, int], torch.Tensor] = OrderedDict()
        self.hits = 0
        self.lookups = 0

    def get(self, key: tuple[int, int, int]) -> torch.Tensor | None:
        self.lookups += 1
        value = self.entries.get(key)
        if value is not None:
            self.hits += 1
            self.entries.move_to_end(key)
        return value

    def put(self, key: tuple[int, int, int], value: torch.Tensor) -> None:
        self.entries[key] = value
        self.entries.move_to_end(key)
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)

    @property
    def hit_rate(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0


# --------------------------------------------------------------------------- masks and rotary


def training_mask(length: int, num_heads: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Visibility for training (paper Fig. 3, one copy of the queries per head).

    Queries: ``num_heads`` groups of ``length`` trigram positions; keys: ``[h_llm (length) ; h_tri (length)]``.
    Query j of group k sees ``h_llm[i]`` for ``i <= j-1-k`` (the target states available when head k drafts
    at j) and ``h_tri[i]`` for ``i <= j`` (no trigram holding a future token). -> [K*L, 2L] bool.
    """
    j = torch.arange(length, device=device)
    i = torch.arange(length, device=device)
    tri = i[None, :] <= j[:, None]  # [L, L]
    groups = []
    for k in range(num_heads):
        llm = i[None, :] <= (j[:, None] - 1 - k)
        groups.append(torch.cat([llm, tri], dim=1))
    return torch.cat(groups, dim=0)


def rotate(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding. x: [..., T, H, dh], pos: [T] (long)."""
    dh = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, dh, 2, device=x.device, dtype=torch.float32) / dh))
    ang = pos.to(torch.float32)[:, None] * inv[None, :]  # [T, dh/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :].to(x.dtype)  # [T, 1, dh]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :].to(x.dtype)
    x1, x2 = x[..., : dh // 2], x[..., dh // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


# --------------------------------------------------------------------------- modules


class TrigramEncoder(nn.Module):
    """Eq. 2: MLP(SiLU(MLP(t))) over concatenated embeddings. [..., 3d] -> [..., d]."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(3 * d, d)
        self.w2 = nn.Linear(d, d)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(t)))


class ContextBlock(nn.Module):
    """Eq. 3: one pre-norm transformer block; queries are trigram states, keys/values [h_llm ; h_tri].

    With one block, a key/value depends only on its own input, so inference can cache them per position."""

    def __init__(self, cfg: ChimeraConfig) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.h, self.dh, self.theta = cfg.n_attn, d // cfg.n_attn, cfg.rope_theta
        self.norm_llm, self.norm_tri, self.norm_mlp = nn.RMSNorm(d), nn.RMSNorm(d), nn.RMSNorm(d)
        self.q, self.k, self.v = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False), nn.Linear(d, d)
        self.o = nn.Linear(d, d, bias=False)
        self.up = nn.Linear(d, 2 * cfg.ffn_mult * d, bias=False)
        self.down = nn.Linear(cfg.ffn_mult * d, d, bias=False)

    def keys_values(self, x: torch.Tensor, pos: torch.Tensor, side: str) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [B, T, d] (side "llm" or "tri"), pos: [T] -> k, v: [B, T, H, dh] (k rotated)."""
        n = self.norm_llm(x) if side == "llm" else self.norm_tri(x)
        shape = (*x.shape[:-1], self.h, self.dh)
        return rotate(self.k(n).view(shape), pos, self.theta), self.v(n).view(shape)

    def attend(
        self, x: torch.Tensor, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor
    ) -> torch.Tensor:
        """Queries x: [B, Q, d] at positions pos [Q]; keys/values [B, S, H, dh]; visible [Q, S] -> [B, Q, d]."""
        q = rotate(self.q(self.norm_tri(x)).view(*x.shape[:-1], self.h, self.dh), pos, self.theta)
        bias = torch.zeros(visible.shape, dtype=q.dtype, device=q.device)
        bias.masked_fill_(~visible, torch.finfo(q.dtype).min)
        att = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=bias
        )  # [B, H, Q, dh]
        y = x + self.o(att.transpose(1, 2).reshape(x.shape))
        gate, up = self.up(self.norm_mlp(y)).chunk(2, dim=-1)
        return y + self.down(F.silu(gate) * up)


class ResidualHead(nn.Module):
    """Eq. 4 as a residual correction: z = base + W2 SiLU(W1 inp); W2 starts at zero, so an untrained head
    predicts with the LM head applied to ``base`` (``h_full``, or ``h_llm`` for Medusa)."""

    def __init__(self, d_in: int, d: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_in, d)
        self.w2 = nn.Linear(d, d)
        nn.init.zeros_(self.w2.weight)
        nn.init.zeros_(self.w2.bias)

    def forward(self, base: torch.Tensor, inp: torch.Tensor) -> torch.Tensor:
        return base + self.w2(F.silu(self.w1(inp)))


class ChimeraDraft(nn.Module):
    """The draft. ``embed`` and ``lm_head`` are the target's frozen matrices (not saved with the draft)."""

    def __init__(
        self,
        cfg: ChimeraConfig,
        embed: torch.Tensor,
        lm_head: torch.Tensor,
        lm_bias: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        d = cfg.hidden_size
        self.register_buffer("embed", embed.detach(), persistent=False)  # [V, d]
        self.register_buffer("lm_head", lm_head.detach(), persistent=False)  # [V, d]
        self.register_buffer("lm_bias", None if lm_bias is None else lm_bias.detach(), persistent=False)
        if cfg.variant != "medusa":
            self.trigram = TrigramEncoder(d)
            self.context = ContextBlock(cfg)
        d_in = 2 * d if cfg.variant == "chimera" else d
        self.heads = nn.ModuleList(ResidualHead(d_in, d) for _ in range(cfg.num_heads))
        if cfg.vocab == "own":
            self.vocab_weights = nn.ParameterList(
                nn.Parameter(lm_head.detach().clone()) for _ in range(cfg.num_heads)
            )
        self.subset: VocabSubset | None = None  # set by restrict_vocab at inference
        self._sub_weights: list[torch.Tensor] = []
        self._sub_bias: torch.Tensor | None = None

    # ----------------------------------------------------------------- shared pieces

    def logits(self, z: torch.Tensor, k: int) -> torch.Tensor:
        """Head k's hidden [..., d] -> logits [..., V], or [..., K] over :attr:`subset` when restricted."""
        if self.subset is not None:
            w, b = self._sub_weights[k if self.cfg.vocab == "own" else 0], self._sub_bias
        else:
            w, b = (self.vocab_weights[k] if self.cfg.vocab == "own" else self.lm_head), self.lm_bias
        return F.linear(z.to(w.dtype), w, b)

    def restrict_vocab(self, subset: VocabSubset | None) -> None:
        """Inference only: score only ``subset``'s ids in every head (reduced-vocabulary drafting; the target
        still verifies over the whole vocabulary). The heads' rows are copied once; None undoes it."""
        self.subset = subset
        self._sub_weights, self._sub_bias = [], None
        if subset is None:
            return
        ids = subset.ids.to(self.lm_head.device)
        full = list(self.vocab_weights) if self.cfg.vocab == "own" else [self.lm_head]
        self._sub_weights = [w.detach().index_select(0, ids) for w in full]
        if self.lm_bias is not None:
            self._sub_bias = self.lm_bias.index_select(0, ids)

    def head_hidden(self, k: int, h_llm: torch.Tensor, h_full: torch.Tensor | None) -> torch.Tensor:
        """Head k's pre-vocabulary state from h_llm[n-1] and h_full[n+k] ([..., d] each)."""
        if self.cfg.variant == "medusa":
            return self.heads[k](h_llm, h_llm)
        if self.cfg.variant == "no_residual":
            return self.heads[k](h_full, h_full)
        return self.heads[k](h_full, torch.cat([h_llm, h_full], dim=-1))

    def trigram_states(self, ids: torch.Tensor) -> torch.Tensor:
        """[B, L] token ids -> [B, L, d] trigram-encoder outputs."""
        emb = F.embedding(ids, self.embed).to(self.trigram.w1.weight.dtype)
        return self.trigram(trigram_inputs(emb))

    # ----------------------------------------------------------------- training

    def forward(self, ids: torch.Tensor, h_llm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher-forced pass over whole sequences.

        ids: [B, L], h_llm: [B, L, d]. Returns ``z`` [B, K, L, d] where ``z[:, k, j]`` is head k's state for
        predicting ``x[j+1]`` (valid for ``j >= k+1``), and ``h_full`` [B, K, L, d] (None for Medusa)."""
        b, length, d = h_llm.shape
        kk = self.cfg.num_heads
        h_llm = h_llm.to(self.heads[0].w1.weight.dtype)
        # the target state head k reads at query j is h_llm[j-1-k] (zeros before the start; those positions
        # are excluded from the loss)
        shifted = torch.stack([F.pad(h_llm, (0, 0, 1 + k, 0))[:, :length] for k in range(kk)], dim=1)
        if self.cfg.variant == "medusa":
            return self.head_hidden_all(shifted, None), None
        tri = self.trigram_states(ids)  # [B, L, d]
        pos = torch.arange(length, device=ids.device)
        k_llm, v_llm = self.context.keys_values(h_llm, pos, "llm")
        k_tri, v_tri = self.context.keys_values(tri, pos, "tri")
        keys, values = torch.cat([k_llm, k_tri], 1), torch.cat([v_llm, v_tri], 1)
        queries = tri.repeat(1, kk, 1)  # [B, K*L, d]
        visible = training_mask(length, kk, ids.device)
        h_full = self.context.attend(queries, pos.repeat(kk), keys, values, visible).view(b, kk, length, d)
        return self.head_hidden_all(shifted, h_full), h_full

    def head_hidden_all(self, h_llm_k: torch.Tensor, h_full: torch.Tensor | None) -> torch.Tensor:
        return torch.stack(
            [
                self.head_hidden(k, h_llm_k[:, k], None if h_full is None else h_full[:, k])
                for k in range(self.cfg.num_heads)
            ],
            dim=1,
        )

    # ----------------------------------------------------------------- inference

    def new_state(self, cache: TrigramLRU | int = 16384) -> DraftState:
        """State for one generation; pass a :class:`TrigramLRU` to keep trigram states across generations."""
        return DraftState(self, cache if isinstance(cache, TrigramLRU) else TrigramLRU(cache))


class DraftState:
    """Per-generation state: cached context-block keys/values of committed positions and the trigram LRU.

    Invariant: ``len(tokens) == n_llm + 1`` (the target's newest token has no target state yet)."""

    def __init__(self, draft: ChimeraDraft, cache: TrigramLRU) -> None:
        self.draft = draft
        self.cache = cache
        self.tokens: list[int] = []
        self.last_h: torch.Tensor | None = None  # h_llm[n-1]: [d]
        self.kv_llm: list[torch.Tensor] = []  # chunks of [1, t, H, dh] keys and values, concatenated lazily
        self.kv_tri: list[torch.Tensor] = []
        self._k_llm = self._v_llm = self._k_tri = self._v_tri = None

    @property
    def n_llm(self) -> int:
        return len(self.tokens) - 1

    def _tri_state(self, key: tuple[int, int, int]) -> torch.Tensor:
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        emb = torch.zeros(
            3, self.draft.cfg.hidden_size, dtype=self.draft.embed.dtype, device=self.draft.embed.device
        )
        for slot, t in enumerate(key):
            if t >= 0:
                emb[slot] = self.draft.embed[t]
        w = self.draft.trigram.w1.weight
        value = self.draft.trigram(emb.reshape(-1).to(w.dtype))  # [d]
        self.cache.put(key, value)
        return value

    def observe(self, new_tokens: list[int], new_h: torch.Tensor) -> None:
        """Commit tokens and the target states that came with them. new_h: [m, d] target states for the
        positions before each new token (m == len(new_tokens), except m == len - 1 at the very start)."""
        start_tok, start_h = len(self.tokens), self.n_llm if self.tokens else 0
        self.tokens.extend(int(t) for t in new_tokens)
        if self.n_llm != start_h + new_h.shape[0]:
            raise ValueError(f"expected {self.n_llm - start_h} target states, got {new_h.shape[0]}")
        if new_h.shape[0]:
            self.last_h = new_h[-1]
        if self.draft.cfg.variant == "medusa":
            return
        block = self.draft.context
        dtype = self.draft.heads[0].w1.weight.dtype
        if new_h.shape[0]:
            pos = torch.arange(start_h, self.n_llm, device=new_h.device)
            self.kv_llm.append(block.keys_values(new_h.to(dtype)[None], pos, "llm"))
        tri = torch.stack(
            [self._tri_state(trigram_ids(self.tokens, j)) for j in range(start_tok, len(self.tokens))]
        )
        pos = torch.arange(start_tok, len(self.tokens), device=tri.device)
        self.kv_tri.append(block.keys_values(tri[None], pos, "tri"))
        self._k_llm = None

    def _committed_kv(self) -> tuple[torch.Tensor, ...]:
        if self._k_llm is None:
            self._k_llm = torch.cat([k for k, _ in self.kv_llm], 1)
            self._v_llm = torch.cat([v for _, v in self.kv_llm], 1)
            self._k_tri = torch.cat([k for k, _ in self.kv_tri], 1)
            self._v_tri = torch.cat([v for _, v in self.kv_tri], 1)
            self.kv_llm = [(self._k_llm, self._v_llm)]
            self.kv_tri = [(self._k_tri, self._v_tri)]
        return self._k_llm, self._v_llm, self._k_tri, self._v_tri

    def _full_ids(self, index: torch.Tensor) -> torch.Tensor:
        subset = self.draft.subset
        return index if subset is None else subset.to_full(index)

    def propose(
        self, top_k: int, force: list[int] | None = None, depth: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the heads as a top-1 chain. Returns ids [D, top_k] and their draft probabilities [D, top_k].

        ``depth`` (D, default all K heads): only the first D heads, for a tree no deeper than D (each head
        costs a context-block attention and an LM head). ``force`` (K - 1 tokens) replaces the top-1 chain,
        as in teacher-forced training (tests, analysis)."""
        draft, kk = self.draft, self.draft.cfg.num_heads
        if depth is not None:
            kk = max(1, min(kk, depth))
        if self.last_h is None:
            raise ValueError("observe() the prompt's target states before proposing")
        dtype = draft.heads[0].w1.weight.dtype
        h_llm = self.last_h.to(dtype)
        ids, probs = [], []
        if draft.cfg.variant == "medusa":
            for k in range(kk):
                p = draft.logits(draft.head_hidden(k, h_llm, None), k).float().softmax(-1)
                top = p.topk(top_k)
                ids.append(self._full_ids(top.indices))
                probs.append(top.values)
            return torch.stack(ids), torch.stack(probs)
        block = draft.context
        k_llm, v_llm, k_tri, v_tri = self._committed_kv()
        n = self.n_llm
        chain = list(self.tokens)
        extra_k: list[torch.Tensor] = []
        extra_v: list[torch.Tensor] = []
        last_tri = None
        for k in range(kk):
            j = n + k
            tri = self._tri_state(trigram_ids(chain, j))
            if k > 0:  # committed trigrams are cached; drafted ones are appended for this proposal only
                kt, vt = block.keys_values(tri[None, None], torch.tensor([j], device=tri.device), "tri")
                extra_k.append(kt)
                extra_v.append(vt)
            last_tri = tri
            keys = torch.cat([k_llm, k_tri, *extra_k], 1)
            values = torch.cat([v_llm, v_tri, *extra_v], 1)
            visible = torch.ones(1, keys.shape[1], dtype=torch.bool, device=keys.device)
            pos = torch.tensor([j], device=keys.device)
            h_full = block.attend(last_tri[None, None], pos, keys, values, visible)[0, 0]
            p = draft.logits(draft.head_hidden(k, h_llm, h_full), k).float().softmax(-1)
            top = p.topk(top_k)
            top_ids = self._full_ids(top.indices)
            ids.append(top_ids)
            probs.append(top.values)
            chain.append(int(top_ids[0]) if force is None or k >= len(force) else int(force[k]))
        return torch.stack(ids), torch.stack(probs)
