"""The static candidate tree and the pure functions that build and judge it.

A tree is a set of *paths of ranks*: ``(0, 2)`` is the node holding head 0's top-1 token followed by head 1's
top-3 token. Node 0 is the root: the target's newest token, which the verification forward reads first.
Verification runs the target once over all nodes with a tree mask and judges the nodes with
:mod:`fastforward.core.acceptance` (greedy or typical, the longest accepted root-to-node path wins).

Chimera's heads draft along their top-1 chain (head k sees the top-1 tokens of heads < k), so nodes off that
chain reuse head k's top-k computed for the top-1 prefix: the same approximation Medusa's trees make.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from fastforward.core.pacing import StepCost

Path = tuple[int, ...]

# 24 drafted nodes + the root = 25 tokens per verification forward; 4 first-level branches (paper's code:
# a 25-node static tree), most mass on the top-1 chain.
DEFAULT_PATHS: tuple[Path, ...] = (
    (0,), (1,), (2,), (3,),
    (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (2, 0), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (1, 0, 0), (0, 2, 0), (2, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0), (0, 1, 0, 0), (1, 0, 0, 0),
)  # fmt: skip


@dataclass(frozen=True)
class Tree:
    paths: tuple[Path, ...]  # drafted nodes, sorted by depth; node i + 1 holds paths[i]
    parents: tuple[int, ...]  # [N + 1]: parents[0] = -1 (root)
    depths: tuple[int, ...]  # [N + 1]: 0 for the root

    @property
    def size(self) -> int:
        return len(self.parents)

    @property
    def max_depth(self) -> int:
        return max(self.depths)

    @property
    def top_k(self) -> int:
        return 1 + max((r for p in self.paths for r in p), default=0)


def build_tree(paths: Sequence[Sequence[int]]) -> Tree:
    """Sort paths by depth, check every prefix is present, and derive parents/depths (root = node 0)."""
    ordered = sorted({tuple(p) for p in paths}, key=lambda p: (len(p), p))
    index: dict[Path, int] = {(): 0}
    parents, depths = [-1], [0]
    for p in ordered:
        if not p or any(r < 0 for r in p):
            raise ValueError(f"invalid tree path {p}")
        if p[:-1] not in index:
            raise ValueError(f"tree path {p} has no parent {p[:-1]}")
        index[p] = len(parents)
        parents.append(index[p[:-1]])
        depths.append(len(p))
    return Tree(tuple(ordered), tuple(parents), tuple(depths))


def chain_tree(depth: int) -> Tree:
    """A chain of top-1 tokens: one candidate per head."""
    return build_tree([(0,) * d for d in range(1, depth + 1)])


def default_tree(num_heads: int) -> Tree:
    """The default 25-node tree, cut to the number of heads."""
    return build_tree([p for p in DEFAULT_PATHS if len(p) <= num_heads])


def tree_tokens(tree: Tree, root: int, top_ids: torch.Tensor) -> list[int]:
    """Tokens of every node. top_ids: [K, k] head k's candidates by rank. -> [N + 1] ids (root first)."""
    ids = top_ids.tolist()
    return [int(root)] + [int(ids[len(p) - 1][p[-1]]) for p in tree.paths]


def graft_chain(
    tokens: Sequence[int], parents: Sequence[int], depths: Sequence[int], chain: Sequence[int]
) -> tuple[list[int], list[int], list[int]]:
    """Add ``chain`` (tokens guessed to follow the root, e.g. by prompt lookup) to a tree as one more branch.

    The chain follows the tree's nodes as far as their tokens agree (those guesses are already verified),
    and only its remainder becomes new nodes, appended after every existing node as a path hanging from the
    last shared one; so node indices of the tree are unchanged, parents still come before children, and a
    node ``>= len(tokens)`` is one that only the chain proposed. Returns the new (tokens, parents, depths)."""
    tokens, parents, depths = list(tokens), list(parents), list(depths)
    children: dict[tuple[int, int], int] = {}
    for i in range(1, len(tokens)):
        children.setdefault((parents[i], tokens[i]), i)
    node = 0
    for j, tok in enumerate(chain):
        child = children.get((node, int(tok)))
        if child is None:
            for t in chain[j:]:
                parents.append(node)
                depths.append(depths[node] + 1)
                tokens.append(int(t))
                node = len(tokens) - 1
            break
        node = child
    return tokens, parents, depths


# --------------------------------------------------------------------------- trees sized from measured costs


def path_probability(path: Path, q: Sequence[Sequence[float]]) -> float:
    """How likely the target accepts every node of ``path``: the product of ``q[d][rank]``, the chance that
    head d's candidate of that rank is the target's token once the path reached depth d (the Medusa-style
    independence that the static tree also assumes)."""
    p = 1.0
    for d, r in enumerate(path):
        p *= q[d][r]
    return p


