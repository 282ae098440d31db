"""SuffixDecoding (Oliaro et al., 2024, arXiv 2411.04975; vLLM's speculative method ``suffix``): draft trees
from suffix trees over the prompt and over earlier outputs, without training or a draft model.

Two bounded-depth suffix tries (every substring of up to ``depth`` tokens, with how often it occurred) hold the
text to copy from: one over this request's prompt and output, grown online as tokens commit, and a *global*
one over earlier outputs of the same scope (a server's API key; ``GenerationConfig.scope``), bounded by a
count of outputs with least-recently-added eviction. Each step matches the longest suffix of the committed
text (at most ``max_match`` tokens) in each trie, and grows a draft tree from the match best-first: a child's
score is its parent's times the child's share of the parent's occurrences (the empirical chance that the text
continues that way). The speculation budget follows how well the match is supported: at most
``spec_factor * match length`` nodes, and never a node scored below ``min_score``. Of the two tries' trees the
one with more expected tokens is verified.

Cost sizing: the nodes come out best-first, so every prefix of that order is a tree; the step verifies the
prefix with the most expected tokens per millisecond on this machine's measured k-token forward cost
(``1 + sum of scores`` tokens for ``curve(n + 1)``), and takes a plain AR step when no prefix beats one. So
it does not plan to run below AR at high cost per width, the failure vLLM's documentation warns of. Where
a wider forward costs no more (a compiled forward pads to its width bucket) the next best-first nodes fill
the padding, past the budget and the score floor (:func:`fill_width`).

Lossless: the drafts are deterministic guesses judged by the one exact rule (identical to greedy AR;
recursive rejection sampling over point masses when sampling). A seeded request reads its own trie only
(the global one changes with other requests), so a seed reproduces.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from fastforward.core.batching import Draft, Proposer, ProposerDecoder, Row, Verified
from fastforward.core.options import build_config, check_config, opt
from fastforward.errors import FastForwardError
from fastforward.models.costs import KS, cached_curve, interpolate, measure_curve


@dataclass(frozen=True)
class SuffixOptions:
    depth: int = opt(24, min=2, max=256, help="longest substring a suffix trie holds (match + continuation)")
    max_match: int = opt(12, min=1, help="longest suffix of the committed text matched in a trie")
    # 1.0, not 2.0 (before session 51): a larger budget let the cost sizing pick 8- and 16-token trees whose
    # scores promised more than they committed. SmolLM2 compiled on a 2-core EPYC, 8 prompts, one bench each
    # (results/compiled_s51/suffix_sf_*.json): bf16 GSM8K 1.40 / 1.50x of AR at 1.0 against 1.32 / 1.38x at
    # 2.0 and 1.24 / 1.34x at 4.0, MT-bench 1.37 / 1.43x against 1.29 / 1.36x, HumanEval 1.27x at both;
    # fp32 GSM8K 1.55x against 1.54x. The padding of the bucket a tree runs in is filled all the same.
    spec_factor: float = opt(1.0, min=0.0, help="most drafted nodes per step: spec_factor x match length")
    min_score: float = opt(
        0.05, min=0.0, max=1.0, help="leave out nodes whose estimated chance is below this"
    )
    max_nodes: int = opt(32, min=1, help="most drafted nodes per verify forward")
    outputs: int = opt(
        256,
        min=0,
        help="earlier outputs kept per scope in the global trie (oldest evicted; 0 = no global trie)",
    )
    scopes: int = opt(
        64, min=1, help="scopes (a server's API keys) with a global trie kept (least recent evicted)"
    )

    def validate(self) -> None:
        if self.max_match >= self.depth:
            raise FastForwardError(
                f"suffix: max_match ({self.max_match}) must be < depth ({self.depth}): a match needs room to continue"
            )


class _Node:
    __slots__ = ("children", "count")

    def __init__(self) -> None:
        self.children: dict[int, _Node] = {}
        self.count = 0


class SuffixTrie:
    """Every substring of at most ``depth`` tokens of the sequences added, as paths from the root, each node
    counting the substring's occurrences. Grown online: :meth:`extend` appends a token to the current sequence
    (its suffixes of up to ``depth`` tokens each gain that token); :meth:`add` and :meth:`remove` take a whole
    sequence (the global trie's outputs)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.root = _Node()
        self.nodes = 1
        self._open: deque[_Node] = deque()  # nodes of the current sequence's last suffixes (extend)

    def extend(self, token: int) -> None:
        self._open.append(self.root)
        moved: deque[_Node] = deque()
        for node in self._open:
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = _Node()
                self.nodes += 1
            child.count += 1
            moved.append(child)
        if len(moved) > self.depth - 1:  # a suffix at full depth grows no further
            moved.popleft()
        self._open = moved

    def end_sequence(self) -> None:
        self._open.clear()

    def add(self, tokens: Sequence[int]) -> None:
        for t in tokens:
            self.extend(int(t))
        self.end_sequence()

    def remove(self, tokens: Sequence[int]) -> None:
        """Undo :meth:`add` of the same sequence: decrement its substrings, drop nodes that reach zero."""
        tokens = [int(t) for t in tokens]
        for i in range(len(tokens)):
            node, path = self.root, []
            for t in tokens[i : i + self.depth]:
                child = node.children[t]
                path.append((node, t, child))
                node = child
            for _, _, child in path:
                child.count -= 1
            for parent, t, child in reversed(path):
                if child.count <= 0 and t in parent.children:
                    self.nodes -= _size(child)
                    del parent.children[t]

    def match(self, context: Sequence[int], max_len: int) -> tuple[_Node | None, int]:
        """The node of the longest suffix of ``context`` (at most ``max_len`` tokens) that occurs, with its
        length; (None, 0) when not even the last token occurs with a continuation."""
        for n in range(min(max_len, len(context)), 0, -1):
            node: _Node | None = self.root
            for t in context[len(context) - n :]:
                node = node.children.get(int(t))
                if node is None:
                    break
            if node is not None and node.children:
                return node, n
        return None, 0


def _size(node: _Node) -> int:
    return 1 + sum(_size(c) for c in node.children.values())


def grow_tree(node: _Node, budget: int, min_score: float) -> tuple[list[int], list[int], list[float]]:
    """Best-first draft tree below a matched node: at most ``budget`` nodes, each scored by its parent's score
    times its share of the parent's occurrences, none below ``min_score``. Returns (tokens, parents, scores)
    of the drafted nodes in the order taken (parents index this list, -1 = the anchor); every prefix of that
    order is a tree, scores never increase along it."""
    tokens: list[int] = []
    parents: list[int] = []
    scores: list[float] = []
    heap: list[tuple[float, int, int, int, _Node]] = []
    tie = 0

    def push(parent_node: _Node, parent_index: int, parent_score: float) -> None:
        nonlocal tie
        total = sum(c.count for c in parent_node.children.values())
        children = parent_node.children.items()
        left = budget - len(tokens)  # no more of a node's children than nodes still to take can be taken
        if len(parent_node.children) > left:  # (a short match in a large global trie has thousands)
            children = heapq.nlargest(left, children, key=lambda tc: tc[1].count)  # stable: ties keep order
        for t, c in children:
            s = parent_score * c.count / total
            if s >= min_score:
                heapq.heappush(heap, (-s, tie, parent_index, t, c))
                tie += 1

    push(node, -1, 1.0)
    while heap and len(tokens) < budget:
        neg, _, parent, t, child = heapq.heappop(heap)
        tokens.append(t)
        parents.append(parent)
        scores.append(-neg)
        push(child, len(tokens) - 1, -neg)
    return tokens, parents, scores


def planned(scores: Sequence[float], budget: int, min_score: float) -> int:
    """How many of the best-first nodes the speculation budget covers: at most ``budget``, none scored below
    ``min_score`` (scores never increase along the order, so this is a prefix)."""
    n = 0
    while n < min(budget, len(scores)) and scores[n] >= min_score:
        n += 1
    return n


def fill_width(n: int, available: int, verify_ms: Callable[[int], float]) -> int:
    """Nodes to verify once ``n`` were chosen: more of the next best-first ones while a forward one token
    wider costs no more on this machine's curve (at most ``available``); ``n`` = 0, an AR step, stays one.

    Why: a compiled forward pads to its width bucket, so a 3-token tree runs the 4-token graph at the 4-token
    cost, and the padding slot could have held a guess for nothing. The speculation budget (``spec_factor``
    x match length) and ``min_score`` keep weak guesses out because each costs verify compute; in a slot
    that is computed anyway they only add chances. Seen on SmolLM2 bf16 HumanEval (2-core EPYC, session 51):
    297 of 477 tree steps were 3 tokens padded to 4, committing 1.48 tokens each."""
    if n == 0:
        return 0
    while n < available and verify_ms(n + 2) <= verify_ms(n + 1):
        n += 1
    return n


def best_prefix(scores: Sequence[float], verify_ms: Callable[[int], float]) -> tuple[int, float]:
    """How many of the best-first nodes to verify: the prefix with the most expected tokens per ms (1 + the
    sum of its scores, for a forward of n + 1 tokens), and that rate; n = 0 is the plain AR step."""
    best_n, best_rate, expected = 0, 1.0 / verify_ms(1), 1.0
    for n, s in enumerate(scores, start=1):
        expected += s
        rate = expected / verify_ms(n + 1)
        if rate > best_rate:
            best_n, best_rate = n, rate
    return best_n, best_rate


class GlobalTries:
    """Per scope, a suffix trie over that scope's last ``outputs`` outputs; at most ``scopes`` scopes, least
    recently used evicted. Memory is bounded by outputs x (tokens per output) x depth nodes per scope."""

    def __init__(self, depth: int, outputs: int, scopes: int) -> None:
        self.depth, self.outputs, self.scopes = depth, outputs, scopes
        self._tries: OrderedDict[str, tuple[SuffixTrie, deque[list[int]]]] = OrderedDict()

    def get(self, scope: str) -> SuffixTrie | None:
        entry = self._tries.get(scope)
        if entry is None:
            return None
        self._tries.move_to_end(scope)
        return entry[0]

    def add(self, scope: str, tokens: list[int]) -> None:
        if self.outputs == 0 or not tokens:
            return
        if scope not in self._tries:
            self._tries[scope] = (SuffixTrie(self.depth), deque())
            while len(self._tries) > self.scopes:
                self._tries.popitem(last=False)
        trie, kept = self._tries[scope]
        self._tries.move_to_end(scope)
        trie.add(tokens)
        kept.append(tokens)
        while len(kept) > self.outputs:
            trie.remove(kept.popleft())

    def nodes(self) -> int:
        return sum(trie.nodes for trie, _ in self._tries.values())

    def clear(self) -> None:
        self._tries.clear()


class DraftTree(NamedTuple):
    """One trie's best-first draft for a step: ``planned`` of its nodes are within the speculation budget
    and the score floor; any after them only fill a padded forward."""

    tokens: list[int]
    parents: list[int]
    scores: list[float]
    planned: int
    match: int  # length of the suffix matched in the trie
    source: int  # which trie: 0 the request's own, 1 the scope's global one

    @property
    def expected(self) -> float:
        """Expected accepted tokens of the planned nodes (what picks between the two tries)."""
        return sum(self.scores[: self.planned])


NO_TREE = DraftTree([], [], [], 0, 0, 0)  # no trie matched: an AR step


class SuffixDecoder(ProposerDecoder):
    name = "suffix"

    def __init__(self, model: torch.nn.Module, options: SuffixOptions, verify_curve=None) -> None:
        """``verify_curve``: ms of a k-token forward of ``model`` on this machine (the per-machine cached curve
        from :func:`build`; measured here, uncached, on first use if not given)."""
        super().__init__(model)
        self.options = check_config(options, self.name)
        impl = getattr(model.config, "_attn_implementation", "sdpa")
        if impl and "flash" in str(impl):
            raise FastForwardError(f"suffix needs 4D tree masks; attention '{impl}' does not take them")
        self.verify_curve = verify_curve
        self.global_tries = GlobalTries(options.depth, options.outputs, options.scopes)

    def reset(self) -> None:
        """Forget every earlier output (all scopes)."""
        self.global_tries.clear()

    def reopen_estimates(self) -> None:
        """A bench's warm-up ran the measured prompts' first one: what it taught must not speed up the
        measured run, so it is forgotten like the other methods' timing estimates."""
        self.reset()

    def _draft(self, context: list[int], tries: list[SuffixTrie], fill: bool = False) -> DraftTree:
        """The better of the tries' trees for this step (the one whose planned nodes expect more tokens);
        with ``fill``, more best-first nodes follow the planned ones, to fill a padded forward
        (:func:`fill_width`)."""
        o = self.options
        best = NO_TREE
        for i, trie in enumerate(tries):
            node, n = trie.match(context, o.max_match)
            if node is None:
                continue
            budget = min(o.max_nodes, math.floor(o.spec_factor * n))
            room = fill_width(budget, o.max_nodes, self.verify_curve) if budget and fill else budget
            tokens, parents, scores = grow_tree(node, room, 0.0 if room > budget else o.min_score)
            tree = DraftTree(tokens, parents, scores, planned(scores, budget, o.min_score), n, i)
            if tree.expected > best.expected:
                best = tree
        return best

    def proposer(self, solo: bool) -> SuffixProposer:
        if self.verify_curve is None:
            self.verify_curve = interpolate(measure_curve(self.model))
        return SuffixProposer(self, solo)


class SuffixProposer(Proposer):
    """SuffixDecoding per row: a suffix trie over the row's prompt and output, grown as it commits, beside the
    decoder's global trie of the request's scope (not read by a seeded row: earlier outputs, which other
    requests change, must not shape a seeded run); each step the better tree of the two, cut to the prefix
    with the most expected tokens per ms on the machine's cost curve (none: an AR step). A finished row's
    output, with the prompt's end it continued, joins its scope's global trie, so later requests (batched
    or not) copy from it."""

    name = "suffix"
    prunable = True

    def __init__(self, decoder: SuffixDecoder, solo: bool = False) -> None:
        """``solo``: the row decodes alone (batch 1), the one case whose forwards run compiled and so are
        padded to their width bucket; only then are trees filled to it (a batch runs eagerly, where every
        fed token costs)."""
        self.decoder, self.solo = decoder, solo

    def admit(self, row: Row, prefill: Any) -> None:
        d = self.decoder
        local = SuffixTrie(d.options.depth)
        for t in row.sequence:
            local.extend(t)
        cfg = row.run.config
        shared = None if cfg.sampling.seeded else d.global_tries.get(cfg.scope)
        tries = [local] if shared is None else [local, shared]
        row.state = {
            "local": local,
            "tries": tries,
            "seen": len(row.run.tokens),
            "global": int(shared is not None),
        }
        row.state.update(tree=0, ar=0, drafted=0, filled=0, match=0, from_global=0, hist=[])

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        d = self.decoder
        m = d.options.max_match
        drafts = []
        for row in rows:
            if row.jumped:  # the grammar forces this step: nothing to grow
                drafts.append(Draft())
                continue
            st = row.state
            # the last max_match committed tokens, without copying the whole sequence every step
            context = (row.request.prompt[-m:] + row.run.tokens[-m:])[-m:]
            tree = d._draft(context, st["tries"], self.solo)
            n, _ = best_prefix(tree.scores[: tree.planned], d.verify_curve)
            n = fill_width(n, len(tree.tokens), d.verify_curve) if self.solo else n
            n = min(n, max(row.room - 1, 0))  # a best-first prefix is still a tree
            st["pending"] = tree  # counted in observe(), once the step's draft is known
            drafts.append(Draft(tree.tokens[:n], tree.parents[:n]))
        return drafts

    def observe(
        self, rows: Sequence[Row], drafts: Sequence[Draft], paths: Sequence[list[int]], out: Verified
    ) -> None:
        for row, d, path in zip(rows, drafts, paths, strict=True):
            st = row.state
            tree = st.pop("pending", NO_TREE)
            if row.jumped:  # a jump-forward step drafted the grammar's tokens, not the trie's
                pass
            elif d.tokens:
                st["tree"] += 1
                st["drafted"] += len(d.tokens)
                st["filled"] += max(0, len(d.tokens) - tree.planned)  # in a padded forward's slots
                st["match"] += tree.match
                st["from_global"] += tree.source
                hist = st["hist"]
                hist.extend([0] * (len(path) - len(hist)))
                hist[len(path) - 1] += 1
            else:
                st["ar"] += 1
            for t in row.run.tokens[st["seen"] :]:
                st["local"].extend(t)
            st["seen"] = len(row.run.tokens)

    def row_extras(self, row: Row) -> dict[str, Any]:
        d, run = self.decoder, row.run
        if row.request.error is None:  # a finished output becomes text later requests of its scope copy
            d.global_tries.add(run.config.scope, row.request.prompt[-d.options.max_match :] + run.tokens)
        st = row.state or {}
        return {
            "suffix_tree_steps": st.get("tree", 0),
            "suffix_ar_steps": st.get("ar", 0),  # no match, or no tree beat an AR step on this machine
            "suffix_drafted": st.get("drafted", 0),
            # of them, guesses past the budget in slots a padded forward computes anyway
            "suffix_filled": st.get("filled", 0),
            "suffix_match_sum": st.get("match", 0),  # / suffix_tree_steps = mean match length
            "suffix_accepted_hist": st.get("hist", []),
            "suffix_global": st.get("global", 0),  # earlier outputs of this scope were read
            "suffix_from_global": st.get("from_global", 0),  # tree steps drafted from earlier outputs
        }


def build(name: str, target, draft, options: dict) -> SuffixDecoder:
    opts = build_config(SuffixOptions, options, name)
    return SuffixDecoder(target.model, opts, interpolate(cached_curve(target, ks=KS)))


OPTIONS = SuffixOptions
