"""The exception type for bad input, so callers can tell misuse from a broken kernel, and the warning
the harness gives when a measurement looks wrong."""


class MageInputError(ValueError):
    """Bad input to an operation: the message names the operation and the argument."""

    def __init__(self, op: str, arg: str, problem: str):
        self.op, self.arg = op, arg
        super().__init__(f"{op}: argument '{arg}' {problem}")


class MageWarning(UserWarning):
    """Something measured looks wrong but may be legitimate (a kernel count that is not whole per call):
    the run goes on and says so. The project's tests treat it as an error unless they expect it."""