def likeliest_paths(q: Sequence[Sequence[float]], depth: int, n: int) -> list[tuple[float, Path]]:
    """The ``n`` likeliest candidate paths of at most ``depth`` nodes with their acceptance chances, likeliest
    first (ties: shorter, then by ranks): exactly the first ``n`` of every such path sorted so.

    Best-first from the root rather than scoring and sorting all ``ranks ** depth`` paths (1,364 for four
    ranks and five heads, ~2 ms of Python per step, as much as a tenth of a compiled step): a path sorts
    after its parent (its chance is the parent's times a factor below 1, a tie goes to the shorter path), so
    popping the heap in order and pushing a popped path's children yields the sorted order itself."""
    ranks = len(q[0]) if q else 0
    heap = [(-q[0][r], 1, (r,)) for r in range(ranks)] if depth >= 1 and q else []
    heapq.heapify(heap)
    out: list[tuple[float, Path]] = []
    while heap and len(out) < n:
        neg, length, path = heapq.heappop(heap)
        out.append((-neg, path))
        if length < min(depth, len(q)):
            for r in range(ranks):
                heapq.heappush(heap, (neg * q[length][r], length + 1, (*path, r)))
    return out


def rank_paths(q: Sequence[Sequence[float]], n: int) -> list[list[tuple[float, Path]]]:
    """Per depth limit D = 1..len(q): :func:`likeliest_paths` of ``q`` (``n`` of them), what
    :func:`best_tree` scans."""
    return [likeliest_paths(q, depth, n) for depth in range(1, len(q) + 1)]


def best_tree(
    q: Sequence[Sequence[float]],
    verify_ms: Callable[[int], float],
    draft_ms: Callable[[int], float],
    max_nodes: int,
    extra_width: int = 0,
    extra_tokens: float = 0.0,
    ranked: list[list[tuple[float, Path]]] | None = None,
) -> tuple[Tree, float]:
    """The tree with the most expected committed tokens per millisecond, and that rate.

    A tree of n drafted nodes commits 1 + the sum of its nodes' acceptance probabilities per step (the
    target's own token plus every accepted node) and costs ``draft_ms(depth) + verify_ms(n + 1)``: the draft
    runs one head per level. For a depth limit D and a size n the best tree holds the n likeliest paths of
    at most D nodes, and those always form a tree: a child is never likelier than its parent (every factor
    of the product is < 1; ties go to the shorter path). So the search is a scan over n per D of the
    likeliest paths (:func:`likeliest_paths`).
    On a CPU where a wider verify costs more, this keeps the tree as small as acceptance justifies instead
    of the fixed 25 nodes that pay only where a wide forward is nearly free.

    ``extra_width`` nodes verified in the same forward besides the tree (a prompt-lookup branch) widen every
    candidate's forward and add ``extra_tokens`` expected tokens to it. ``ranked``: :func:`rank_paths` of
    ``q`` for at least ``max_nodes`` paths, when the caller already has it (one step compares trees with and
    without a branch)."""
    if not q or max_nodes < 1:
        raise ValueError("need at least one head and one node")
    per_depth = ranked if ranked is not None else rank_paths(q, max_nodes)
    best: tuple[float, int, list[Path]] = (-1.0, 0, [])
    for depth, scored in enumerate(per_depth, start=1):
        top = scored[:max_nodes]
        expected, cost = 1.0 + extra_tokens, draft_ms(depth)
        for n, (prob, _) in enumerate(top, start=1):
            expected += prob
            rate = expected / (cost + verify_ms(n + 1 + extra_width))
            if rate > best[0]:
                best = (rate, n, [p for _, p in top])
    rate, n, paths = best
    return build_tree(paths[:n]), rate


