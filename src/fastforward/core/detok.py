"""Incremental detokenization and stop strings: text that is safe to show while tokens are still coming.

Why this exists: a decoder commits a few token ids per step, and a byte-level tokenizer may split one
character (an emoji, a CJK ideograph) over several tokens. Decoding each step's ids alone, or printing the
tail of a fresh decode of everything, shows U+FFFD replacement characters or garbles text. Here every piece
handed out is a run of whole characters, and the pieces concatenate to exactly what one decode of all the
ids gives, less a trailing incomplete character when the token limit cut one (so a streamed reply equals
the non-streamed one).

:class:`IncrementalDetokenizer` keeps two offsets into the ids (the scheme vLLM and TGI use): text is decoded
from ``prefix`` (a few tokens of left context, so tokenizers that drop a leading space on the first token
decode the same way as in the full text) and only the part after ``read`` is new; when the decoded window
ends in U+FFFD the last character is incomplete and nothing is handed out until more ids arrive.

:class:`StopMatcher` finds stop strings across piece boundaries: it holds back the longest tail of the text
that could still begin a stop string, so a stop string is never emitted, even in part.

Pure Python, no torch: the only dependency is an object with ``decode(ids, skip_special_tokens=...)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

REPLACEMENT = "\ufffd"


class Decodes(Protocol):
    """The one tokenizer method used here (any Hugging Face tokenizer has it)."""

    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...


class IncrementalDetokenizer:
    """Turn ids arriving in steps into text pieces that never split a character.

    ``push`` returns the new text (possibly "" while a character is incomplete); ``flush`` returns what is
    left at the end of the generation, less a trailing incomplete character.
    """

    def __init__(self, tokenizer: Decodes, skip_special_tokens: bool = True) -> None:
        self._tok = tokenizer
        self._skip = skip_special_tokens
        self.ids: list[int] = []
        self._prefix = 0  # start of the decode window (left context for the tokenizer)
        self._read = 0  # ids before this have been handed out as text

    def _decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=self._skip) if ids else ""

    def push(self, new_ids: Iterable[int]) -> str:
        """Add one step's ids; return the text they complete ("" while a character is still incomplete)."""
        self.ids.extend(int(i) for i in new_ids)
        return self._advance(final=False)

    def flush(self) -> str:
        """The text not yet handed out, at the end of a generation.

        A generation cut by its token limit can end inside a character; those bytes are not a character
        at all, so they are dropped rather than shown as U+FFFD (the ids are still in ``ids``)."""
        return self._advance(final=True).rstrip(REPLACEMENT)

    def _advance(self, final: bool) -> str:
        if len(self.ids) == self._read:
            return ""
        before = self._decode(self.ids[self._prefix : self._read])
        window = self._decode(self.ids[self._prefix :])
        if len(window) <= len(before) or (window.endswith(REPLACEMENT) and not final):
            return ""  # nothing new yet (a skipped special token) or the last character is incomplete
        self._prefix, self._read = self._read, len(self.ids)
        return window[len(before) :]


class StopMatcher:
    """Cut a stream of text at the first stop string, without ever emitting (part of) the stop string.

    ``push`` returns the text that is safe to emit; once a stop string is seen, ``stopped`` is True and
    everything from the stop string on is dropped. ``flush`` releases the held-back tail at the end."""

    def __init__(self, stops: Sequence[str] = ()) -> None:
        if any(not s for s in stops):
            raise ValueError("stop strings must not be empty")
        self.stops = tuple(stops)
        self.stopped = False
        self._held = ""

    def push(self, text: str) -> str:
        if self.stopped:
            return ""
        if not self.stops:
            return text
        buf = self._held + text
        hits = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped, self._held = True, ""
            return buf[: min(hits)]
        keep = self._partial_tail(buf)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        out, self._held = ("" if self.stopped else self._held), ""
        return out

    def _partial_tail(self, buf: str) -> int:
        """Length of the longest suffix of ``buf`` that is a proper prefix of some stop string."""
        best = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), best, -1):
                if buf.endswith(s[:k]):
                    best = k
                    break
        return best


class TextStream:
    """Ids in, safe text out: an :class:`IncrementalDetokenizer` followed by a :class:`StopMatcher`.

    The one piece of streaming logic shared by the server, ``fastforward generate`` and ``fastforward chat``.
    ``text`` is everything emitted so far; ``stopped`` says a stop string ended the text (the caller should
    stop generating)."""

    def __init__(
        self, tokenizer: Decodes, stops: Sequence[str] = (), skip_special_tokens: bool = True
    ) -> None:
        self.detok = IncrementalDetokenizer(tokenizer, skip_special_tokens)
        self.matcher = StopMatcher(stops)
        self.text = ""

    @property
    def stopped(self) -> bool:
        return self.matcher.stopped

    def push(self, new_ids: Iterable[int]) -> str:
        """Add one step's ids; return the text that may be shown now."""
        return self._emit(self.matcher.push(self.detok.push(new_ids)))

    def finish(self) -> str:
        """The end of the generation: the rest of the text (held-back stop prefixes, a last broken byte)."""
        out = self.matcher.push(self.detok.flush())
        return self._emit(out + self.matcher.flush())

    def _emit(self, piece: str) -> str:
        self.text += piece
        return piece
