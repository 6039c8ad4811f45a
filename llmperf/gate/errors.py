"""The one error the gate reports as a usage error (exit 2, one line, no traceback)."""


class GateError(ValueError):
    """Bad input: a missing path, a schema mismatch, an unknown metric, a malformed tolerance."""
