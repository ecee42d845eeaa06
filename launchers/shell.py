"""Shell words for rendered scripts: quoted literally, or left for the script's shell to expand."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

WIDTH = 96  # rendered lines stay under the house line length


class Expand(str):
    """A word that references shell variables ($MASTER_ADDR…): rendered inside double quotes.

    Only scripts may contain such words; a command started without a shell never does.
    """

    __slots__ = ()


def quote(word: str) -> str:
    """One word as the script's shell must see it."""
    if isinstance(word, Expand):
        return f'"{word}"'
    return shlex.quote(str(word))


def _units(words: Sequence[str]) -> list[str]:
    """Quoted words, an option kept with its value (`-v SRC:DST`) so lines never split them."""
    units: list[str] = []
    for word in words:
        prev = units[-1] if units else ""
        if (prev.startswith("-") and " " not in prev and "=" not in prev
                and not str(word).startswith("-")):
            units[-1] = f"{prev} {quote(word)}"
        else:
            units.append(quote(word))
    return units


def render(groups: Sequence[Sequence[str]], indent: str = "    ") -> str:
    """A command from word groups (launcher, container, program), wrapped with backslashes.

    Every group starts a new line; a group longer than WIDTH wraps between options.
    """
    lines: list[str] = []
    for group in groups:
        line = ""
        for unit in _units(group):
            if line and len(line) + 1 + len(unit) > WIDTH:
                lines.append(line)
                line = indent + unit
            elif line:
                line = f"{line} {unit}"
            else:
                line = (indent if lines else "") + unit
        if line:
            lines.append(line)
    return " \\\n".join(lines)


def flat(groups: Sequence[Sequence[str]]) -> list[str]:
    """The argument vector of a command given as word groups (for starting it directly)."""
    words = [str(w) for group in groups for w in group]
    shelly = [w for group in groups for w in group if isinstance(w, Expand)]
    if shelly:
        raise ValueError(f"{shelly[0]!r} needs a shell; render a script instead")
    return words
