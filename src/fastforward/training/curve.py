"""The CLLM learning curve: Jacobi tokens per forward against training tokens.

``train-cllm --snapshot-every N`` leaves loadable bf16 model directories under ``OUT/snapshots/step-N``.
Here the base model, each snapshot and the final model decode the same held-out prompts with the greedy
Jacobi decoder, and we count mean accepted tokens per target forward (prefill counted, Spec-Bench
convention), fast-forwarded tokens per iteration and the repetition rate of the outputs. These are counts,
not timings, so the curve can be measured on a busy machine; speed is ``eval-cllm``'s job.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fastforward.errors import FastForwardError


@dataclass(frozen=True)
class CurvePoint:
    label: str  # "base", "step-200", ..., "final"
    step: int
    train_tokens: int  # packed tokens fed to the trainer up to this point
    mean_accepted_tokens: float  # Jacobi new tokens / target forwards
    fast_forward_per_iteration: float
    repetition_rate: float  # fraction of outputs the cleaning rules call repetitive
    new_tokens: int
    prompts: int


def curve_models(run_dir: str | Path) -> list[tuple[str, Path, int, int]]:
    """(label, path, step, train_tokens) for every complete snapshot of a run, then the final model."""
    run = Path(run_dir)
    found: list[tuple[str, Path, int, int]] = []
    for meta in (run / "snapshots").glob("step-*/snapshot.json"):
        try:
            m = json.loads(meta.read_text())
            found.append((meta.parent.name, meta.parent, int(m["step"]), int(m["train_tokens"])))
        except (ValueError, KeyError, TypeError) as e:
            raise FastForwardError(f"{meta}: corrupt snapshot metadata ({e})") from None
    found.sort(key=lambda t: t[2])
    final = run / "cllm_training.json"
    if final.exists():
        m = json.loads(final.read_text())
        if not found or found[-1][2] != int(m["steps"]):
            found.append(("final", run, int(m["steps"]), int(m["train_tokens"])))
    if not found:
        raise FastForwardError(f"{run}: no snapshots (train with --snapshot-every N) and no final model")
    return found


def measure(
    ref: str | Path,
    messages: list[list[dict[str, str]]],
    block_size: int,
    max_new_tokens: int,
    dtype: str = "bfloat16",
    device: str = "cpu",
) -> dict[str, Any]:
    """Greedy Jacobi decoding of every prompt with one model; summed counts (no prompt dropped)."""
    from fastforward.core.decoder import GenerationConfig
    from fastforward.data import render_prompt
    from fastforward.decoders.registry import build_decoder
    from fastforward.models.loading import load_model
    from fastforward.training.augment import CleanConfig, is_repetitive
    from fastforward.training.evaluate import decode_all

    lm = load_model(str(ref), dtype, device)
    dec = build_decoder("jacobi", lm, None, {"block_size": block_size})
    gen = GenerationConfig(max_new_tokens=max_new_tokens, eos_token_ids=lm.eos_token_ids)
    prompts = [render_prompt(lm.tokenizer, msgs) for msgs in messages]
    run = decode_all(dec, prompts, gen, warmup=0)
    new, ex = run["new_tokens"], run["extras"]
    repetitive = sum(is_repetitive(o, CleanConfig()) for o in run["outputs"])
    return {
        "mean_accepted_tokens": new / max(1, run["forwards"]),
        "fast_forward_per_iteration": ex.get("fast_forward_tokens", 0)
        / max(1, ex.get("fixed_point_iterations", 0)),
        "repetition_rate": repetitive / max(1, len(messages)),
        "new_tokens": new,
        "prompts": len(messages),
    }


def plot(points: list[CurvePoint], path: str | Path, title: str) -> Path:
    """A small PNG line chart (Pillow only): tokens per forward against training tokens."""
    from PIL import Image, ImageDraw

    from fastforward.trace import load_font

    path = Path(path)
    w, h, left, right, top, bottom = 760, 420, 70, 70, 50, 60
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    font, bold = load_font(13), load_font(15)
    xs = [p.train_tokens for p in points]
    ys = [p.mean_accepted_tokens for p in points]
    x_max = max(max(xs), 1)
    y_lo, y_hi = min(1.0, min(ys)), max(ys) * 1.05 + 0.01

    def px(x: float, y: float) -> tuple[float, float]:
        return (
            left + (w - left - right) * x / x_max,
            h - bottom - (h - top - bottom) * (y - y_lo) / (y_hi - y_lo),
        )

    d.text((left, 15), title, fill="black", font=bold)
    d.line([left, top, left, h - bottom, w - right, h - bottom], fill="black")
    for i in range(5):
        y = y_lo + (y_hi - y_lo) * i / 4
        _, yy = px(0, y)
        d.line([left - 4, yy, w - right, yy], fill=(225, 225, 225))
        d.text((8, yy - 7), f"{y:.2f}", fill="black", font=font)
    for i in range(5):
        x = x_max * i / 4
        xx, _ = px(x, y_lo)
        d.text((xx - 20, h - bottom + 8), f"{x / 1000:.0f}k", fill="black", font=font)
    d.text((left + 120, h - 25), "packed training tokens", fill="black", font=font)
    d.text((left + 6, top + 4), "Jacobi tokens per forward (held-out)", fill=(60, 60, 60), font=font)
    pts = [px(x, y) for x, y in zip(xs, ys, strict=True)]
    if len(pts) > 1:
        d.line(pts, fill=(30, 90, 200), width=3)
    for (xx, yy), p in zip(pts, points, strict=True):
        d.ellipse([xx - 4, yy - 4, xx + 4, yy + 4], fill=(30, 90, 200))
        d.text((xx + 6, yy - 18), f"{p.mean_accepted_tokens:.2f}", fill="black", font=font)
    img.save(path)
    return path


def as_json(points: list[CurvePoint], extra: dict[str, Any]) -> dict[str, Any]:
    return {**extra, "points": [asdict(p) for p in points]}
