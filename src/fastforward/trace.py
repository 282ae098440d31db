"""Pictures of Jacobi trajectories, like CLLM's Figure 2: one row per iteration, each token coloured by
whether it already equals the fixed point (the greedy AR token at that position).

Three renderers over the same cells: ANSI text for the terminal, a self-contained HTML page, and a PNG
(Pillow). They take :class:`~fastforward.decoders.jacobi.BlockTrajectory` records and a function that turns
one token id into display text, so they know nothing about models. The CLLM learning-curve chart
(``cllm-curve``) is drawn here too, with the same fonts.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fastforward.cllm.curve import CurvePoint
from fastforward.decoders.jacobi import BlockTrajectory, block_measures
from fastforward.errors import FastForwardError

RIGHT, WRONG, STATIONARY = "right", "wrong", "stationary"
_ANSI = {RIGHT: "\033[34m", WRONG: "\033[31m", STATIONARY: "\033[1;32m"}
_RGB = {RIGHT: (31, 92, 196), WRONG: (200, 40, 40), STATIONARY: (20, 140, 60)}
_BG = {RIGHT: (226, 236, 252), WRONG: (252, 228, 228), STATIONARY: (222, 246, 228)}


@dataclass(frozen=True)
class Row:
    label: str  # "b0 3:" = block 0, iterate 3
    cells: list[tuple[str, str]]  # (token text, RIGHT | WRONG | STATIONARY)


def token_text(decode: Callable[[list[int]], str], token: int) -> str:
    """Visible text of one token: spaces as '·', newlines as '↵', empty as '∅'."""
    s = decode([token]).replace(" ", "·").replace("\n", "↵").replace("\t", "⇥")
    return s or "∅"


def trajectory_rows(blocks: Sequence[BlockTrajectory], decode: Callable[[list[int]], str]) -> list[Row]:
    """Rows of cells; a right token that will be stationary is marked as such from the iteration it settles."""
    rows: list[Row] = []
    for b, block in enumerate(blocks):
        fp = block.fixed_point
        _, stationary = block_measures(block)
        for j, it in enumerate(block.iterates):
            cells = []
            for i, tok in enumerate(it[: len(fp)]):
                right = tok == fp[i]
                settled = (
                    right and i in stationary and j > 0 and all(x[i] == fp[i] for x in block.iterates[j:])
                )
                ahead = any(it[p] != fp[p] for p in range(i))
                kind = STATIONARY if settled and ahead else RIGHT if right else WRONG
                cells.append((token_text(decode, tok), kind))
            rows.append(Row(f"b{b} {j:>2}:", cells))
    return rows


def render_ansi(rows: Sequence[Row]) -> str:
    reset = "\033[0m"
    lines = [
        f"{reset}legend: {_ANSI[RIGHT]}right{reset} {_ANSI[WRONG]}wrong{reset} {_ANSI[STATIONARY]}stationary{reset}"
    ]
    for r in rows:
        lines.append(r.label + " " + " ".join(f"{_ANSI[k]}{t}{reset}" for t, k in r.cells))
    return "\n".join(lines)


def render_html(rows: Sequence[Row], title: str) -> str:
    def color(k: str) -> str:
        return "rgb({},{},{})".format(*_RGB[k])

    def bg(k: str) -> str:
        return "rgb({},{},{})".format(*_BG[k])

    body = []
    for r in rows:
        cells = "".join(
            f'<span style="color:{color(k)};background:{bg(k)}">{html.escape(t)}</span>' for t, k in r.cells
        )
        body.append(f"<div><b>{html.escape(r.label)}</b> {cells}</div>")
    legend = " ".join(f'<span style="color:{color(k)};background:{bg(k)}">{k}</span>' for k in _RGB)
    return (
        "<!doctype html><meta charset='utf-8'><title>{t}</title>"
        "<style>body{{font-family:monospace;font-size:14px}} span{{padding:1px 3px;margin:1px;"
        "display:inline-block;border-radius:3px}} div{{white-space:nowrap}}</style>"
        "<h3>{t}</h3><p>legend: {legend}</p>{body}"
    ).format(t=html.escape(title), legend=legend, body="\n".join(body))


def load_font(size: int):
    """A monospace TrueType font if one is installed, else Pillow's default (shared by every PNG we draw)."""
    from PIL import ImageFont  # Pillow is optional (not a package dependency)

    for name in ("DejaVuSansMono.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"):
        try:
            return ImageFont.truetype(name, size)
        except OSError:
            continue
    return ImageFont.load_default(size=size)


