"""Token Recycling (Luo et al., 2024, "Turning Trash into Treasure", arXiv 2408.08696): training-free drafts from
the candidates every target forward already computed.

A forward scores the whole vocabulary at every node it reads, and greedy decoding keeps one token of it. Token
Recycling keeps the top ``topk`` of each node's distribution in an *adjacency matrix* (vocab x k token ids,
1.5 MB for SmolLM2's 49k vocabulary at k = 8): row ``t`` holds the target's likeliest next tokens the last time
it read ``t``. A step's draft is a tree grown from the anchor by breadth-first expansion over a tree template
of (depth, rank) paths: the node on path ``(r0, r1, ...)`` holds ``M[parent token][rank]``. The target verifies
the tree in one forward under a tree mask, the method's acceptance rule (:mod:`fastforward.core.acceptance`)
keeps the longest accepted path plus the target's own token, and every row of the matrix the forward read is
overwritten with that forward's top-k. Nothing is trained, there is no draft model, and the drafts are
deterministic, so greedy output is identical to AR and sampling stays lossless (point-mass drafts judged by
recursive rejection sampling over the tree).

What differs from the paper, and why:

- **Tree size from this machine's costs** (``tree=auto``, the default). The paper's static ~80-node tree pays on
  a GPU, where an 80-token forward costs about a 1-token one. On a CPU a k-token forward costs 1.1-5x a
  1-token one, so each step takes the tree :class:`~fastforward.chimera.tree.TreeSizer` picks: the most
  expected tokens per millisecond from this request's acceptance rate per (depth, rank) and this machine's
  measured k-token forward cost. When no tree beats a plain AR step on that estimate, the step is AR (the
  matrix is still updated from its forward), so the method never plans to run below AR. ``tree=static`` uses
  a fixed 25-node template (:data:`fastforward.chimera.tree.DEFAULT_PATHS`).
- **Seeding.** Before the first forward the matrix learns the prompt's bigrams (a token's next token in the
  prompt, where the row is still empty), and the prefill's last logits give the anchor's row. Rows never seen
  hold -1 and grow no nodes.
- **Persistence.** The matrix persists across the decoder's requests (``persist=true``, as a server keeps it;
  the paper's hot start). With a seeded sampler each request uses a fresh matrix seeded from its own prompt and
  trees sized from the cached cost curve only, so the same seed always gives the same tokens.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fastforward.chimera.tree import Tree, TreeSizer, default_tree
from fastforward.core.batching import Draft, Proposer, ProposerDecoder, Row, Verified
from fastforward.core.options import build_config, check_config, opt
from fastforward.core.pacing import StepCost, row_policy
from fastforward.errors import FastForwardError
from fastforward.models.costs import KS, cached_curve, interpolate, measure_curve
from fastforward.models.loading import logits_width

MAX_PATHS = 20000  # tree=auto scores every (depth, rank) path each step: ranks ** depth stays small


@dataclass(frozen=True)
class RecycleOptions:
    topk: int = opt(8, min=1, max=64, help="candidate next tokens kept per token in the adjacency matrix (k)")
    tree: str = opt(
        "auto",
        choices=("auto", "static"),
        help="auto (each step's tree sized from this machine's measured k-token forward cost and the "
        "request's acceptance per depth and rank; an AR step where no tree pays) or static (the fixed "
        "25-node template)",
    )
    depth: int = opt(5, min=1, max=16, help="tree=auto: deepest draft level")
    ranks: int = opt(4, min=1, help="tree=auto: most candidates of one token a tree branches into (<= topk)")
    max_nodes: int = opt(31, min=1, help="tree=auto: most drafted nodes per verify forward")
    persist: bool = opt(
        True,
        help="keep the matrix across the decoder's requests (a server's, a bench's); false: every request "
        "starts from its own prompt (seeded sampling always does)",
    )

    def validate(self) -> None:
        if self.ranks > self.topk:
            raise FastForwardError(f"recycle: ranks ({self.ranks}) must be <= topk ({self.topk})")
        if self.tree == "auto" and self.ranks**self.depth > MAX_PATHS:
            raise FastForwardError(
                f"recycle: ranks ** depth = {self.ranks**self.depth} candidate paths is too many to score "
                f"per step (at most {MAX_PATHS}); lower ranks or depth"
            )


class Adjacency:
    """The recycled candidates: ``ids[t]`` are the target's top-k next tokens after token ``t`` the last time a
    forward read ``t`` (-1: never seen). int32, on the CPU: it is read a few rows per step."""

    def __init__(self, vocab: int, k: int) -> None:
        self.ids = torch.full((vocab, k), -1, dtype=torch.int32)

    @property
    def k(self) -> int:
        return self.ids.shape[1]

    def reset(self) -> None:
        self.ids.fill_(-1)

    def known(self) -> int:
        """Rows that hold at least one candidate."""
        return int((self.ids[:, 0] >= 0).sum())

    def seed(self, tokens: list[int]) -> None:
        """Learn ``tokens``' bigrams where a row is still empty (a row the target filled is better)."""
        if len(tokens) < 2:
            return
        src = torch.tensor(tokens[:-1], dtype=torch.long)
        nxt = torch.tensor(tokens[1:], dtype=torch.int32)
        empty = self.ids[src, 0] < 0
        self.ids[src[empty], 0] = nxt[empty]  # a repeated source keeps one of its next tokens

    def update(self, tokens: list[int], logits: torch.Tensor) -> None:
        """Overwrite the rows of ``tokens`` with the top-k of the target's logits after each ([n, V])."""
        top = logits.topk(self.k, dim=-1).indices.to("cpu", torch.int32)
        self.ids[torch.tensor(tokens, dtype=torch.long)] = top

    def rows(self, tokens: list[int]) -> list[list[int]]:
        return self.ids[torch.tensor(tokens, dtype=torch.long)].tolist()


