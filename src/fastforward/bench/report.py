"""Markdown tables from benchmark JSON (the same JSON the CLI writes).

Two facts sit side by side and must not be confused: whether a method is *lossless* (tested token for token
against greedy AR in float32 on real prompts) and how often it *agreed* with AR in this run's dtype. In bf16
a lossless method can disagree with AR, for a reason that is no bug: it scores several tokens in one
forward, a batched shape changes the rounding of bf16 matmuls, and where the two best logits are (nearly)
tied the argmax flips and the two answers go separate, equally likely ways. The table says so in a footnote,
so "lossless: yes" next to "same tokens as AR: 40%" does not read as a contradiction.
"""

from __future__ import annotations

from typing import Any

BF16_NOTE = (
    "Same tokens as AR: share of generations equal to greedy AR token for token, in this run's {dtype}. "
    "Lossless methods are exact in float32 (the tests compare them with AR token for token on real prompts); "
    "in {dtype} they may differ because they score several tokens per forward, and a batched shape rounds "
    "{dtype} matmuls differently: most divergences are near-ties of the top-1 and top-2 logits that flip, after "
    "which both answers are equally likely but different. Rerun with --dtype float32 to check exactness."
)
FP32_NOTE = (
    "Same tokens as AR: share of generations equal to greedy AR token for token. In float32 a lossless method "
    "must reach 100%; less is a bug."
)

QUANT_NOTE = (
    "Same tokens as AR: share of generations equal to the {weights} model's own greedy AR token for token. "
    "Not an exactness check: torch's fast {weights} CPU kernels take bfloat16 activations, so every linear "
    "layer rounds its input to bfloat16; a k-token forward's attention differs from a 1-token one's in the "
    "last float32 bits, that rounding can turn it into a visible difference, and near-tied logits flip, as in "
    "a bfloat16 run. Lossless methods are exact in float32 with --weights full."
)

W8A8_NOTE = (
    "Same tokens as AR: share of generations equal to the w8a8 model's own greedy AR token for token. Its "
    "integer products are exact, it rounds each token's activations on their own, and its attention runs row "
    "by row, so a token's logits have the same bits in a 1-token and a k-token forward: a lossless method must "
    "reach 100% in float32; less is a bug."
)

MOSTLY_AR = 0.5  # a method with at least this share of its tokens from plain AR steps gets the mark
AR_LIKE = ("ar", "ar_eager", "hf_generate", "llamacpp")
MOSTLY_AR_NOTE = (
    "† most tokens from plain AR steps ({which}): on this machine and text the method's wide step did not pay "
    "(the step gate of jacobi/lookahead, gamma_auto of the speculative methods) or its drafter found nothing "
    "to propose, so it ran the target one token at a time for most of its text; that part's speed is AR's, not "
    "the method's."
)

NOISE_NOTE = (
    "Noise floor: {row}, the same AR timed again in the same turns, read {speedup:.2f}x; a speedup in "
    "{lo:.2f}-{hi:.2f}x cannot be told from AR in this run (inside it: {inside})."
)

WIDTHS_NOTE = (
    "Compiled graphs for {widths} fed tokens: a forward pads up to the next of them, and one of more than "
    "{widest} runs eagerly{wide}."
)


def widths_note(result: dict[str, Any]) -> str | None:
    """The line that says which forward widths ran compiled (``compiled_widths`` of a compiled run), None for an
    eager one. Why in the table: a width whose package did not fit in memory runs eagerly, at several times
    the compiled step's cost, and every method's wide steps then pay it; the 1.5B pair's first bench on a 23
    GiB machine ran with the 1-token graph alone and read every method at 0.71-0.86x of AR, with nothing in
    the table to say why (session 60)."""
    widths = result.get("compiled_widths")
    if result.get("engine") != "compiled" or not widths:
        return None
    wide = " (every wider step of a method ran eagerly)" if max(widths) == 1 else ""
    return WIDTHS_NOTE.format(widths=", ".join(map(str, widths)), widest=max(widths), wide=wide)


def ar_like(name: str) -> bool:
    """A reference row that runs one token per forward by construction: AR, eager AR, ``generate()``,
    llama.cpp, and a second row of any of them under a ``:tag`` (``ar:twin``, the run's own noise floor)."""
    return name.split(":", 1)[0] in AR_LIKE


def noise_floor(methods: dict[str, Any]) -> dict[str, Any] | None:
    """How far a row that runs exactly AR read from 1.00x in this run: ``ar:twin`` (else the first tagged AR
    row), its speedup, and the band ``[1 - d, 1 + d]`` where ``d`` is its furthest distance from
    1.00x (its speedup or either end of its 90% interval over turns); None without such a row.

    Why: on these hosts an identical AR row timed in the same turns read 0.965-1.026x over five runs
    (session 58), so a method inside that band cannot be told from AR in this run, whichever way it leans."""
    tagged = [n for n in methods if n.split(":", 1)[0] == "ar" and ":" in n]
    if not tagged:
        return None
    name = "ar:twin" if "ar:twin" in tagged else tagged[0]  # --noise-floor's own row where there is one
    m = methods[name]
    ends = [m["speedup_vs_ar"], *(m.get("speedup_interval_90") or [])]
    d = round(max(abs(x - 1.0) for x in ends), 3)
    return {"row": name, "speedup": m["speedup_vs_ar"], "band": [round(1 - d, 3), round(1 + d, 3)]}


