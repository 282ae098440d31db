"""Compiled target forwards: one graph per width bucket over a fixed-shape cache (``--compile``).

Why: on a 2-core CPU a small model's eager forward is mostly overhead, not arithmetic. SmolLM2-135M in fp32
reads 0.54 GB of weights per token, ~25 ms at this class of machine's bandwidth, yet eager torch spends
~55-60 ms (oneDNN-prepacked linears, 70% of the time, below bandwidth on its small matrices; dispatch and
the elementwise ops the rest). inductor with weight freezing and ``max-autotune`` emits its own CPU GEMM
micro-kernels for each weight shape, fuses the norms, rotary and activations, and removes the dispatch:
measured on an AVX2-only EPYC: 34.8 ms per 1-token engine forward against 63.3 eager (200 cached
tokens, fixed 1024-slot cache; results/engine_s23.json).

How: a compiled graph needs fixed shapes, so

- the rows' KV cache is a :class:`fastforward.core.cache.FixedCache` of ``capacity`` slots that this object
  owns and reuses for every request (one allocation, one set of graphs; a request that does not fit, or
  arrives while another holds the cache, runs eagerly and says so in its stats);
- a forward over k fed tokens is padded to the next width bucket (:data:`BUCKETS`); pad nodes attend only
  to the prefix and themselves and are dropped, so padding never changes a token (tested);
- the attention mask always spans the whole capacity (slots past a row's length are hidden).

The prompt's prefill runs the same model eagerly over the same cache (one forward per request, any
length). Graphs are compiled on first use of a bucket (minutes on 2 cores). With a ``store`` (what
``--compile on`` gives on a CPU) each graph is an AOTInductor package on disk (:mod:`fastforward.core.aot`),
so the next process loads it in seconds instead of compiling again; without one (CUDA graphs, the quick
test mode) ``torch.compile`` compiles in process and inductor's caches live in the fastforward cache
directory.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from fastforward.core import memory
from fastforward.core.cache import FixedCache
from fastforward.log import log

BUCKETS = (1, 2, 4, 8, 16, 32)
# the engine's one model call (:func:`fastforward.core.call.model_call`), passed in so this module
# never calls the model itself: (model, ids, positions, mask, cache, hidden=..., keep=...) -> model output
ModelCall = Callable[..., Any]
MODES = ("off", "on", "auto")
DEFAULT_CAPACITY = 1024


SMALLEST_TIER = 512  # fixed caches come in sizes 512, 1024, 2048, ... up to the compiled capacity


def tiers(capacity: int) -> tuple[int, ...]:
    """The fixed-cache sizes a compiled forward offers: doubling from :data:`SMALLEST_TIER` (or ``capacity``
    itself when smaller) up to ``capacity``.

    Why tiers: a step attends over every slot of its fixed cache, used or not, so its cost grows with the
    size (SmolLM2 fp32, 2-core AVX2: 22.6 ms per token over 512 slots against 33.4 over 1024 before
    the shared key/value heads of :func:`gqa_sdpa`); a request takes the smallest that holds it, and each
    size compiles its graphs on first use, so a run whose requests all fit 512 slots compiles nothing more."""
    sizes = [min(SMALLEST_TIER, capacity)]
    while sizes[-1] < capacity:
        sizes.append(min(2 * sizes[-1], capacity))
    return tuple(sizes)


def tier(capacity: int, need: int) -> int | None:
    """The fixed-cache size that serves a request needing ``need`` slots (None when none holds it)."""
    return next((t for t in tiers(capacity) if t >= need), None)


def bucket(k: int, widths: Sequence[int] = BUCKETS) -> int | None:
    """The compiled width among ``widths`` that serves a forward over ``k`` tokens (it is padded up to it),
    or None when it is wider than any."""
    return next((b for b in sorted(widths) if b >= k), None)


# the widths kept first when memory holds fewer packages than :data:`BUCKETS`: AR's step, the verify of a
# short draft chain (gamma <= 7), the widest trees (lookahead, suffix, recycle), then the rest
BUCKET_PRIORITY = (1, 8, 32, 4, 16, 2)


def buckets_that_fit(weights: int, available: int | None) -> tuple[int, ...]:
    """The width buckets whose packages fit in ``available`` bytes when each holds its own copy of
    ``weights`` bytes of weights (:func:`fastforward.core.memory.packages_that_fit`), the first in
    :data:`BUCKET_PRIORITY`. Why: six copies of a 1.5B model's bf16 weights (3.7 GB each) do not fit a
    24 GB machine, and a build that runs out of memory is killed with the whole process; two buckets (1 and
    8) fit, and a forward of 2-7 tokens pads to 8 (its 8-token step costs 1.09x the 1-token one there)."""
    n = memory.packages_that_fit(weights, available, len(BUCKETS))
    return tuple(sorted(BUCKET_PRIORITY[:n]))


def parse_buckets(text: str) -> tuple[int, ...] | None:
    """``--buckets``: ``auto`` (None: every bucket that fits in memory, :func:`buckets_that_fit`) or a
    comma-separated subset of :data:`BUCKETS`. ValueError, in one line, for anything else."""
    if text.strip() == "auto":
        return None
    try:
        widths = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        widths = []
    if not widths or any(w not in BUCKETS for w in widths):
        raise ValueError(
            f"--buckets takes auto or widths from {','.join(map(str, BUCKETS))} (comma-separated), got {text!r}"
        )
    return tuple(widths)


def inductor_cache(root: str | None = None) -> None:
    """Keep inductor's compiled kernels and autotuning results under ``root`` (read by inductor at compile
    time), so a second process reuses them, in a folder of this process's ISA (:func:`isa_key`: a process
    under an ISA cap must not read entries compiled without it; they gave NaN logits); ``root`` None: under
    torch's own default folder. A ``TORCHINDUCTOR_CACHE_DIR`` the user set is kept. (Our graphs
    bypass inductor's FX graph cache in torch 2.13: freezing prepacks the weights into mkldnn tensors, which
    inductor cannot pickle; a second process still lowers every bucket again, ~55 s of a first compile's
    ~80 s on a 2-core CPU. Settings that do cache run at eager speed: results/compile_startup.)"""
    from fastforward.hardware import isa_key

    key = isa_key()
    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    try:  # torch writes its default into the environment on first use: that one is not the user's choice
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        torch_default = os.path.abspath(default_cache_dir())
    except ImportError:
        torch_default = None
    keyed = current is not None and os.path.basename(os.path.normpath(current)) == key  # set here before
    if not (current is None or keyed or os.path.abspath(current) == torch_default):
        return  # the user's own folder
    if root is not None:
        base = os.path.join(root, "inductor")
    else:
        base = os.path.dirname(os.path.normpath(current)) if keyed else torch_default
    if base is not None:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(base, key)


GQA_SDPA = "fastforward_gqa_sdpa"  # the attention implementation compiled models run with (registered below)


def gqa_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, except that grouped-query heads share their key/value heads inside the
    kernel (``enable_gqa``) instead of being copied per query head first.

    Why: under torch.compile transformers copies the keys and values once per query head (``repeat_kv``)
    whenever a mask is given, which we always give; over a fixed cache that is every slot, used or not, in
    every layer and step. On SmolLM2 (9 query heads on 3 key/value heads, 1024 slots) the copies were about
    8 of the 33 ms of a compiled fp32 decode step on a 2-core AVX2 CPU (33.4 -> 25.1 ms without them).
    Anything this does not cover (a softcap, a position bias, attention weights asked for) goes to
    transformers' own function."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if attention_mask is not None and attention_mask.shape[-1] < key.shape[-2]:
        # an eager prefill's mask covers only the cache slots filled so far: attend over those alone
        key, value = key[:, :, : attention_mask.shape[-1]], value[:, :, : attention_mask.shape[-1]]
    plain = not any(kwargs.get(k) for k in ("softcap", "position_bias", "output_attentions", "cache"))
    rowwise = getattr(getattr(module, "config", None), ROWWISE, False) and query.shape[2] <= BUCKETS[-1]
    if rowwise and attention_mask is None and plain and not dropout:
        # transformers leaves out the mask where it is causal with nothing hidden (a decoding step, as a
        # rule); the row-by-row attention needs it spelled out to give that step the same bits as a wider one
        q, s = query.shape[2], key.shape[2]
        seen = (
            torch.arange(s, device=query.device)[None, :]
            <= torch.arange(s - q, s, device=query.device)[:, None]
        )
        attention_mask = seen[None, None]
    if not plain or dropout or attention_mask is None or (query.shape[1] == key.shape[1] and not rowwise):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    mask = attention_mask[:, :, :, : key.shape[-2]]
    if rowwise:
        out = rowwise_attention(query, key, value, mask, scaling)
    elif query.device.type == "cpu" and query.shape[2] <= BUCKETS[-1]:
        out = grouped_attention(query, key, value, mask, scaling)
    else:
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, scale=scaling, enable_gqa=True
        )
    return out.transpose(1, 2).contiguous(), None


def grouped_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor,
    scaling: float | None = None,
) -> torch.Tensor:
    """Attention of a few query positions over a (fixed) cache as two batched matmuls, the query heads of a
    key/value head stacked as rows of one matmul, scores and softmax in float32: [B, Hq, Q, D] from query
    [B, Hq, Q, D], key/value [B, Hkv, S, D] and ``mask`` [B, 1 or Hq, Q, S] (boolean: True attends;
    or additive).

    Why not the SDPA kernel: on a CPU its flash kernel is built for long queries. For the 1-32 positions of
    a decoding step in bfloat16 it cost ~257 us per layer over 512 slots, 30% of a compiled step (SmolLM2,
    2-core AVX-512 EPYC). As these matmuls, with the mask and softmax fused around them by inductor, the
    compiled bfloat16 AR ran 1.34x faster in one process (results/compiled_s31/ab_attention_bf16.txt). In
    float32 the two are even (0.98x, within the host's noise: ab_attention_fp32.txt), and one path serves
    every dtype. float32 scores keep a bfloat16 model's softmax as exact as the SDPA kernel's float32
    accumulation did.

    The softmax's denominator is a matmul too (the unnormalized weights times a block of ones), not a sum
    over the slots: a vectorized sum puts slot j in lane j % width, so a tree node whose hidden sibling sits
    among its ancestors' slots added its terms otherwise than its AR step and got other last bits (3e-5 on
    SmolLM2, results/compiled_s57/bits_fp32.txt). Where inductor's GEMM templates run the matmuls (float32
    packages up to :func:`fp32_template_width` tokens, :func:`gemm_backends`) a row's products are added slot
    after slot whatever the other rows, and a hidden slot adds an exact 0, so a chain's tokens and a tree's
    nodes get their 1-token steps' bits (tests/test_compiled.py)."""
    b, hq, q, d = query.shape
    hkv, s = key.shape[1], key.shape[2]
    g = hq // hkv
    scale = d**-0.5 if scaling is None else scaling
    scores = (query.reshape(b, hkv, g * q, d).float() @ key.float().transpose(-1, -2)).view(b, hkv, g, q, s)
    m = mask.view(mask.shape[0], hkv, g, q, s) if mask.shape[1] == hq > 1 else mask.unsqueeze(1)
    scores = scores * scale
    scores = scores.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else scores + m.float()
    weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True)).view(b, hkv, g * q, s)
    # batched like the weights: the templates take no matmul whose second operand is broadcast
    ones = torch.ones(b, hkv, s, DENOMINATOR_LANES, dtype=weights.dtype, device=weights.device)
    total = (weights @ ones)[..., :1]
    return ((weights @ value.float()) / total).view(b, hq, q, d).to(query.dtype)


