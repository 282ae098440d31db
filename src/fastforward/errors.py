"""User-facing errors: raised for bad input, printed by the CLI as one line with exit code 2."""


class FastForwardError(Exception):
    """An error caused by the user's input or environment (not a bug): shown without a traceback."""
