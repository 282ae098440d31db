"""Speculative decoding: a draft proposes, the target verifies in one forward, one loop commits.

``build(name, target, draft, options)`` maps the registry's method names to a drafter and an acceptance
rule (:mod:`fastforward.core.acceptance`, the one layer every method verifies through):

| method | drafter | rule |
|---|---|---|
| sd | draft model (same tokenizer) | exact: greedy equality, or rejection sampling when sampling |
| sd-sample | draft model | rejection sampling (refuses temperature 0) |
| sd-cross | draft model with another tokenizer (text re-tokenized both ways) | exact greedy |
| pld | prompt lookup n-grams | exact |
| layerskip | the target's first ``layers`` layers, drafting on the target's own cache at batch 1 | exact |
| qsd | the target quantized to ``bits`` (int8 / int4, weight-only; ``models.quantize``) | exact |
| typical | draft model | typical acceptance (LOSSY) |
| consultant | draft model | Consultant Decoding EMA-NLL rule (LOSSY) |

Options (``--opt key=value``, :class:`SpecOptions`): every speculative method accepts the whole set, so
one unscoped ``--opt gamma=3`` can serve several of them in a bench; each uses its own.

``gamma_auto`` is on by default for the lossless methods (``gamma`` is then the first draft length;
typical and consultant keep a fixed gamma, since what they accept depends on it and the output would then
follow measured times): each step's draft length, 0 included (a plain AR step), comes from measured draft
and verify costs and acceptance, kept across the decoder's requests, so a draft that does not pay on this
machine (a layerskip or qsd draft where a k-token verify costs several
1-token forwards, as bf16 does on an AVX2-only CPU) switches itself off instead of running below AR, and is
probed again in short bursts after a back-off that doubles while it keeps losing (so it returns when the text
starts paying: ``CostTracker``).
``gamma_auto=false`` gives the fixed schedule; ``adaptive=true`` the +1/-1 one. Batched steps and seeded
sampling use the fixed ``gamma`` (a schedule from measured times would not reproduce a seed).

``draft_bits=4|8`` (sd, sd-sample, typical, consultant, sd-cross): the draft model is replaced by its
weight-only quantized copy (as qsd does to the target), with its restricted head (``vocab``) quantized too.

``lookup_first`` (every model drafter; on by default for the lossless ones): prompt lookup drafts where a
suffix n-gram of 2..``ngram_max`` tokens recurs in prompt + output, the model only elsewhere
(:class:`LookupFirstDrafter`); on a CPU, where the draft is half of each step, repeated text then costs a
verify forward alone (:func:`lookup_first` has the measurements). Under ``gamma_auto`` the lookup and the
model keep a schedule each (:func:`~fastforward.decoders.speculative.engine.observe_sources`), so a model draft
that does not pay here leaves the lookup running.

``vocab=K`` (sd, sd-sample, typical, consultant, layerskip, qsd, sd-cross): the draft's LM head scores only the K most
frequent tokens (:mod:`fastforward.core.vocab`); the target verifies over the whole vocabulary, so exact
methods stay exact. The restricted head follows the draft's kernels: quantized like the rest of a qsd copy,
prepacked when the target was loaded with ``--path prepacked``. A qsd copy and a layerskip view, which the decoder
owns, take it as their own LM head (:func:`~fastforward.decoders.speculative.drafters.head_inside`), so they still
draft through compiled graphs and on the target's cache; a draft model (sd and the rest) keeps it beside the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fastforward.core.acceptance import CONSULTANT_EPS, TYPICAL_EPS, rule_for
from fastforward.core.decoder import require_draft
from fastforward.core.engine import compile_draft
from fastforward.core.options import build_config, opt
from fastforward.core.vocab import RestrictedHead, head_weight
from fastforward.data.vocab_corpus import subset_for
from fastforward.decoders.ngram import check_ngram_range
from fastforward.decoders.speculative.drafters import (
    CrossTokenizerDrafter,
    LookupFirstDrafter,
    ModelDrafter,
    PromptLookupDrafter,
    head_inside,
    shallow_view,
)
from fastforward.decoders.speculative.engine import SpecConfig, SpeculativeDecoder
from fastforward.decoders.speculative_checks import check_same_tokenizer
from fastforward.errors import FastForwardError
from fastforward.log import log
from fastforward.models.kernels import PackedLinear, path_of
from fastforward.models.loading import load_model
from fastforward.models.quantize import INT4_GROUP_SIZES, quantize_linear, quantized_copy
from fastforward.models.weights import VNNI_NEEDED, vnni_here

DRAFT_MODEL_METHODS = ("sd", "sd-sample", "typical", "consultant")
DRAFT_MODEL = (*DRAFT_MODEL_METHODS, "sd-cross")  # the methods that load --draft
MODEL_DRAFTERS = (*DRAFT_MODEL, "layerskip", "qsd")  # the methods whose drafter is a model
# lossy rules: their output depends on the draft length, so by default it stays fixed (reproducible)
LOSSY = ("typical", "consultant")


@dataclass(frozen=True)
class SpecOptions:
    gamma: int = opt(5, min=1, help="draft tokens proposed per step")
    adaptive: bool = opt(False, help="adapt gamma: +1 after a fully accepted draft, -1 after a rejection")
    gamma_max: int | None = opt(
        None, min=1, help="upper bound of an adaptive or cost-chosen gamma", shown="max(12, gamma)"
    )
    gamma_auto: bool | None = opt(
        None,
        help="choose each step's gamma from measured draft and verify costs and the acceptance rate (kept across the decoder's requests; the draft length with the most expected tokens per second; 0, a plain AR step, where no draft pays, probed again in bursts after a doubling back-off); default on for the lossless methods unless adaptive is set, off for typical/consultant; fixed gamma with a seed and in batches",
    )
    ngram_max: int = opt(
        3,
        min=1,
        help="longest suffix n-gram looked up in the prompt and output",
        used_by=("pld", *MODEL_DRAFTERS),
    )
    ngram_min: int = opt(
        1,
        min=1,
        help="shortest suffix n-gram looked up (with lookup_first: at least 2)",
        used_by=("pld", *MODEL_DRAFTERS),
    )
    by_match: bool = opt(
        True,
        help="with gamma_auto, one acceptance estimate per matched n-gram length (a 1-token match is right far less often than a 3-token one, so each step's draft length follows its match); off: one estimate for every step",
        used_by=("pld",),
    )
    layers: int | None = opt(
        None,
        min=1,
        help="target layers the draft runs",
        shown="half the target's layers",
        used_by=("layerskip",),
    )
    bits: int = opt(
        8,
        choices=(4, 8),
        help="weight bits of the quantized draft: 8 (int8 per channel) or 4 (int4 per group)",
        used_by=("qsd",),
    )
    draft_bits: int = opt(
        0,
        choices=(0, 4, 8),
        help="quantize the draft model weight-only: 8 (int8 per channel), 4 (int4 per group), 0 = as loaded",
        used_by=DRAFT_MODEL,
    )
    act8: bool = opt(
        False,
        help="an int8 draft (bits=8 / draft_bits=8) also rounds each token's activations to int8: W8A8 through "
        "torch's int8 GEMM, the fast int8 path on a CPU without bf16 instructions (only the guesses change); "
        "needs VNNI",
        used_by=("qsd", *DRAFT_MODEL),
    )
    group_size: int = opt(
        128,
        choices=INT4_GROUP_SIZES,
        help="int4 draft: input features per scale (bits=4 / draft_bits=4 only)",
        used_by=("qsd", *DRAFT_MODEL),
    )
    draft_stop: float = opt(
        0.0,
        min=0.0,
        max=1.0,
        help="end a draft chain after a token the draft gives probability below this (0 = never)",
        used_by=MODEL_DRAFTERS,
    )
    eps: float | None = opt(
        None,
        help_by={
            "typical": "cap of the typical acceptance threshold",
            "consultant": "bound on the EMA of the target's NLL of draft tokens",
        },
        shown_by={"typical": f"{TYPICAL_EPS}", "consultant": f"{CONSULTANT_EPS}"},
        used_by=("typical", "consultant"),
    )
    beta: float = opt(
        0.2,
        min=0.0,
        max=1.0,
        help="weight of the newest token in the EMA of the NLL",
        used_by=("consultant",),
    )
    alpha: float = opt(
        0.3, min=0.0, help="entropy factor of the typical acceptance threshold", used_by=("typical",)
    )
    vocab: int = opt(
        0,
        min=0,
        help="draft LM head over the K most frequent tokens (0 = whole vocabulary; exactness is kept)",
        used_by=MODEL_DRAFTERS,
    )
    lookup_first: bool | None = opt(
        None,
        help="draft by prompt lookup where a suffix n-gram (n >= 2) recurs, by the draft model only elsewhere (saves the draft's cost on repeated text; exactness is kept); default on for the lossless methods (with ngram_max >= 2), off for typical/consultant",
        shown="on (lossless methods)",
        used_by=MODEL_DRAFTERS,
    )

    def validate(self) -> None:
        check_ngram_range(self.ngram_min, self.ngram_max)
        if self.act8 and 4 in (self.bits, self.draft_bits):
            raise FastForwardError(
                "act8 rounds an int8 draft's activations: it needs bits=8 / draft_bits=8, not 4"
            )
        # without VNNI torch's int8 GEMM saturates: a damaged draft, which the lossy rules' output follows
        if self.act8 and not vnni_here():
            raise FastForwardError(f"act8 {VNNI_NEEDED}; leave out act8")


def build(name: str, target, draft, options: dict) -> SpeculativeDecoder:
    o = build_config(SpecOptions, options, name)
    spec = SpecConfig(
        gamma=o.gamma,
        adaptive=o.adaptive,
        gamma_auto=o.gamma_auto if o.gamma_auto is not None else not o.adaptive and name not in LOSSY,
        gamma_max=o.gamma_max if o.gamma_max is not None else max(12, o.gamma),
        require_sampling=name == "sd-sample",
    )  # validated by SpeculativeDecoder
    if name in DRAFT_MODEL_METHODS:
        require_draft(name, draft)
        check_same_tokenizer(target, draft)
        model, head = draft_model(draft, o)
        drafter = ModelDrafter(model, o.draft_stop, head)
    elif name == "sd-cross":
        require_draft(name, draft)
        model, head = draft_model(draft, o)
        drafter = CrossTokenizerDrafter(model, draft.tokenizer, target.tokenizer, o.draft_stop, head)
    elif name == "pld":
        drafter = PromptLookupDrafter(o.ngram_max, o.ngram_min, o.by_match)
    elif name == "layerskip":
        n_layers = len(target.model.model.layers) if hasattr(target.model, "model") else 2
        view = shallow_view(target.model, o.layers or n_layers // 2)
        head = draft_head(target, o)
        subset = None if head is None else head_inside(view, head)  # the view's head, not the target's
        drafter = ModelDrafter(view, o.draft_stop, shared_layers=len(view.model.layers), subset=subset)
    elif name == "qsd":
        source = qsd_source(target)
        head = draft_head(target, o, bits=o.bits, float_model=source)  # before the copy frees the float rows
        qcopy = quantized_copy(source, o.bits, o.group_size, activations=o.act8)
        subset = None if head is None else head_inside(qcopy, head)
        drafter = ModelDrafter(
            qcopy, o.draft_stop, shared_layers=qsd_shared_layers(qcopy, source, target), subset=subset
        )
    else:
        raise FastForwardError(f"unknown speculative method '{name}'")
    if lookup_first(name, o):
        # a 1-token match is too weak a guess to stand in for the draft model's chain
        drafter = LookupFirstDrafter(PromptLookupDrafter(o.ngram_max, max(o.ngram_min, 2)), drafter)
    for model in draft_models(drafter):  # --compile on: the draft steps through compiled graphs too
        compile_draft(model, target.model)
    rule = rule_for(name if name in LOSSY else "exact", o.eps, o.alpha, o.beta)
    return SpeculativeDecoder(
        target.model, drafter, rule, spec, name, needs_draft=name in (*DRAFT_MODEL_METHODS, "sd-cross")
    )


def lookup_first(name: str, o: SpecOptions) -> bool:
    """Whether ``name``'s model drafter gives way to prompt lookup where the text repeats itself.

    On by default for the lossless methods: a lookup chain costs no draft forward, and measured on SmolLM2
    fp32 (2-core AMD EPYC, AVX-512, 8 prompts a dataset, one run each) qsd went from 1.53x / 1.33x / 1.36x of
    compiled AR to 1.87x / 1.44x / 1.46x on MT-bench / GSM8K / HumanEval with it (session 45); sd with the
    1.5B target and its int4 0.5B draft went from 1.33x to 1.55x of AR on MT-bench (session 13). Off for typical and consultant, whose output depends on what is
    drafted, and when ``ngram_max`` < 2 leaves no n-gram long enough to stand in for the draft (an explicit
    ``lookup_first=true`` then is an error, not a silent no-op)."""
    if name == "pld":
        return False
    if o.lookup_first is None:
        return name not in LOSSY and o.ngram_max >= 2
    if o.lookup_first and o.ngram_max < 2:
        raise FastForwardError(
            "lookup_first needs ngram_max >= 2 (a 1-token match does not replace the draft)"
        )
    return o.lookup_first


def draft_models(drafter) -> list[torch.nn.Module]:
    """The draft models a drafter runs whole, the ones worth compiling (its ``models()``; none for prompt
    lookup, which has none, and for a decoder that is not a drafter)."""
    models = getattr(drafter, "models", None)
    return models() if callable(models) else []


def draft_model(draft, o: SpecOptions) -> tuple[torch.nn.Module, RestrictedHead | None]:
    """(draft model, its reduced-vocabulary head or None): the draft as loaded, or with ``draft_bits`` its
    weight-only int8/int4 copy. On a CPU a 0.5B draft in bf16 still reads ~1 GB of weights per token, a
    large share of a memory-bound step; int4 reads a quarter of that. Only the draft's guesses change,
    never an output (verification is the target's)."""
    if not o.draft_bits:
        if o.act8:
            raise FastForwardError("act8 rounds an int8 draft's activations: add draft_bits=8")
        return draft.model, draft_head(draft, o)
    source = qsd_source(draft)
    head = draft_head(draft, o, bits=o.draft_bits, float_model=source)
    return quantized_copy(source, o.draft_bits, o.group_size, activations=o.act8), head


def qsd_shared_layers(qcopy: torch.nn.Module, source: torch.nn.Module, target) -> int:
    """How many of the target's cache layers a qsd copy drafts on (:class:`ModelDrafter` ``shared_layers``):
    all of them when the copy is quantized from the target itself, whose embeddings and norms it shares, so
    its keys and values have the target's dtype and shapes; 0 (a cache of its own) for a bf16 reload.

    Why: on a cache of its own, the copy prefilled every prompt and caught up on every token the target
    committed while gamma_auto kept it off. On the 2-core AMX Xeon (SmolLM2 fp32, compiled, HumanEval), the
    first drafted step of each request cost ~430 ms against ~26 ms for an AR step: 1.2 s of an 8.3 s run,
    and qsd ran at 0.93x of AR although its warm drafted steps paid (results/compiled_s35). On the target's
    cache the copy feeds only the anchor and its own guesses; the target's keys for the committed tokens
    differ from the copy's own by its quantization error, which can change a guess, never an output
    (verification is the target's, and the target's next forward writes over the guesses' entries)."""
    if source is not target.model:
        return 0
    decoder = qcopy.get_decoder() if hasattr(qcopy, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    return len(layers) if layers is not None else 0


def qsd_source(target) -> torch.nn.Module:
    """The float model a qsd copy is quantized from: the target itself, or, when a kernel path (prepacked)
    released its Linear weights, the same checkpoint reloaded in bf16 (the qsd layers compute in bf16
    anyway). The reload's Linear weights are freed once quantized; its embeddings and norms stay as the
    draft's (a bf16 draft beside an fp32 target: drafting is exact-agnostic, verification is the target's)."""
    if path_of(target.model) == "default":
        return target.model
    log(f"{target.name} runs {path_of(target.model)}; reloading its weights in bf16 to quantize them")
    return load_model(str(target.path), "bfloat16").model


def draft_head(
    source, o: SpecOptions, bits: int | None = None, float_model: torch.nn.Module | None = None
) -> RestrictedHead | None:
    """The reduced-vocabulary head for ``vocab=K`` from ``source``'s LM head (None when K is 0 or covers the
    vocabulary): quantized to ``bits`` for a quantized draft (its rows taken from ``float_model``, the float
    model the copy is quantized from, since a prepacked ``source`` no longer holds them), prepacked when
    ``source`` runs prepacked."""
    if o.vocab == 0:
        return None
    weight, bias = head_weight(float_model if float_model is not None else source.model)
    subset = subset_for(source.tokenizer, o.vocab, weight.shape[0], source.eos_token_ids)
    if subset is None:
        return None
    head = RestrictedHead(weight, bias, subset)
    if bits is not None:
        head.linear = quantize_linear(head.linear, bits, o.group_size)
    elif path_of(source.model) == "prepacked":
        head.linear = PackedLinear(head.linear)
    return head.eval()


OPTIONS = SpecOptions