ROWWISE = "fastforward_rowwise_attention"  # a model config flag: attention by :func:`rowwise_attention`
# :func:`rowwise_attention` pads the cache slots it reads to a multiple of this: a vectorized sum puts slot j in
# lane j % width, so trailing zeros leave every lane's sum as it was, where a ragged tail would not (a 1-token
# step over n + 1 eager slots and a k-token forward over n + k then add a row's terms in the same order)
ROW_SLOTS = 64
# columns of ones :func:`rowwise_attention` sums beside the values for the softmax's denominator: a whole
# AVX-512 vector of floats (two AVX2 ones), so the reduction has no scalar tail; one column (session 52) left
# each output row a 1-float tail
DENOMINATOR_LANES = 16


def materialized(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself (a view of all of it, eagerly); under inductor, a buffer written once before its readers.

    Why: inductor inlines a chain of elementwise producers into the loop that reads it. The query that
    :func:`rowwise_attention` reads is such a chain (the int8 product dequantized, plus the bias, rotated by
    cosines and sines computed from the positions), and its score loop reads each query element once per
    cache slot: the whole chain, two vectorized transcendentals included, ran 512 times per element. That
    kernel took ~4.9 ms of each layer's 8-token W8A8 step on the Qwen2.5-1.5B, nearly half of the step
    (session 55, inductor's kernel profile). ``as_strided`` is lowered on a realized buffer with the strides
    given, so the chain runs once per element. Measured, not assumed: every width still gives a token its
    1-token step's logits bit for bit on SmolLM2 and the 1.5B (results/compiled_s55/widths.log), and the
    methods stay on their AR's tokens."""
    return torch.as_strided(t, t.shape, t.stride(), t.storage_offset())


def rowwise_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor,
    scaling: float | None = None,
    gather: bool | None = None,
) -> torch.Tensor:
    """:func:`grouped_attention`'s result, computed so that a query row's output has the same bits whatever
    rows share the forward and wherever its visible cache slots sit: in a 1-token AR step its prefix is
    contiguous, in a tree forward a node's ancestors are spread among its siblings' slots, which it must not
    see. No matrix multiply (their kernels and blocking depend on how many rows share them):

    - a score is one row's and one slot's elementwise product reduced over the head dimension, the same
      terms in the same order for every row and slot;
    - the softmax's maximum is exact in any order; its exponentials are elementwise, and a hidden slot's is
      exactly 0;
    - the weighted sum of values and the softmax's denominator (ones beside the values) are one reduction
      over the slots, which must add a row's visible terms in the same order with zeros wherever they fall.
      Eager torch reassociates such sums in blocks of slots, so eagerly (``gather`` True) each row first
      gathers its visible slots to the front in slot order, where its AR step has them, and pads the slots
      to a multiple of :data:`ROW_SLOTS` (an eager cache holds only the slots filled so far): exact, tested. Compiled (``gather`` False, the default under ``torch.compile``; the gather cost 10x there)
      it rests on inductor emitting each reduction the same way at every width, which needs its packages
      built so that no row's reduction is split across threads (:func:`fastforward.core.aot.serial_row_chunk`;
      without that the Qwen2.5-1.5B's 4- and 8-token graphs gave logits up to 1.08 from its 1-token graph's,
      results/compiled_s52/widths_qwen15_w8a8.txt).

    Why: W8A8 (``--weights w8a8``) rounds every linear layer's input to int8 per token. Its integer products
    are exact, so attention is the one width-dependent part of its forward, and a last-bit difference there
    that lands on a rounding edge moved SmolLM2's logits by up to 2.7 (session 52): multi-token methods then
    left its greedy AR. Cost, compiled, per layer: about what :func:`grouped_attention` costs for one row,
    ~1.5-2.5x it for 8 (results/compiled_s53/attention.txt); eagerly the products are materialized ([rows,
    slots, head dim] per layer)."""
    gather = not torch.compiler.is_compiling() if gather is None else gather
    if not gather:
        query = materialized(query)
    if gather and (pad := -key.shape[2] % ROW_SLOTS):
        key, value = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (key, value))
        mask = torch.nn.functional.pad(mask, (0, pad), value=False if mask.dtype == torch.bool else -math.inf)
    b, hq, q, d = query.shape
    hkv, s = key.shape[1], key.shape[2]
    g = hq // hkv
    scale = d**-0.5 if scaling is None else scaling
    visible = mask if mask.dtype == torch.bool else mask == 0
    visible = visible.expand(b, visible.shape[1], q, s)
    # a mask per query head, or one for all: [b, hkv, g, q, s] or [b, 1, 1, q, s]
    visible = visible.view(b, hkv, g, q, s) if visible.shape[1] == hq > 1 else visible.unsqueeze(1)
    keys = key.float()[:, :, None, None]  # [b, hkv, 1, 1, s, d]
    # the values and, beside them, a vector's width of ones whose sums are the softmax's denominator: one
    # reduction over the slots, slot after slot per output lane, as a tree node's must be (a separate sum of
    # the weights runs across vector lanes, and a node's slot sits in another lane than in its AR step)
    ones = torch.ones(*value.shape[:-1], DENOMINATOR_LANES, dtype=torch.float32, device=value.device)
    values = torch.cat([value.float(), ones], -1)[:, :, None, None]  # [b, hkv, 1, 1, s, d + lanes]
    if gather and visible.shape[1] == 1:  # each row's visible slots first, in slot order
        order = torch.argsort((~visible).to(torch.uint8), dim=-1, stable=True)  # [b, 1, 1, q, s]
        visible = torch.gather(visible, -1, order)
        at = order.expand(b, hkv, 1, q, s)[..., None]
        keys = torch.gather(keys.expand(b, hkv, 1, q, s, d), 4, at.expand(b, hkv, 1, q, s, d))
        wide = values.shape[-1]
        values = torch.gather(values.expand(b, hkv, 1, q, s, wide), 4, at.expand(b, hkv, 1, q, s, wide))
    # keys read as [d, s]: the sum over d runs with the slots side by side (vector lanes), each slot's terms
    # in order, so no horizontal sum per score
    rows = query.reshape(b, hkv, g, q, d, 1).float()
    scores = ((rows * keys.transpose(-1, -2)).sum(-2) * scale).masked_fill(
        ~visible, torch.finfo(torch.float32).min
    )
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))  # [b, hkv, g, q, s]; hidden slots exactly 0
    out = (weights.unsqueeze(-1) * values).sum(-2)  # [b, hkv, g, q, d + lanes]
    return (out[..., :d] / out[..., d : d + 1]).reshape(b, hq, q, d).to(query.dtype)


