"""The one exception type for bad input, so callers can tell misuse from a broken kernel."""


class MageInputError(ValueError):
    """Bad input to an operation: the message names the operation and the argument."""

    def __init__(self, op: str, arg: str, problem: str):
        self.op, self.arg = op, arg
        super().__init__(f"{op}: argument '{arg}' {problem}")
