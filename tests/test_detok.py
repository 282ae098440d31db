"""Incremental detokenization and stop strings (core/detok.py): whole characters only, pieces that add up to
the full decode, stop strings found across piece boundaries and never emitted.

A toy byte-level tokenizer (every id is raw bytes, like GPT-2's byte-level BPE) makes the splits explicit;
the real SmolLM2 tokenizer checks the same on emoji and CJK text."""

from __future__ import annotations

import random

import pytest

from fastforward.core.detok import REPLACEMENT, IncrementalDetokenizer, StopMatcher, TextStream
from fastforward.models.loading import LoadedModel


class ByteTokenizer:
    """id -> bytes; decode joins the bytes and decodes with replacement, skipping the special id 0."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = [b"<eos>", *pieces]

    def encode(self, text: str) -> list[int]:
        """One id per byte, plus multi-byte ids where the vocabulary has them (greedy longest match)."""
        data, ids, i = text.encode(), [], 0
        while i < len(data):
            best = max(
                (j for j, p in enumerate(self.pieces) if j and data.startswith(p, i)),
                key=lambda j: len(self.pieces[j]),
            )
            ids.append(best)
            i += len(self.pieces[best])
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        parts = [self.pieces[i] for i in ids if not (skip_special_tokens and i == 0)]
        return b"".join(parts).decode("utf-8", errors="replace")


BYTES = ByteTokenizer([bytes([b]) for b in range(256)] + ["世".encode()[:2], b" hello"])
TEXT = "Hi 👋 世界, café — 日本語 ok 🇯🇵!"


def stream_pieces(tok, ids: list[int], sizes: list[int]) -> list[str]:
    det = IncrementalDetokenizer(tok)
    out, i = [], 0
    for n in sizes:
        out.append(det.push(ids[i : i + n]))
        i += n
    out.append(det.push(ids[i:]))
    out.append(det.flush())
    return out


@pytest.mark.parametrize("seed", range(5))
def test_pieces_are_whole_characters_and_add_up_to_the_full_decode(seed: int) -> None:
    ids = BYTES.encode(TEXT)
    rng = random.Random(seed)
    sizes = [rng.randint(1, 3) for _ in range(len(ids))]
    pieces = stream_pieces(BYTES, ids, sizes)
    assert all(REPLACEMENT not in p for p in pieces)
    assert "".join(pieces) == TEXT == BYTES.decode(ids)


def test_one_byte_at_a_time_holds_a_character_until_it_is_complete() -> None:
    det = IncrementalDetokenizer(BYTES)
    ids = BYTES.encode("👋")  # four bytes, four ids
    assert len(ids) == 4
    assert [det.push([i]) for i in ids] == ["", "", "", "👋"]


def test_special_tokens_are_skipped_and_a_cut_character_is_dropped_at_the_end() -> None:
    det = IncrementalDetokenizer(BYTES)
    ids = BYTES.encode("ok 世")[:-1]  # the last character cut by the token limit
    out = det.push([0]) + det.push(ids) + det.flush()
    assert out == "ok "
    assert det.flush() == ""  # nothing is handed out twice


def test_real_tokenizer_streams_emoji_and_cjk_exactly(smollm2: LoadedModel) -> None:
    tok = smollm2.tokenizer
    text = "Bonjour 👋🏽 — 你好，世界！ こんにちは 🇯🇵 naïve"
    ids = list(tok(text)["input_ids"])
    whole = tok.decode(ids, skip_special_tokens=True)
    for sizes in ([1] * len(ids), [2, 3] * len(ids)):
        pieces = stream_pieces(tok, ids, sizes)
        assert all(REPLACEMENT not in p for p in pieces)
        assert "".join(pieces) == whole == text


# --------------------------------------------------------------------------- stop strings


def run_stop(stops: list[str], chunks: list[str]) -> tuple[list[str], bool]:
    m = StopMatcher(stops)
    out = [m.push(c) for c in chunks]
    out.append(m.flush())
    return out, m.stopped


def test_stop_string_split_over_chunks_is_found_and_never_emitted() -> None:
    out, stopped = run_stop(["END"], ["abc E", "N", "Dxyz"])
    assert stopped
    assert "".join(out) == "abc "
    assert all("E" not in piece for piece in out)  # not even the first letter of the stop string leaks


def test_held_prefix_is_released_when_it_turns_out_not_to_be_a_stop() -> None:
    out, stopped = run_stop(["END"], ["abc E", "NX", " tail E"])
    assert not stopped
    assert out[0] == "abc "  # "E" held back
    assert "".join(out) == "abc ENX tail E"  # flushed at the end


def test_earliest_of_several_stops_wins() -> None:
    out, stopped = run_stop(["world", "lo"], ["hello world"])
    assert stopped
    assert "".join(out) == "hel"


def test_overlapping_prefixes_keep_the_longest_possible_start() -> None:
    out, _ = run_stop(["aab"], ["xa", "a", "a", "b!"])
    assert "".join(out) == "xa"


def test_empty_stop_string_is_refused() -> None:
    with pytest.raises(ValueError):
        StopMatcher([""])


def test_text_stream_combines_detokenizer_and_stops() -> None:
    ids = BYTES.encode("say 世界 then STOP here")
    ts = TextStream(BYTES, ["STOP"])
    pieces = [ts.push([i]) for i in ids]
    pieces.append(ts.finish())
    assert ts.stopped
    assert "".join(pieces) == ts.text == "say 世界 then "
    assert all(REPLACEMENT not in p for p in pieces)