def gemm_backends(
    dtype: torch.dtype,
    amx: bool | None = None,
    int4: bool = False,
    width: int | None = None,
    quantized: bool = False,
) -> str:
    """inductor's ``max_autotune_gemm_backends`` for a CPU model in ``dtype`` and a package for ``width`` fed
    tokens (None: a graph compiled in this process, which serves any width): in float32 with full weights
    (not ``quantized``) its own GEMM templates up to :func:`fp32_template_width` tokens and, wider, the
    templates under AVX2 and oneDNN's linear with AVX-512 (below); in bfloat16 (int8 weights alike: their
    kernels take bf16 activations) the templates where the process may
    use AMX (``amx``; None: :func:`amx_usable`), and on AVX-512 without AMX the templates for 1-4 tokens and
    ATen (oneDNN, weights prepacked by freezing; ``_weight_int8pack_mm`` for int8) from 8; float16, int4
    weights (``int4``) and AVX2, ATen.

    Measured on a 2-core AMX Xeon: SmolLM2-135M's bfloat16 forward over 1 / 8 / 16 tokens cost 15.0 / 18.8 /
    23.4 ms through the templates (their AMX micro-kernels), 25-32 / 27.8 / 30.2 ms through ATen, one process
    each (results/compiled_s36/gemm_bf16.txt); the templates' compile is slower (466 s for five widths, 195
    s). int8 weights there: Qwen2.5-Coder-1.5B 112 / 172 ms for 1 / 8 tokens through the templates against
    ATen's 157 / 408 ms (results/compiled_s38/gemm_woq.txt), once :func:`fastforward.core.aot.flatten_state_names`
    ended the second copy of every weight that held them back (results/compiled_s39/prune.txt). int4
    weights stay on ATen: SmolLM2-135M int4 cost 12.4 / 25.0 ms for 1 / 8 tokens through the templates
    against 9.6 / 24.0 through ATen (same file).

    On a 2-core AVX-512 EPYC without AMX (avx512_bf16, VNNI; session 46, results/compiled_s46/gemm.txt, one
    process per backend) it depends on the width: the templates' small-M kernels ran SmolLM2-135M bf16's 1 /
    2 / 4 / 8-token forwards in 11.7 / 13.4 / 16.2 / 49.5 ms against ATen's 24.7 / 25.8 / 28.6 / 31.8; with
    int8 weights 6.8 / 8.0 / 16.0 / 38.6 ms against 11.3 / 13.7 / 16.3 / 29.3, and Qwen2.5-Coder-1.5B int8's
    1 / 4 / 8 / 16-token forwards 50.7 / 80.3 / 321 / 614 ms against 84.4 / 112.5 / 218 / 392. (Session 31 had
    measured the templates' 1-row GEMMs ~2.4x slower than oneDNN's there, before the weight layout of
    sessions 38-39; results/compiled_s31/attention.txt.) Measured only where torch's vector ISA is AVX-512
    and the CPU has avx512_bf16 as this process may use it: on an AVX2 CPU, an AVX-512 CPU without bf16, or
    under an ISA cap below them, bf16 stays on ATen.

    float32 with full weights, one backend per package, chosen here: autotuning times each GEMM alone, hot in
    cache, and on a 2-core Ice Lake Xeon its pick changed from build to build (SmolLM2's 1-token package took
    oneDNN for 121 of its 211 GEMMs in one build, for none in the next, and the first ran its AR steps ~20%
    slower). Measured there, whole steps, one process per backend (session 56,
    results/compiled_s56/gemm_fp32.txt): under the AVX2 cap the templates were faster at every width (27.6 /
    44.8 / 83.3 ms for 1 / 8 / 32 tokens against oneDNN's 38.0 / 63.6 / 127.4); with AVX-512 they were faster
    for 1 token (28-30 ms against 39-51), about even from 2 to 8 tokens, and slower from 16 (73-89 / 129-131
    ms for 16 / 32 against 58-67 / 75-84). A build that times nothing is also shorter (SmolLM2's 1-token
    package: ~130 s under the cap), and no package depends on how busy the machine was while it was built.
    Graphs compiled in this process (``width`` None), int8 weights and CPUs without a vector ISA keep
    inductor's default.

    Every template timing above was taken before session 65's compiler front (:mod:`fastforward.core.cxx`),
    when the templates' 8-row float32 kernels stored their accumulators to the stack at every step of K (bf16's
    have the same form; not measured); the front halved SmolLM2's float32 8-token step (results/compiled_s65).
    Through it the float32 templates beat oneDNN at 16 and 32 tokens too, so float32 packages take them to 32
    tokens there (:func:`fp32_template_width`). The bfloat16 rule has not been measured again."""
    if int4:
        return "ATEN"
    if dtype == torch.float32:
        isa = torch.backends.cpu.get_cpu_capability()
        if quantized or width is None or isa not in ("AVX2", "AVX512"):
            return INDUCTOR_GEMMS  # int8 weights' products stay on ATen's _int_mm
        return "CPP" if width <= fp32_template_width() or isa == "AVX2" else "ATEN"
    if dtype != torch.bfloat16:
        return "ATEN"
    if amx_usable() if amx is None else amx:
        return "CPP"
    if width is not None and width <= SMALL_M and _avx512_bf16():
        return "CPP"
    return "ATEN"


