"""The command line's grammar: each verb's own parser, options and examples.

`sciperf VERB -h` shows what that verb reads and how it is called, as `git VERB -h` and
Slurm's commands do; `sciperf -h` lists the verbs. A verb's parser accepts only its own
options: one given to another verb's is refused in one line that names the verbs reading
it, so a misplaced option (`check --json`) never runs the verb as if it were absent.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

# option → (argparse keywords, the help used where a verb gives none of its own)
OPTIONS: dict[str, dict[str, Any]] = {
    "force": {"action": "store_true", "help": "regenerate existing synthetic data"},
    "ruleset": {"choices": ("3.0.0", "2.0.0"),
                "help": "the hpc ruleset of the logs (default 3.0.0)"},
    "json": {"action": "store_true", "help": "print JSON instead of a table"},
    "system": {"metavar": "NAME", "help": "the system name of the submission tree"},
    "out": {"metavar": "DIR", "help": "where the verb writes"},
    "full": {"action": "store_true", "help": "read every file, not a sample"},
    "connections": {"metavar": "N", "type": int,
                    "help": "parallel HTTPS connections per file (default 4)"},
}
DEBUG_HELP = "show the traceback instead of the one-line error (or SCIPERF_DEBUG=1)"


@dataclass(frozen=True)
class Verb:
    """One verb: what it does, what its words are, the options it reads and examples."""

    name: str
    summary: str
    run: Callable[[argparse.Namespace], int]
    operands: str = "key=value"  # the metavar of its positional words
    operand_help: str = "Hydra overrides of the composed config"
    options: tuple[tuple[str, str | None], ...] = ()  # (option, its help here or None)
    examples: tuple[str, ...] = ()


VERBS: dict[str, Verb] = {}


def verb(name: str, summary: str, **fields: Any) -> Callable:
    """Register a CLI verb: `@verb("check", "…", operands="RUN", options=(("ruleset", None),))`."""
    def wrap(fn: Callable[[argparse.Namespace], int]) -> Callable:
        VERBS[name] = Verb(name, summary, fn, **fields)
        return fn
    return wrap


def verbs_reading(option: str) -> list[str]:
    return [v.name for v in VERBS.values() if option in dict(v.options)]


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors in one line like every other user error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} -h` lists the "
                     f"{'verbs and options' if self.prog == 'sciperf' else 'options'})\n")


class _VerbParser(_Parser):
    """A verb's parser: an option of another verb is named as such."""

    def error(self, message: str) -> NoReturn:
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            option = message[len(prefix):].split()[0].split("=", 1)[0]
            readers = verbs_reading(option.removeprefix("--"))
            if option.startswith("--") and readers:
                self.exit(2, f"{self.prog}: error: {option} is not an option of "
                             f"`{self.prog}` (it is one of {', '.join(readers)})\n")
        super().error(message)


def top_parser() -> argparse.ArgumentParser:
    """`sciperf -h`: the verbs, one line each."""
    from sciperf.workloads import DEFAULT, WORKLOADS
    p = _Parser(
        prog="sciperf",
        description=f"MLPerf-HPC scientific-ML benchmarks ({', '.join(WORKLOADS)}) in PyTorch "
                    "and TensorFlow over one spec. Verbs take Hydra overrides key=value, e.g. "
                    f"`sciperf run workload={DEFAULT} framework=pytorch experiment=mini`.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="verbs:\n" + "\n".join(f"  {v.name:<13}{v.summary}" for v in VERBS.values())
               + "\n\n`sciperf VERB -h` shows a verb's own options and examples.",
    )
    p.add_argument("verb", choices=list(VERBS), metavar="VERB", help="one of the verbs below")
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    return p


def verb_parser(v: Verb) -> argparse.ArgumentParser:
    """`sciperf VERB -h`: that verb's words, its options and examples."""
    p = _VerbParser(prog=f"sciperf {v.name}", description=v.summary,
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog=_examples(v))
    p.add_argument("overrides", nargs="*", metavar=v.operands, help=v.operand_help)
    for option, help_here in v.options:
        keywords = dict(OPTIONS[option])
        keywords["help"] = help_here or keywords["help"]
        p.add_argument(f"--{option}", **keywords)
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    # every option exists on the namespace: a verb's code reads its own, the checks all
    p.set_defaults(verb=v.name, **{o: False if OPTIONS[o].get("action") == "store_true"
                                   else None for o in OPTIONS if o not in dict(v.options)})
    return p


def _examples(v: Verb) -> str | None:
    """The verb's examples; NAME in them stands for a workload, listed after them."""
    if not v.examples:
        return None
    text = "examples:\n" + "\n".join(f"  {e}" for e in v.examples)
    if any("workload=NAME" in e for e in v.examples):
        from sciperf.workloads import names
        text += f"\n\nNAME: a workload ({', '.join(names())})"
    return text


def _takes_value(option: str) -> bool:
    return option.startswith("--") and "=" not in option and \
        OPTIONS.get(option[2:], {}).get("action") != "store_true" and option[2:] in OPTIONS


def parse(argv: list[str]) -> argparse.Namespace:
    """The verb is the first word; options may come before it (`sciperf --debug train …`)
    or anywhere after, mixed with the overrides."""
    before: list[str] = []
    rest = list(argv)
    while rest and rest[0].startswith("-"):
        before.append(rest.pop(0))
        if _takes_value(before[-1]) and rest:
            before.append(rest.pop(0))
    if not rest or before and before[0] in ("-h", "--help") or rest[0] not in VERBS:
        top_parser().parse_args([*before, *rest[:1]])  # help, or the one-line error
    return verb_parser(VERBS[rest[0]]).parse_intermixed_args([*before, *rest[1:]])