def render_png(rows: Sequence[Row], title: str, path: Path, size: int = 14) -> None:
    try:
        from PIL import Image, ImageDraw  # Pillow is optional (not a package dependency)
    except ModuleNotFoundError:
        raise FastForwardError("writing a PNG needs Pillow: pip install pillow (or write .html)") from None
    font, bold = load_font(size), load_font(size + 2)
    pad, gap, line = 4, 3, size + 10
    label_w = max(int(font.getlength(r.label)) for r in rows) + 2 * pad if rows else 0
    widths = [label_w + sum(int(font.getlength(t)) + 2 * pad + gap for t, _ in r.cells) for r in rows]
    width = max([*widths, int(bold.getlength(title)) + 40, 420]) + 2 * pad
    height = (len(rows) + 3) * line + 2 * pad
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    draw.text((pad, pad), title, fill="black", font=bold)
    x = pad
    y = pad + line
    for k in (RIGHT, WRONG, STATIONARY):
        w = int(font.getlength(k)) + 2 * pad
        draw.rectangle([x, y, x + w, y + line - 4], fill=_BG[k])
        draw.text((x + pad, y + 2), k, fill=_RGB[k], font=font)
        x += w + 2 * gap
    y += line + line // 2
    prev_block = None
    for r in rows:
        block = r.label.split()[0]
        if prev_block is not None and block != prev_block:
            draw.line([pad, y - 3, width - pad, y - 3], fill=(180, 180, 180))
        prev_block = block
        draw.text((pad, y + 2), r.label, fill="black", font=font)
        x = pad + label_w
        for t, k in r.cells:
            w = int(font.getlength(t)) + 2 * pad
            draw.rectangle([x, y, x + w, y + line - 4], fill=_BG[k])
            draw.text((x + pad, y + 2), t, fill=_RGB[k], font=font)
            x += w + gap
        y += line
    img.save(path)


def write(rows: Sequence[Row], title: str, path: str | Path) -> Path:
    """Write ``.png`` or ``.html`` depending on the suffix."""
    p = Path(path)
    if p.suffix.lower() == ".png":
        p.parent.mkdir(parents=True, exist_ok=True)
        render_png(rows, title, p)
    elif p.suffix.lower() in (".html", ".htm"):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(render_html(rows, title), encoding="utf-8")
    else:
        raise FastForwardError(f"--out must end in .png or .html, got '{p.name}'")
    return p


def plot_learning_curve(points: Sequence[CurvePoint], path: str | Path, title: str) -> Path:
    """A small PNG line chart of ``cllm-curve``: Jacobi tokens per forward against training tokens."""
    return plot_learning_curves({"": points}, path, title)


SERIES_COLOURS = ((30, 90, 200), (200, 70, 40), (40, 150, 70), (130, 60, 170))


def plot_learning_curves(series: dict[str, Sequence[CurvePoint]], path: str | Path, title: str) -> Path:
    """Several runs' curves on one chart (one colour each, labelled when named), e.g. CLLM vs Jacobi Forcing
    at equal training budgets."""
    from PIL import Image, ImageDraw  # Pillow is optional (not a package dependency)

    path = Path(path)
    w, h, left, right, top, bottom = 760, 420, 70, 70, 50, 60
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    font, bold = load_font(13), load_font(15)
    every = [p for pts in series.values() for p in pts]
    xs = [p.train_tokens for p in every]
    ys = [p.mean_accepted_tokens for p in every]
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
    for k, (name, points) in enumerate(series.items()):
        colour = SERIES_COLOURS[k % len(SERIES_COLOURS)]
        pts = [px(p.train_tokens, p.mean_accepted_tokens) for p in points]
        if len(pts) > 1:
            d.line(pts, fill=colour, width=3)
        for (xx, yy), p in zip(pts, points, strict=True):
            d.ellipse([xx - 4, yy - 4, xx + 4, yy + 4], fill=colour)
            d.text((xx + 6, yy - 18), f"{p.mean_accepted_tokens:.2f}", fill="black", font=font)
        if name:
            d.text((w - right - 170, top + 20 + 18 * k), f"— {name}", fill=colour, font=bold)
    img.save(path)
    return path