def _avx512_bf16() -> bool:
    """Whether torch's vector ISA is AVX-512 and the CPU's avx512_bf16 is usable (no ONEDNN_MAX_CPU_ISA cap
    removes it): the kind of CPU the narrow-bucket rule of :func:`gemm_backends` was measured on."""
    from fastforward.hardware import cpu_flags

    return torch.backends.cpu.get_cpu_capability() == "AVX512" and "avx512_bf16" in cpu_flags()


INDUCTOR_GEMMS = "ATEN,TRITON,CPP"  # inductor's default max_autotune_gemm_backends
FP32_TEMPLATE_WIDTH = (
    8  # float32 packages up to this width run inductor's GEMM templates without the g++ front
)
SMALL_M = 4  # the widest bucket whose bf16 GEMMs go to inductor's templates on AVX-512 without AMX


def fp32_template_width() -> int:
    """The widest float32 package (fed tokens) that runs inductor's GEMM templates with AVX-512
    (:func:`gemm_backends`): :data:`FP32_TEMPLATE_WIDTH`, and through the g++ front (:mod:`fastforward.core.cxx`)
    every default bucket, up to 32.

    Why: session 56 found the templates slower than oneDNN's linear from 16 tokens with AVX-512 (Ice Lake),
    before the front, when their many-row kernels stored every accumulator to the stack at every step of K.
    Through the front, SmolLM2's float32 16- and 32-token packages on the templates ran 33-42 / 59-70 ms
    against oneDNN's 44-45 / 70-74, faster in 7 of 8 alternating rounds (2-core Zen 4 EPYC, session 65,
    results/compiled_s65/wide_ab.jsonl). The templates also add a row's products in one order whatever the
    other rows, so with them at every width every token of a chain or tree gets its 1-token step's bits
    (:func:`grouped_attention`). Without the front (clang, the user's own compiler) the measured rule stays;
    wider custom buckets (``--buckets``), unmeasured, keep oneDNN."""
    from fastforward.core import cxx

    return max(BUCKETS) if cxx.chosen() is not None else FP32_TEMPLATE_WIDTH


