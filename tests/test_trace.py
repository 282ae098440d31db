"""The trajectory picture: cells coloured by agreement with the fixed point, in ANSI, HTML and PNG, and the
``trace`` command end to end on a tiny model directory."""

from __future__ import annotations

import pytest

from fastforward import trace
from fastforward.cli import main
from fastforward.decoders.jacobi import BlockTrajectory, JacobiConfig, JacobiDecoder
from fastforward.errors import FastForwardError

from .conftest import greedy_config, make_tiny


def _decode(ids: list[int]) -> str:
    return {1: "a", 2: " b", 3: "\n", 4: "d", 5: "e", 9: "x"}.get(ids[0], "?")


BLOCK = BlockTrajectory(
    start=1,
    iterates=[[9, 9, 9, 9], [1, 9, 3, 9], [1, 2, 3, 9], [1, 2, 3, 4]],
    fixed_point=[1, 2, 3, 4],
    committed=[1, 2, 1],
)


def test_rows_colour_tokens_by_fixed_point_and_mark_stationary():
    rows = trace.trajectory_rows([BLOCK], _decode)
    assert [r.label for r in rows] == ["b0  0:", "b0  1:", "b0  2:", "b0  3:"]
    kinds = [[k for _, k in r.cells] for r in rows]
    R, W, S = trace.RIGHT, trace.WRONG, trace.STATIONARY
    assert kinds[0] == [W, W, W, W]
    assert kinds[1] == [R, W, S, W]  # '\n' is right while ' b' before it is still wrong, and stays
    assert kinds[2] == [R, R, R, W]
    assert kinds[3] == [R, R, R, R]
    assert [t for t, _ in rows[1].cells] == ["a", "x", "↵", "x"]
    assert trace.token_text(_decode, 2) == "·b"


def test_ansi_and_html_contain_every_token():
    rows = trace.trajectory_rows([BLOCK], _decode)
    ansi = trace.render_ansi(rows)
    assert "\033[31mx" in ansi and ansi.count("\n") == len(rows)
    page = trace.render_html(rows, "t <1>")
    assert page.count("<div>") == len(rows) and "t &lt;1&gt;" in page


def test_png_and_html_files_are_written(tmp_path):
    pytest.importorskip("PIL")
    from PIL import Image

    rows = trace.trajectory_rows([BLOCK, BLOCK], _decode)
    png = trace.write(rows, "demo", tmp_path / "t.png")
    with Image.open(png) as img:
        assert img.width > 100 and img.height > 8 * 20
    assert trace.write(rows, "demo", tmp_path / "t.html").read_text().startswith("<!doctype html>")
    with pytest.raises(FastForwardError, match="png or .html"):
        trace.write(rows, "demo", tmp_path / "t.jpg")


def test_recorded_tiny_trajectory_renders_one_row_per_iterate():
    tiny = make_tiny("qwen2")
    dec = JacobiDecoder(tiny.model, JacobiConfig(block_size=6, record=True))
    dec.generate([1, 2, 3], greedy_config(13))
    rows = trace.trajectory_rows(dec.last_trajectory, lambda ids: str(ids[0]))
    assert len(rows) == sum(len(b.iterates) for b in dec.last_trajectory)
    assert all(k == trace.RIGHT for _, k in rows[-1].cells)  # every block ends at its fixed point
    # without record=true nothing is kept
    plain = JacobiDecoder(tiny.model, JacobiConfig(block_size=6))
    plain.generate([1, 2, 3], greedy_config(13))
    assert plain.last_trajectory == []


def test_trace_command_end_to_end(tmp_path, capsys):
    """The CLI on a tiny saved model with a word-level tokenizer, writing HTML."""
    tokenizers = pytest.importorskip("tokenizers")
    from transformers import PreTrainedTokenizerFast  # after the importorskip: it needs tokenizers

    vocab = {f"w{i}": i for i in range(512)}
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="w0"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="w511", unk_token="w0")
    d = tmp_path / "tiny"
    tiny = make_tiny("llama")
    tiny.model.save_pretrained(d)
    tok.save_pretrained(d)
    out = tmp_path / "trace.html"
    rc = main(
        ["trace", "--model", str(d), "--raw", "--max-new-tokens", "9", "--opt", "block_size=4"]
        + ["--no-color", "--out", str(out), "w1 w2 w3"]
    )
    assert rc == 0 and out.exists()
    printed = capsys.readouterr()
    assert "b0  0:" in printed.out and "fast-forwarded tokens/iteration" in printed.err
    assert main(["trace", "--model", str(d), "--raw", "--out", str(tmp_path / "x.gif"), "w1"]) == 2
