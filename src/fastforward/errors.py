"""User-facing errors: raised for bad input, printed by the CLI as one line with exit code 2."""

from __future__ import annotations

from pathlib import Path


class FastForwardError(Exception):
    """An error caused by the user's input or environment (not a bug): shown without a traceback."""


def read_user_text(path: str | Path, what: str = "file") -> str:
    """The text of a file the user named, or one FastForwardError saying why it cannot be read.

    Every command that reads a user's file goes through here so that a file in another encoding (latin-1,
    UTF-16), a directory or a missing path ends in one line naming the file, never a UnicodeDecodeError
    traceback from deep inside a loader.
    """
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise FastForwardError(
            f"{what} {p} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
            "save it as UTF-8"
        ) from None
    except FileNotFoundError:
        raise FastForwardError(f"{what} not found: {p}") from None
    except IsADirectoryError:
        raise FastForwardError(f"{what} {p} is a directory, not a file") from None
    except OSError as e:
        raise FastForwardError(f"cannot read {what} {p}: {e.strerror or e}") from None