def amx_usable() -> bool:
    """Whether this process may run AMX bf16 tiles: the CPU reports them, no ISA cap removes them
    (:func:`fastforward.hardware.cpu_flags`), torch's vector ISA is AVX-512 (``ATEN_CPU_CAPABILITY`` not
    capped below it) and the kernel grants the tiles (torch's own check)."""
    from fastforward.hardware import cpu_flags

    flags = cpu_flags()
    if not {"amx_bf16", "amx_tile"} <= flags or torch.backends.cpu.get_cpu_capability() != "AVX512":
        return False
    check = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(check()) if callable(check) else False


def shares_weights(model: torch.nn.Module) -> bool:
    """Whether a CPU model builds packages whose buckets share one copy of the weights
    (:mod:`fastforward.core.aot`): a float32 model with full-precision weights, whose GEMMs then run as
    ATen's matmuls over plain tensors, and whose weights mostly stay in the CPU's last-level cache
    (:func:`weights_stay_cached` with :func:`fastforward.hardware.last_level_cache_bytes`). Not
    bfloat16/float16, whose GEMMs run over prepacked weights (oneDNN's, or the templates' on AMX:
    :func:`gemm_backends`), which cannot leave a package to be shared; not int8/int4 weights (``--weights``,
    the qsd draft), whose packages built for sharing lost inductor's fused weight-only kernels for ATen's
    int8 matmul (seen in the qsd draft's package, session 34)."""
    tensors = [t for t in model.state_dict().values() if isinstance(t, torch.Tensor)]
    if quantized(model) or any(t.dtype != torch.float32 for t in tensors if t.is_floating_point()):
        return False
    from fastforward.hardware import last_level_cache_bytes

    return weights_stay_cached(memory.weight_bytes(model), last_level_cache_bytes())


def weights_stay_cached(weights: int, cache: int | None) -> bool:
    """Whether a last-level cache of ``cache`` bytes holds at least half of ``weights`` bytes of weights
    (None, a cache of unknown size: assumed to), which is where sharing one copy between buckets pays.

    Why: sharing buys cache residency and costs kernels. On a 2-core AMX Xeon with a 480 MB L3, SmolLM2's
    0.54 GB of float32 weights largely stay cached between steps, and a step after another bucket's steps
    cost 60-130 ms against 31-34 while each bucket held its own copy (results/compiled_s34/switch.txt);
    shared, its 1-token step cost what the templates' did. On a 2-core AMD EPYC (AVX-512, no AMX) with a
    32 MB L3, every step streams the weights from memory whichever copy it reads, so sharing saves nothing
    there, and the shared packages' ATen (MKL) matmuls stream them at ~11 GB/s where inductor's templates
    over prepacked weights reach ~28: the 1-token step cost 48 ms shared against 19.2 ms with a copy per
    bucket, llama.cpp F32's 18.5-19.0 (session 44, results/compiled_s44/probe_noshare.txt)."""
    return cache is None or 2 * cache >= weights


