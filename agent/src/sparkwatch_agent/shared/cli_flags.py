"""Flag errors in one line: a parser class whose refusals are one line naming where ``--help`` is, and a
flag no parser takes refused under the command it was typed for.

argparse prints the parser's whole usage (up to a dozen lines for `sparkwatch run`) before its error; a
user who typed one wrong flag needs the error, and the place to read the rest. argparse's top-level parser
also reports an unknown flag under the program's name wherever it was typed; each subcommand parser here
carries itself as the ``subparser`` default, so the refusal can name the subcommand a flag was typed after
— and the program, for one typed before the subcommand. A flag that takes one value refuses a second
(argparse keeps the last in silence: `--retain-idle 30d … --retain-idle 1d` from a wrapper and its caller
kept a day of idle samples where the first said a month)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

#: Where :class:`StoreOnce` keeps the flags given so far, in the namespace being parsed (not an identifier:
#: no ``args.NAME`` reads it).
_GIVEN = "flags given"


def _once(action: argparse.Action, namespace: argparse.Namespace) -> None:
    """Refuse ``action``'s flag a second time (in either of its spellings)."""
    given: set[str] = namespace.__dict__.setdefault(_GIVEN, set())
    if action.dest in given:
        raise argparse.ArgumentError(action, "may be given only once")
    given.add(action.dest)


class StoreOnce(argparse._StoreAction):
    """argparse's ``store``, refusing the flag a second time (a flag repeated on purpose is ``append``)."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        _once(self, namespace)
        super().__call__(parser, namespace, values, option)


class BooleanOnce(argparse.BooleanOptionalAction):
    """``--x/--no-x``, refusing a second of either (``--sim-sensors … --no-sim-sensors`` kept the last)."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        _once(self, namespace)
        super().__call__(parser, namespace, values, option)


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """argparse's subcommands, refusing a flag typed both before the subcommand and after it (``--log-level``
    is taken in either place): the subcommand's flags are parsed into a namespace of their own, which
    then replaces what was set before."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        before: set[str] = namespace.__dict__.setdefault(_GIVEN, set())
        if (sub := self._name_parser_map.get(values[0])) is not None:
            sub._outer = parser  # its errors read the whole command line
        super().__call__(parser, namespace, values, option)
        after: set[str] = namespace.__dict__[_GIVEN]  # the subcommand's own, if it was given a flag
        twice = sorted(before & after) if after is not before else []
        if twice:
            flag = next(a for a in parser._actions if a.dest == twice[0])
            raise argparse.ArgumentError(flag, "may be given only once (here before the command and after)")
        after |= before


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr, exit 2: ``PROG CMD: error: WHAT (see `PROG CMD
    --help`)``. Its subcommand parsers are of this class too (``add_subparsers`` makes its own type), and
    its flags that take a value take it once (:class:`StoreOnce`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in (None, "store"):  # None: what ``add_argument`` without an action stands for
            self.register("action", name, StoreOnce)
        self.register("action", "parsers", _Commands)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._typed = list(sys.argv[1:] if args is None else args)  # for :meth:`error`'s hint
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        typed = getattr(self, "_typed", [])
        message = _flag_before_command(self, typed, message) or _required_before(self, message) or message
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _required_before(parser: argparse.ArgumentParser, message: str) -> str | None:
    """What to say instead of ``the following arguments are required: --stdio`` for `sparkwatch-agent
    --stdio stream` (or ``one of the arguments --db --prometheus is required`` for `sparkwatch --db=x.db
    export`): the flag was typed, before the command that requires it (the top-level parser kept it aside
    as unknown)."""
    required = re.fullmatch(r"the following arguments are required: (.+)", message)
    group = re.fullmatch(r"one of the arguments (.+) is required", message)
    if required is None and group is None:
        return None
    root = parser
    while (outer := getattr(root, "_outer", None)) is not None:
        root = outer
    names = required.group(1).split(", ") if required else group.group(1).split(" ")  # type: ignore[union-attr]
    flags = [f for name in names for f in name.split("/") if f.startswith("-")]
    early = _typed_before(getattr(root, "_typed", []), _words(parser), flags)
    if early is None:
        return None
    switch = getattr(_own_flag(parser, early[0]), "nargs", None) == 0
    return f"{early[0]} goes after the command: `{parser.prog} {early[0]}{'' if switch else ' …'}`"


def _words(parser: argparse.ArgumentParser) -> list[str]:
    """The command's words (``runs list``), from its parser's name."""
    return parser.prog.split(" ")[1:]


def _typed_before(typed: list[str], words: list[str], flags: Sequence[str]) -> tuple[str, int] | None:
    """The first of ``flags`` (``--f`` or ``--f=v``) typed before the last of the command's ``words``, with
    how many of those words came before it; None where none was, where it is typed after that word too
    (then it was given twice, not misplaced), or where the words are not found as typed."""
    at = _word_positions(typed, words)
    if not at:
        return None
    for i, token in enumerate(typed[: at[-1]]):
        if (flag := token.partition("=")[0]) in flags:
            again = any(later.partition("=")[0] == flag for later in typed[at[-1] + 1 :])
            return None if again else (flag, len([k for k in at if k < i]))
    return None


def _word_positions(typed: list[str], words: list[str]) -> list[int] | None:
    """Where each of the command's ``words`` was typed, in order; None where one is not found as typed (an
    alias, say: a hint would guess)."""
    at: list[int] = []
    for word in words:
        try:
            at.append(typed.index(word, at[-1] + 1 if at else 0))
        except ValueError:
            return None
    return at


def _flag_before_command(parser: argparse.ArgumentParser, typed: list[str], message: str) -> str | None:
    """What to say instead of ``invalid choice: 'sim'`` for `sparkwatch-agent --backend sim`: a flag that
    only a command takes, typed before any command, whose value argparse then took for the command. Only
    then: a typo in the command itself (`--strict nope`, `--log-level debug nope`) keeps argparse's words."""
    commands = _commands_of(parser)
    if commands is None:
        return None
    rejected = re.match(rf"argument {re.escape(str(commands.metavar))}: invalid choice: (.+?) \(", message)
    if rejected is None:
        return None
    i = 0
    while i < len(typed) and typed[i].startswith("-") and typed[i] != "--" and len(typed[i]) > 1:
        flag, eq, _value = typed[i].partition("=")
        own = _own_flag(parser, flag)
        if own is not None:  # this parser's flag (`--log-level`, `--log`): skip it and its value
            i += 1 if eq or own.nargs == 0 else 2
            continue
        value = typed[i + 1] if not eq and i + 1 < len(typed) else None
        if value is None or repr(value) != rejected.group(1):
            return None  # the flag took no value: the command argparse refused is the one typed
        takers = _takers(parser, flag)
        if not takers:  # no command takes it either: whatever was meant, this flag is wrong
            return f"unrecognized arguments: {flag}"
        valued = [path for path, action in takers if action.nargs != 0]
        return _misplaced(parser, flag, valued, typed[i + 2 :]) if valued else None
    return None