class AcceptanceStats:
    """Per request, how often head d's rank-r candidate was the target's token once a step reached depth d.

    Counts decay every step, so the estimate follows the request (prose vs code vs arithmetic), and sit on
    a prior of ``prior_n`` pseudo-trials at rate ``prior / (r + 1)`` so that a depth the tree has stopped
    reaching drifts back towards being tried. Every rank of ``top_ids`` is scored whether or not the tree
    held it, so nodes outside the current tree are still measured."""

    def __init__(
        self, depth: int, ranks: int, prior: float = 0.4, prior_n: float = 4.0, decay: float = 0.97
    ) -> None:
        self.ranks, self.decay = ranks, decay
        self.prior = [[prior_n * prior / (r + 1) for r in range(ranks)] for _ in range(depth)]
        self.prior_n = prior_n
        self.hits = [[0.0] * ranks for _ in range(depth)]
        self.trials = [0.0] * depth

    def observe(self, committed: Sequence[int], top_ids: Sequence[Sequence[int]]) -> None:
        """``committed``: this step's tokens (accepted nodes then the target's own), so position d is the
        target's token at depth d; ``top_ids[d]``: head d's candidates by rank."""
        for d in range(len(self.trials)):
            self.trials[d] *= self.decay
            self.hits[d] = [h * self.decay for h in self.hits[d]]
        for d in range(min(len(committed), len(self.trials), len(top_ids))):
            self.trials[d] += 1.0
            for r in range(self.ranks):
                if int(top_ids[d][r]) == int(committed[d]):
                    self.hits[d][r] += 1.0

    def rates(self) -> list[list[float]]:
        """``q[d][r]``, clipped below 1 so that a child is always less likely than its parent."""
        return [
            [min(0.999, (h + a) / (t + self.prior_n)) for h, a in zip(hits, prior, strict=True)]
            for hits, prior, t in zip(self.hits, self.prior, self.trials, strict=True)
        ]


class TreeSizer:
    """``tree=auto``: before each step, the tree :func:`best_tree` picks from the acceptance seen so far
    (:class:`AcceptanceStats`) and the step's measured costs; a
    :class:`~fastforward.core.pacing.WidthPolicy` whose width is a tree.

    The verify cost of a width w is the machine's recorded curve ``curve_ms(w)`` (a k-token forward of this
    model, dtype and kernel path) times a running correction measured on the steps actually taken, which
    takes in what the curve leaves out: the tree mask, a longer context, acceptance and cache
    bookkeeping. The draft's cost is running averages of its measured parts: observing the committed
    tokens, and proposing, per head run (a tree of depth D runs D heads)."""

    def __init__(
        self,
        curve_ms: Callable[[int], float],
        depth: int,
        ranks: int = 4,
        max_nodes: int = 31,
        decay: float = 0.8,
        timed: bool = True,
    ) -> None:
        """``timed=False``: the costs stay the curve's and the first guesses, never the measured times, so the
        trees depend only on what was committed (seeded sampling then reproduces exactly)."""
        self.curve_ms, self.ranks, self.max_nodes, self.decay = curve_ms, ranks, max_nodes, decay
        self.timed = timed
        self._ranked: list[list[tuple[float, Path]]] | None = None  # rank_paths of the current rates
        self.stats = AcceptanceStats(depth, ranks)
        self.scale = 1.0
        # first guesses, replaced by measurements after one step
        self.head_ms = self.observe_ms = 0.02 * curve_ms(1)
        self.rate = 0.0  # expected tokens per ms of the last chosen tree

    def verify_ms(self, width: int) -> float:
        return self.scale * self.curve_ms(width)

    def draft_ms(self, depth: int) -> float:
        return self.observe_ms + self.head_ms * depth

    def tree(self) -> Tree:
        return self.choose(self.max_nodes)

    def begin(self) -> TreeSizer:
        """A request starts on a decoder's sizer: the cost scale and the heads' acceptance carry over (they
        decay step by step, so a new text takes over within a few dozen steps)."""
        return self

    def reopen(self) -> None:
        """Forget every estimate (a warm-up's must not decide the measured run)."""
        self.__init__(
            self.curve_ms, len(self.stats.trials), self.ranks, self.max_nodes, self.decay, self.timed
        )

    def extras(self) -> dict[str, int]:
        return {}

    def choose(self, limit: int, extra_width: int = 0, extra_tokens: float = 0.0) -> Tree:
        """The best tree of at most ``limit`` nodes (its expected tokens per ms in :attr:`rate`), with
        ``extra_width`` more nodes in the forward that add ``extra_tokens`` expected tokens (see
        :func:`best_tree`)."""
        q = self.stats.rates()
        if self._ranked is None:  # once per step: the acceptance counts change only in observe()
            self._ranked = rank_paths(q, self.max_nodes)
        nodes = max(1, min(self.max_nodes, limit))
        tree, self.rate = best_tree(
            q, self.verify_ms, self.draft_ms, nodes, extra_width, extra_tokens, self._ranked
        )
        return tree

    def observe(self, step: StepCost) -> None:
        """One step's outcome: its committed tokens, head d's candidates ``step.candidates[d]`` for the heads
        that ran, the verify width (root included) and the measured milliseconds of each part."""
        self.stats.observe(step.tokens, step.candidates)
        self._ranked = None
        if not self.timed:
            return
        d = self.decay
        self.scale = d * self.scale + (1 - d) * step.verify_ms / max(self.curve_ms(step.fed), 1e-6)
        self.head_ms = d * self.head_ms + (1 - d) * step.propose_ms / max(len(step.candidates), 1)
        self.observe_ms = d * self.observe_ms + (1 - d) * step.observe_ms