def quantized(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds int8/int4 weights (``--weights``, a qsd copy): integer tensors in its state."""
    return _holds(model, (torch.int8, torch.uint8, torch.int32))


def int4_weights(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds int4 weights (``--weights int4``, an int4 qsd copy): their packed uint8 form."""
    return _holds(model, (torch.uint8,))


def _holds(model: torch.nn.Module, kinds: tuple[torch.dtype, ...]) -> bool:
    """Whether any tensor in ``model``'s state has one of the dtypes ``kinds``."""
    return any(isinstance(t, torch.Tensor) and t.dtype in kinds for t in model.state_dict().values())


def share_kv_heads(model: torch.nn.Module) -> bool:
    """Run ``model``'s attention through :func:`gqa_sdpa` when it uses transformers' SDPA (through the public
    ``AttentionInterface`` registry and ``set_attn_implementation``; nothing is patched). Returns whether it
    does: a model on another attention implementation keeps it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(GQA_SDPA, gqa_sdpa)
    AttentionMaskInterface.register(GQA_SDPA, sdpa_mask)  # masks made (or passed through) as for SDPA
    model.set_attn_implementation(GQA_SDPA)
    return model.config._attn_implementation == GQA_SDPA


class CompiledForward:
    """The target model's compiled forward and the fixed cache its graphs were traced over.

    ``mode`` is torch.compile's (``max-autotune`` picks inductor's GEMM templates, which is where the CPU
    speed comes from; ``reduce-overhead`` records one CUDA graph per bucket, which is what a GPU needs, since
    there a small model's step is kernel launches; ``None`` is the quick default used by tests on tiny
    models). Holding the cache is
    exclusive (:meth:`acquire`/:meth:`release`): one request at a time decodes through the graphs."""

    def __init__(
        self,
        model: torch.nn.Module,
        step: ModelCall,
        capacity: int = DEFAULT_CAPACITY,
        mode: str | None = "max-autotune",
        store: Path | None = None,
        widths: Sequence[int] | None = None,
    ):
        """``widths``: the width buckets that get graphs (a subset of :data:`BUCKETS`; a forward pads up to
        the next one and runs eagerly past the widest); None: all of them, or with a ``store`` and packages
        that hold their own weights, as many as fit in memory (:func:`buckets_that_fit`)."""
        import torch._dynamo
        import torch._inductor.config as inductor_config

        from fastforward.core import aot, cxx

        inductor_cache()  # a folder per ISA, under the CLI's root where it set one, else torch's default
        inductor_config.freezing = True  # weights become constants the kernels can be laid out for
        # no row's sum split across threads, as in the packages (aot.serial_row_chunk); process-wide, so the
        # largest any model here needs
        inductor_config.cpp.min_chunk_size = max(
            inductor_config.cpp.min_chunk_size, aot.serial_row_chunk(model)
        )
        # g++ told to keep the GEMM micro-kernels' accumulators in registers (core.cxx: 8-token steps ~2x
        # faster on a Zen 4 EPYC); process-wide, like the settings above
        cxx.install()
        self._dtype, self._int4 = next(model.parameters()).dtype, int4_weights(model)
        self._quantized = quantized(model)
        self.shared_weights = shares_weights(model)
        self.gemm = self.gemm_for(None)  # graphs compiled in this process serve any width
        # prepacked (mkldnn) weights cannot be shared between packages; the rewrite that makes them is
        # installed by inductor on a process's first compile, so it is off before any compile (_build)
        if self.shared_weights:
            inductor_config.cpp.weight_prepack = False
        # in-process CPU graphs (CUDA graphs tune no GEMMs)
        inductor_config.max_autotune_gemm_backends = self.gemm
        inductor_config.autotune_num_choices_displayed = 0  # no per-GEMM autotuning tables on stderr
        inductor_config.max_autotune_report_choices_stats = False
        # a graph per (bucket, hidden, tier) on one code object: room for all of them and a little more
        graphs = 2 * len(BUCKETS) * len(tiers(capacity)) + 4
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, graphs)
        self.model, self._step = model, step
        self.shared_kv_heads = share_kv_heads(model)  # before tracing: the graphs use it, eager forwards too
        self.capacity = capacity  # the largest tier
        self._caches: dict[int, FixedCache] = {}  # per tier, made on first use, kept for the next request
        self.cache = self._tier_cache(tiers(capacity)[0])
        self.used: set[int] = set()  # buckets that have run (compiled), for stats and startup reports
        self.failed: str | None = None  # why compiling failed (then every forward runs eagerly)
        self._seen: set[tuple[int, bool, int]] = set()
        self._lock = threading.Lock()
        self.mode = mode
        self.graphs = mode == "reduce-overhead"  # CUDA graphs per bucket
        self._fn: Callable[..., Any] = torch.compile(self._forward, dynamic=False, mode=mode)
        # AOTInductor packages on disk (CPU): built once per key, loaded by every later process
        self.store = None if store is None or self.graphs else Path(store)
        self._autotune = mode == "max-autotune"
        self._fingerprint: str | None = None
        # per key: its loaded package, or None when packaging it failed (that key then uses torch.compile)
        self._packages: dict[tuple[int, bool, int], Callable[..., Any] | None] = {}
        self.unloads = 0  # times loaded packages were dropped to make room for a build (_unload_for)
        self.startup: dict[str, dict[str, float]] = {}  # package name -> {"built_s"/"loaded_s": seconds}
        self._no_room: set[tuple[int, bool, int]] = set()  # keys whose package would not fit in memory
        self.widths = self._choose_widths(widths)

    def gemm_for(self, width: int | None, shared: bool = False) -> str:
        """The GEMM backends of a package for ``width`` fed tokens (None: any width): :func:`gemm_backends`;
        ATen's alone for a float32 build whose weights are ``shared`` between packages, the only GEMMs such a
        package can be loaded with (:meth:`_build`), so no build is spent on a template that would fail it."""
        if shared and self._dtype == torch.float32:
            return "ATEN"
        return gemm_backends(self._dtype, int4=self._int4, width=width, quantized=self._quantized)

    def _copies_weights(self) -> bool:
        """Whether each package this forward builds holds its own copy of the weights: a store's packages of
        any model but a float32 one with full-precision weights (:func:`shares_weights`): bf16/fp16 (oneDNN's
        or the templates' prepacked weights) and int8/int4 weights."""
        return self.store is not None and not self.shared_weights

    def _choose_widths(self, asked: Sequence[int] | None) -> tuple[int, ...]:
        """The width buckets that get graphs: those asked for, else every one whose package fits (said in one
        line when that is fewer than all)."""
        if asked is not None:
            return tuple(sorted(set(asked)))
        if not self._copies_weights():
            return BUCKETS
        size, free = memory.weight_bytes(self.model), memory.available_memory()
        fit = buckets_that_fit(size, free)
        if fit != BUCKETS:
            log(
                f"--compile: graphs for widths {','.join(map(str, fit))} of {','.join(map(str, BUCKETS))}: "
                f"each package holds its own ~{memory.PACKAGE_FACTOR * size / 1e9:.1f} GB copy of the weights and "
                f"{(free or 0) / 1e9:.1f} GB is free; a forward pads up to the next of them and runs eagerly "
                "past the widest (--buckets sets them)"
            )
        return fit

    def room_for(self, build: bool, width: int) -> tuple[float, float] | None:
        """(GB building, or else loading, the ``width`` package needs; GB free) when that would not fit in
        memory now, else None (always None for packages that share the weights, or where the free memory is
        unknown)."""
        if not self._copies_weights():
            return None
        return memory.shortfall(memory.weight_bytes(self.model), build, self._build_factor(width))

    def _build_factor(self, width: int) -> float:
        """The ``width`` package's build peak in weight bytes: :func:`fastforward.core.memory.build_factor` of
        this model's dtype, weights and that width's GEMM backends."""
        return memory.build_factor(self._dtype, self.gemm_for(width), self._quantized)

    def _refuse(self, key: tuple[int, bool, int]) -> None:
        """No memory for ``key``'s package: this forward runs eagerly, and its width leaves :attr:`widths`,
        so later forwards pad up to the next compiled width (or run eagerly past the widest) and the run's
        records list only the widths that ran compiled. Never retried in this process."""
        self._no_room.add(key)
        self.widths = tuple(w for w in self.widths if w != key[0])

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, hidden: bool) -> Any:
        out = self._step(self.model, ids, pos, mask, self.cache, hidden=hidden)
        return (out.logits, out.hidden_states[-1]) if hidden else (out.logits, None)

    def _tier_cache(self, size: int) -> FixedCache:
        if size not in self._caches:
            self._caches[size] = FixedCache(size)
        return self._caches[size]

    def acquire(self, need: int = 0, cache: FixedCache | None = None) -> FixedCache | None:
        """The smallest tier's cache that holds ``need`` slots, emptied, if no other request holds the
        compiled forward (else None: that request runs eagerly); the graphs then run over it. With ``cache``
        (a fixed cache of one of this forward's tiers, e.g. a layer view of the target's,
        :func:`fastforward.core.cache.first_layers`) the graphs run over that one instead, as it is."""
        size = tier(self.capacity, need) if cache is None else cache.capacity
        if size not in tiers(self.capacity) or not self._lock.acquire(blocking=False):
            return None
        if cache is not None:
            self.cache = cache
            return cache
        self.cache = self._tier_cache(size)
        self.cache.advance(0)
        return self.cache

    def release(self) -> None:
        if self._lock.locked():
            self._lock.release()

    def __call__(
        self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, hidden: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.failed is None:
            key = (int(ids.shape[1]), hidden, self.cache.capacity)
            if key not in self._seen and self.store is None:
                self._seen.add(key)
                log(
                    f"--compile: compiling the {key[0]}-token forward{' (with hidden states)' * hidden} over "
                    f"{key[2]} cache slots (first use)"
                )
            try:
                out = self._packaged(key, ids, pos, mask) if self.store is not None else None
                if key in self._no_room:  # no memory to build its package: this width runs eagerly
                    return self._forward(ids, pos, mask, hidden)
                logits, states = out if out is not None else self._fn(ids, pos, mask, hidden)
                self.used.add(int(ids.shape[1]))
                if self.graphs:  # a CUDA graph's outputs are overwritten by its next replay: keep copies
                    logits, states = logits.clone(), None if states is None else states.clone()
                return logits, states
            except Exception as e:  # noqa: BLE001 - any compiler failure: say it once, decode eagerly
                self.failed = _first_line(e)
                log(f"--compile: compiling failed ({self.failed}); decoding eagerly instead")
        return self._forward(ids, pos, mask, hidden)  # the same slots are written again: nothing is lost

    def _packaged(
        self, key: tuple[int, bool, int], ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """The forward through the key's AOTInductor package (:mod:`fastforward.core.aot`), or None when that
        key cannot be packaged: it then compiles in this process, as without a store."""
        from fastforward.core import aot

        if key not in self._packages:
            self._packages[key] = self._package(key, ids, pos, mask)
        run = self._packages[key]
        if run is None:
            return None
        outs = run(ids, pos, mask, self.cache.slots.where, *aot.cache_buffers(self.cache))
        return outs[0], (outs[1] if key[1] else None)

    def _package(
        self, key: tuple[int, bool, int], ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor
    ) -> Callable[..., Any] | None:
        """The key's package, loaded; built first when the store has none, and built again once when the
        one on disk does not load (a truncated or foreign file). None, said in one line, when exporting or
        compiling it fails: ``torch.export`` needs the forward as one graph, which ``torch.compile`` in
        process does not."""
        from fastforward.core import aot

        assert self.store is not None
        k, hidden, size = key
        what = f"the {k}-token forward{' (with hidden states)' * hidden} over {size} cache slots"
        example = (ids, pos, mask, self.cache.slots.where, *aot.cache_buffers(self.cache))
        times: dict[str, float] = {}
        try:
            fp = self._packages_fingerprint()
            aot.describe(self.store, fp, self.model)  # once: a no-op when the store has it
            path = self.store / fp / aot.package_name(k, hidden, size)
            aot.mark_used(path.parent)
            for attempt in range(2):
                short = self.room_for(not path.exists(), k)
                if short is not None and not path.exists() and self._unload_for(what, k):
                    short = self.room_for(True, k)
                if short is not None:
                    log(
                        f"--compile: {'building' if not path.exists() else 'loading'} {what} needs "
                        f"~{short[0]:.1f} GB and {short[1]:.1f} GB is free: width {k} runs eagerly instead "
                        "(--buckets sets fewer widths)"
                    )
                    self._refuse(key)
                    return None
                if not path.exists():
                    log(f"--compile: compiling {what} (first use; kept in {path.parent} for later runs)")
                    t0 = time.perf_counter()
                    self._build(example, hidden, path, what)
                    memory.return_freed_memory()  # a build's temporaries: ~4x the weights, freed
                    times["built_s"] = round(time.perf_counter() - t0, 2)
                    self._trim_store()
                t0 = time.perf_counter()
                try:
                    run = aot.load(path)
                except Exception as e:  # noqa: BLE001 - a package that does not load is rebuilt once
                    if attempt:
                        raise
                    log(f"--compile: {path} does not load ({_first_line(e)}); building it again")
                    path.unlink(missing_ok=True)
                    continue
                times["loaded_s"] = round(time.perf_counter() - t0, 2)
                log(f"--compile: {what} loaded from {path.parent} in {times['loaded_s']:.1f} s")
                self.startup[path.stem] = {
                    **self.startup.get(path.stem, {}),
                    **times,
                }  # a reload keeps built_s
                return run
        except Exception as e:  # noqa: BLE001 - any export/compile/load failure: say it once, go on
            log(
                f"--compile: packaging {what} failed ({_first_line(e)}); compiling it in this process instead"
            )
        return None

    def _unload_for(self, what: str, width: int) -> bool:
        """Drop the packages this forward has loaded so that building ``what`` may fit, said in one line; they
        load again from disk on their next use (seconds). True when any was dropped: only where that makes room
        for the build and for all of them loaded again beside it (:func:`fastforward.core.memory.unloading_helps`);
        :func:`fastforward.core.engine.warm_buckets` then loads them again before anything is timed.

        Why: a package that holds its own copy of the weights needs several times them to build, and the
        ones already loaded hold their copies. On a 23 GiB machine the 1.5B's bf16 8-token build (~11 GB above
        the process) did not fit beside its loaded 1-token package and ran eagerly at 6-9x the 1-token step's
        time, while built first it fits, and loading both afterwards takes 7.4 GB (session 59)."""
        loaded = [key for key, run in self._packages.items() if run is not None]
        memory.return_freed_memory()
        if not memory.unloading_helps(
            memory.weight_bytes(self.model),
            memory.available_memory(),
            len(loaded),
            self._build_factor(width),
        ):
            return False
        for key in loaded:
            del self._packages[key]
        memory.return_freed_memory()
        self.unloads += 1
        log(
            f"--compile: unloaded {len(loaded)} package(s) to make room to build {what}; they load again from "
            "disk on their next use"
        )
        return True

    def _trim_store(self) -> None:
        """After a build, keep the store within its bound (:func:`fastforward.core.aot.trim`), said in one
        line when anything went. A failure to trim is said and never stops decoding."""
        from fastforward.core import aot

        assert self.store is not None
        try:
            gone, limit = aot.trim(self.store)
        except (OSError, ValueError) as e:
            log(f"--compile: the store {self.store} was not trimmed ({_first_line(e)})")
            return
        if gone:
            size = sum(n for _, n in gone) / 1e9
            log(
                f"--compile: removed {len(gone)} least recently used package folder(s), {size:.1f} GB, to keep "
                f"{self.store} within {limit / 1e9:.1f} GB ({memory.STORE_GB_ENV} sets the bound)"
            )

    def _build(self, example: tuple[torch.Tensor, ...], hidden: bool, path: Path, what: str) -> None:
        """Build one package (:func:`fastforward.core.aot.build`), its weights shared with the other buckets'
        where this model's are (:func:`shares_weights`). A shared build that fails (this process compiled
        something with oneDNN weight prepacking before: inductor installs that rewrite once per process, and
        prepacked weights cannot be shared) is built again with its own copy of the weights, said in one
        line: slower when widths switch, same tokens.

        The GEMM backends are the width's (:meth:`gemm_for`). A shared build's GEMMs end up as ATen's over the
        plain weights (float32 models, whose default backends include ATen): the templates split one layer's
        laid-out weight into several constants (its q, k and v parts) that carry the same weight name, and
        AOTInductor's on-disk weight format keys weights by that name, so it keeps one of them and the package
        cannot be loaded (torch 2.13).

        A build on inductor's GEMM templates alone (float32 up to 8 tokens, bf16 on AMX) that fails is built
        again with inductor's default backends, said in one line: the templates do not take every shape and
        dtype a model may have, and without ATen among the backends such a GEMM has no kernel at all."""
        from fastforward.core import aot

        width = int(example[0].shape[-1])
        args = (self.model, self._step, example, hidden, path, self._autotune)
        if self.shared_weights:
            try:
                aot.build(*args, self.gemm_for(width, shared=True), shared=True)
                return
            except Exception as e:  # noqa: BLE001 - any failure of the shared form: the plain one may work
                log(
                    f"--compile: {what} could not keep its weights apart to share them ({_first_line(e)}); "
                    "building it with its own copy"
                )
        gemm = self.gemm_for(width)
        try:
            aot.build(*args, gemm)
        except Exception as e:
            if not self._autotune or "ATEN" in gemm.split(","):
                raise
            log(
                f"--compile: {what} could not be built on the {gemm} GEMMs alone ({_first_line(e)}); "
                f"building it with inductor's choice among {INDUCTOR_GEMMS}"
            )
            aot.build(*args, INDUCTOR_GEMMS)

    def identity(self) -> str:
        """What a cost measured through these graphs is filed under: ``compiled-`` and the packages'
        fingerprint on a CPU store (a new model, weights, code or CPU gives new graphs, so new costs), else the
        kind of graphs (CUDA graphs, or torch.compile in this process); with fewer widths than
        :data:`BUCKETS`, ``-w`` and those widths (a 2-token step padded to 8 costs the 8-token step's)."""
        subset = "" if self.widths == BUCKETS else "-w" + ",".join(map(str, self.widths))
        if self.store is None:
            return "compiled-" + ("cudagraphs" if self.graphs else "inprocess") + subset
        return f"compiled-{self._packages_fingerprint()}{subset}"

    def _packages_fingerprint(self) -> str:
        """The key of this model's packages in the store (:func:`fastforward.core.aot.fingerprint`), hashed
        once per process."""
        from fastforward.core import aot

        if self._fingerprint is None:
            self._fingerprint = aot.fingerprint(
                self.model, self.shared_kv_heads, self._autotune, self.shared_weights
            )
        return self._fingerprint

    def eager(
        self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, hidden: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The same forward without compiling (a step wider than every bucket)."""
        return self._forward(ids, pos, mask, hidden)

    def prefill(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, hidden: bool = False) -> Any:
        """The prompt, eagerly, into the fixed cache: the model output with the last position's logits
        (and every position's hidden states when asked), as :func:`fastforward.core.engine.prefill` gives."""
        return self._step(self.model, ids, pos, mask, self.cache, hidden=hidden, keep=1)


def _first_line(e: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return f"{type(e).__name__}: {first[:160]}"


def compiled(model: torch.nn.Module) -> CompiledForward | None:
    """The model's compiled forward, if :func:`fastforward.core.engine.compile_forward` gave it one."""
    return getattr(model, "fastforward_compiled", None)