def expand(tree: Tree, anchor: int, adjacency: Adjacency) -> tuple[list[int], list[int], int]:
    """Grow the template ``tree`` from ``anchor``: the node on path ``(r0, ..., rd)`` holds rank ``rd`` of its
    parent token's row. Nodes whose candidate is unknown (-1), and their subtrees, are left out.

    Returns (tokens [n + 1], parents [n + 1], depth of the deepest node)."""
    tokens, parents = [int(anchor)], [-1]
    node_of: dict[tuple[int, ...], int] = {(): 0}
    cache: dict[int, list[int]] = {}
    depth = 0
    for path in tree.paths:  # sorted by depth: a parent is placed before its children
        parent = node_of.get(path[:-1])
        if parent is None:
            continue
        tok = tokens[parent]
        if tok not in cache:
            cache[tok] = adjacency.ids[tok].tolist()
        cand = cache[tok][path[-1]] if path[-1] < adjacency.k else -1
        if cand < 0:
            continue
        node_of[path] = len(tokens)
        tokens.append(int(cand))
        parents.append(parent)
        depth = max(depth, len(path))
    return tokens, parents, depth


class RecycleDecoder(ProposerDecoder):
    name = "recycle"

    def __init__(
        self, model: torch.nn.Module, options: RecycleOptions, verify_curve=None, vocab: int | None = None
    ) -> None:
        """``verify_curve``: ms of a k-token forward of ``model`` on this machine, for ``tree=auto`` (the
        per-machine cached curve from :func:`build`; measured here, uncached, on first use if not given)."""
        super().__init__(model)
        self.options = check_config(options, self.name)
        impl = getattr(model.config, "_attn_implementation", "sdpa")
        if impl and "flash" in str(impl):
            raise FastForwardError(f"recycle needs 4D tree masks; attention '{impl}' does not take them")
        if vocab is None:
            vocab = logits_width(model)
        self.vocab = vocab
        self.matrix = Adjacency(vocab, options.topk)  # kept across requests (persist=true)
        self.tree = default_tree(4)
        self.verify_curve = verify_curve
        self.sizer: TreeSizer | None = None  # tree=auto's timed sizer (batch 1, unseeded), made on first use

    def reset(self) -> None:
        """Forget every recycled candidate (a server's operator, or a bench between workloads)."""
        self.matrix.reset()

    def reopen_estimates(self) -> None:
        """A bench's warm-up ran the measured prompts' first one: what it taught must not speed up the
        measured run, so it is forgotten like the other methods' timing estimates."""
        self.reset()
        if self.sizer is not None:
            self.sizer.reopen()

    def _sizer(self, timed: bool) -> TreeSizer | None:
        if self.options.tree != "auto":
            return None
        if self.verify_curve is None:
            self.verify_curve = interpolate(measure_curve(self.model))
        o = self.options
        return TreeSizer(self.verify_curve, o.depth, ranks=o.ranks, max_nodes=o.max_nodes, timed=timed)

    def proposer(self, solo: bool) -> RecycleProposer:
        if self.options.tree == "auto" and self.sizer is None:  # the timed sizer, kept across requests
            self.sizer = self._sizer(timed=True)
        return RecycleProposer(self, timed=solo)


