"""The one exception type users see.

Errors a user can cause (bad override, missing file, corrupt sample, …) are raised as
:class:`SciperfError`; the CLI prints them as one line and exits non-zero instead of a
traceback wall (docs/architecture.md, rule 10).
"""


class SciperfError(Exception):
    """A user-facing error: the message names the file or key and says what is wrong."""

    exit_code = 2


class PeerLostError(SciperfError):
    """Another rank died or stopped answering: not the user's input, so exit code 1."""

    exit_code = 1


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's text (at most 200 characters): what a
    one-line refusal quotes of a library's multi-line error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:200]