def within_noise(methods: dict[str, Any], floor: dict[str, Any]) -> list[str]:
    """The rows (neither AR-like nor the floor's own) whose speedup lies inside the noise floor's band."""
    lo, hi = floor["band"]
    return [n for n, m in methods.items() if not ar_like(n) and lo <= m["speedup_vs_ar"] <= hi]


def parallel_cell(m: dict[str, Any], name: str) -> str:
    """The "parallel steps" cell: share of decode forwards that fed guesses ("-" for AR-like rows and for
    results written before steps were split)."""
    share = m.get("ar_step_share")
    if ar_like(name) or share is None:
        return "-"
    return f"{1 - share:.0%}"


def speedup_cell(m: dict[str, Any]) -> str:
    """The speedup, with its 90% interval over the turns where the result has one (runs since session 48)."""
    interval = m.get("speedup_interval_90")
    cell = f"{m['speedup_vs_ar']:.2f}x"
    return cell if not interval else f"{cell} ({interval[0]:.2f}-{interval[1]:.2f})"


def ar_token_share(m: dict[str, Any]) -> float | None:
    """The share of a method's new tokens that came from plain AR steps (one token each): ``ar_steps`` over
    ``new_tokens``; the share of its forwards (``ar_step_share``) for results without both.

    Why tokens, not forwards: a parallel step yields several tokens, so a method can run more AR forwards
    than wide ones and still get most of its text, and its speed, from the wide ones (session 59: the 1.5B's
    pld ran 56% AR forwards at 1.86x of AR, 19% of its tokens from them)."""
    steps, tokens = m.get("ar_steps"), m.get("new_tokens")
    if steps is not None and tokens:
        return min(1.0, steps / tokens)
    return m.get("ar_step_share")


def mostly_ar(m: dict[str, Any], name: str) -> bool:
    share = ar_token_share(m)
    return not ar_like(name) and share is not None and share >= MOSTLY_AR


def _fmt(x: Any, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def _lossless(value: bool | None, name: str, quantized: bool = False, exact: bool = False) -> str:
    if name == "ar":
        return "reference"
    if name.split(":", 1)[0] == "ar":  # ``ar:twin``: the same AR under a tag
        return "reference (a second AR row)"
    if name == "ar_eager":
        return "reference (eager)"
    yes = "yes with full weights (bf16-class here)" if quantized else "yes (exact in fp32 tests)"
    if exact:  # W8A8 in float32: exact against its own AR (W8A8_NOTE)
        yes = "yes (exact vs its own AR)"
    return {True: yes, False: "**no (lossy)**", None: "-"}[value]


def markdown_table(result: dict[str, Any]) -> str:
    dtype = result["dtype"]
    weights = result.get("weights", "full")
    quantized = "" if weights == "full" else f", {weights} weights"
    # W8A8 is exact against its own AR eagerly, and compiled where its packages keep each row's sums on one
    # thread (``serial_rows``, session 53; before, the 1.5B's 4- and 8-token graphs were not): else as int8
    exact = (
        weights == "w8a8"
        and dtype == "float32"
        and (result.get("engine") != "compiled" or bool(result.get("serial_rows")))
    )
    lines = [
        f"**{result['model']}**, {dtype}/{result.get('path', 'default')}{quantized}, {result['dataset']}, max_new_tokens {result['max_new_tokens']} "
        f"— {result['hardware']}",
        "",
        f"| method | tokens/s | speedup vs AR (90% interval over turns) | mean accepted tokens/forward | parallel steps "
        f"| same tokens as AR ({dtype}{quantized}) | samples | lossless |",
        "|---|---:|---:|---:|---:|---:|---:|:--:|",
    ]
    marked = []
    for name, m in result["methods"].items():
        same = _fmt(m["identical_to_ar"], ".0%") if m["identical_to_ar"] is not None else "n/a (sampling)"
        label = f"{name} → {m['auto_choice']}" if m.get("auto_choice") else name
        if mostly_ar(m, name):
            label += " †"
            marked.append(f"{name} {ar_token_share(m):.0%} of tokens")
        lines.append(
            f"| {label} | {m['tokens_per_s']:.1f} | {speedup_cell(m)} | {_fmt(m['mean_accepted_tokens'], '.2f')} "
            f"| {parallel_cell(m, name)} | {same} | {m['samples']} | {_lossless(m.get('lossless'), name, weights != 'full', exact)} |"
        )
    if marked:
        lines += ["", MOSTLY_AR_NOTE.format(which=", ".join(marked))]
    floor = noise_floor(result["methods"])
    if floor is not None:
        inside = within_noise(result["methods"], floor)
        lines += ["", NOISE_NOTE.format(
            row=floor["row"], speedup=floor["speedup"], lo=floor["band"][0], hi=floor["band"][1],
            inside=", ".join(inside) if inside else "none",
        )]  # fmt: skip
    widths = widths_note(result)
    if widths is not None:
        lines += ["", widths]
    if "ar_vs_hf_generate" in result:
        lines += ["", f"AR baseline / transformers generate(): {result['ar_vs_hf_generate']:.2f}x"]
    sampled = all(m["identical_to_ar"] is None for m in result["methods"].values())
    if not sampled:
        note = FP32_NOTE if dtype == "float32" else BF16_NOTE.format(dtype=dtype)
        if weights != "full":
            note = W8A8_NOTE if exact else QUANT_NOTE.format(weights=weights)
        lines += ["", note]
    return "\n".join(lines)