class RecycleProposer(Proposer):
    """Token Recycling per row: each row's tree grown from its anchor, from the decoder's adjacency matrix
    (shared by the rows and kept across requests, so one row's forwards teach the others; a seeded row, or
    ``persist=false``, keeps a matrix of its own so that its seed reproduces); every forward's top-k
    updates the rows it read.

    ``tree=static`` verifies the template every step; ``tree=auto`` (the default) gives each row its own
    :class:`~fastforward.chimera.tree.TreeSizer`: timed by the row's own steps when it decodes alone
    (``timed``, batch 1, unless seeded), else on the machine's cached batch-1 cost curve only (a batch
    forward's time is shared by rows, so no row's measured cost is its own). A row whose best tree does not
    beat an AR step on that estimate feeds its anchor alone."""

    name = "recycle"
    prunable = True

    def __init__(self, decoder: RecycleDecoder, timed: bool = False) -> None:
        self.decoder, self.timed = decoder, timed
        self._anchors: list[int] = []

    def _matrix(self, row: Row) -> Adjacency:
        own = row.state["matrix"]
        return own if own is not None else self.decoder.matrix

    def admit(self, row: Row, prefill: Any) -> None:
        d, seeded = self.decoder, row.run.config.sampling.seeded
        # a seed must reproduce: a request-local matrix and trees from the cached cost curve only
        own = Adjacency(d.vocab, d.options.topk) if seeded or not d.options.persist else None
        row.state = {
            "matrix": own,
            "sizer": row_policy(self.timed, row.run.config.sampling, d.sizer, lambda: d._sizer(timed=False)),
            "hist": [],
        }
        row.state.update(tree=0, ar=0, drafted=0)
        matrix = self._matrix(row)
        row.state["known0"] = matrix.known()
        matrix.seed(row.request.prompt)
        matrix.update(row.request.prompt[-1:], prefill.logits[0, -1:])

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        self._anchors = [row.anchor for row in rows]
        drafts = []
        for row in rows:
            if row.jumped:  # the grammar forces this step: nothing to grow
                drafts.append(Draft())
                continue
            tree, sizer = self.decoder.tree, row.state["sizer"]
            if sizer is not None:
                tree = sizer.choose(row.room)
                if sizer.rate * (sizer.observe_ms + sizer.verify_ms(1)) < 1.0:  # no tree beats an AR step
                    drafts.append(Draft())
                    continue
            tokens, parents, _ = expand(tree, row.anchor, self._matrix(row))
            tokens, parents = tokens[: row.room], parents[: row.room]  # nodes past the cap would be cut
            drafts.append(Draft.below(tokens, parents))
        return drafts

    def observe(
        self, rows: Sequence[Row], drafts: Sequence[Draft], paths: Sequence[list[int]], out: Verified
    ) -> None:
        depth = self.decoder.options.depth
        for b, (row, d, path) in enumerate(zip(rows, drafts, paths, strict=True)):
            t0 = time.perf_counter()
            fed = [self._anchors[b], *d.tokens]
            matrix, sizer, st = self._matrix(row), row.state["sizer"], row.state
            new = row.run.tokens[-len(path) :]
            # each level's row as it stood when the tree was grown (what every rank would have scored)
            seen = matrix.rows([fed[0], *new[:-1]][:depth]) if sizer is not None else []
            matrix.update(fed, out.logits[b][: len(fed)])
            if row.jumped:  # the grammar's forced tokens, not a recycled tree: nothing to count or size
                continue
            if d.tokens:
                st["tree"] += 1
                st["drafted"] += len(d.tokens)
                hist = st["hist"]
                hist.extend([0] * (len(path) - len(hist)))
                hist[len(path) - 1] += 1
            else:
                st["ar"] += 1
            if sizer is None or row.run.done:
                continue
            # the step's times (an untimed sizer, in a batch or under a seed, reads only the tokens)
            propose_ms = out.propose_ms if d.tokens else sizer.head_ms * len(seen)  # AR drafted nothing
            cost = StepCost(
                guesses=len(d.tokens),
                accepted=len(path) - 1,
                propose_ms=propose_ms,
                verify_ms=out.verify_ms,
                observe_ms=(time.perf_counter() - t0) * 1e3,
                width=len(fed),
                tokens=new,
                candidates=seen,
            )
            sizer.observe(cost)

    def row_extras(self, row: Row) -> dict[str, Any]:
        st = row.state or {}
        learned = self._matrix(row).known() - st["known0"] if st else 0
        return {
            "recycle_tree_steps": st.get("tree", 0),  # forwards that verified a recycled tree
            "recycle_ar_steps": st.get(
                "ar", 0
            ),  # forwards that fed the anchor alone (no tree paid, or none grew)
            "recycle_drafted": st.get("drafted", 0),  # / recycle_tree_steps = mean tree size
            "recycle_accepted_hist": st.get("hist", []),  # [a] = tree forwards that accepted a drafted tokens
            "recycle_rows_learned": learned,  # matrix rows filled while this request ran
        }


def build(name: str, target, draft, options: dict) -> RecycleDecoder:
    opts = build_config(RecycleOptions, options, name)
    # tree=auto sizes trees from this machine's k-token forward costs: cached per model, dtype and path
    curve = interpolate(cached_curve(target, ks=KS)) if opts.tree == "auto" else None
    return RecycleDecoder(target.model, opts, curve)


OPTIONS = RecycleOptions