def _own_flag(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    """The action of one of ``parser``'s own flags, as argparse reads it (a unique prefix too)."""
    if flag in parser._option_string_actions:
        return parser._option_string_actions[flag]
    if not parser.allow_abbrev or not flag.startswith("--"):
        return None
    matches = {a for s, a in parser._option_string_actions.items() if s.startswith(flag)}
    return matches.pop() if len(matches) == 1 else None


def _commands_of(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:  # type: ignore[type-arg]
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _takers(parser: argparse.ArgumentParser, flag: str, path: str = "") -> list[tuple[str, argparse.Action]]:
    """The commands (``runs list`` among them) that take ``flag``, in the order of the help, each with its
    action for the flag."""
    commands = _commands_of(parser)
    found: list[tuple[str, argparse.Action]] = []
    for name, sub in commands.choices.items() if commands else ():
        if flag in sub._option_string_actions and _commands_of(sub) is None:
            found.append((f"{path}{name}", sub._option_string_actions[flag]))
        found += _takers(sub, flag, f"{path}{name} ")
    return found


def _misplaced(parser: argparse.ArgumentParser, flag: str, takers: list[str], after: list[str]) -> str:
    """Where ``flag``, refused by ``parser`` itself, goes: after the command typed after it (``after``: the
    words that follow its value) where that one takes it, else after the first that does."""
    choices = _commands_of(parser).choices  # type: ignore[union-attr]  # a parser with commands: a taker
    after = after[next((k for k, word in enumerate(after) if word in choices), len(after)) :]
    typed = [t for t in takers if after[: len(t.split(" "))] == t.split(" ")]
    example = typed[0] if typed else takers[0]
    shown = takers if len(takers) <= 4 else [*takers[:3], f"{len(takers) - 3} more"]
    named = shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"
    return f"{flag} goes after the command: `{parser.prog} {example} {flag} …` (a flag of {named})"


def refuse_unknown(
    parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Sequence[str], unknown: Sequence[str]
) -> NoReturn:
    """Exit 2 with ``unknown`` named in one line, under the name of the parser the flags were typed for; one
    flag the command takes, typed before the command's last word (`runs --token-file=t list`), is said to go
    after it."""
    owner: argparse.ArgumentParser = getattr(args, "subparser", parser)
    typed, words = list(argv), _words(owner)
    early = _typed_before(typed, words, [u.partition("=")[0] for u in unknown])
    last = (_word_positions(typed, words) or [len(typed)])[-1]
    for flag in (u.partition("=")[0] for u in unknown if u in typed[:last]):
        if _own_flag(owner, flag) is not None and any(t.partition("=")[0] == flag for t in typed[last + 1 :]):
            owner.error(f"argument {flag}: may be given only once (here before the command and after)")
    if early is not None and all(u in typed[:last] for u in unknown):  # else under the command it follows
        flag, level = early
        for word in words[:level]:  # the parser it was typed for: the program's, or a command's (`runs`)
            parser = _commands_of(parser).choices[word]  # type: ignore[union-attr]
        if len(unknown) == 1 and _own_flag(owner, flag) is not None:
            parser.error(f"{flag} goes after the command: `{owner.prog} … {flag} …`")
        owner = parser
    owner.error(f"unrecognized arguments: {' '.join(unknown)}")
