"""The static candidate tree and the pure functions that build and judge it.

A tree is a set of *paths of ranks*: ``(0, 2)`` is the node holding head 0's top-1 token followed by head 1's
top-3 token. Node 0 is the root: the target's newest token, which the verification forward reads first.
Verification runs the target once over all nodes with a tree mask and judges the nodes with
:mod:`fastforward.core.acceptance` (greedy or typical, the longest accepted root-to-node path wins).

Chimera's heads draft along their top-1 chain (head k sees the top-1 tokens of heads < k), so nodes off that
chain reuse head k's top-k computed for the top-1 prefix: the same approximation Medusa's trees make.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

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
