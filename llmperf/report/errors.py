"""The one error reports raise for bad input (the CLI prints it as one line and exits 2)."""


class ReportError(ValueError):
    """A path that is not a run or sweep folder, or a file in it that cannot be read."""
