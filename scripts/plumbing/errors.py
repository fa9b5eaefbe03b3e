"""The one exception type for bad input and failed preconditions."""


class UserError(Exception):
    """A problem the user can fix; reported as one line and a non-zero exit, no traceback."""
