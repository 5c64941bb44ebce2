"""What of a benchmark's command line may be published: its run name and argv, without secrets."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

SECRET_FLAG = re.compile(r"key|token|secret|passw|auth|cred", re.IGNORECASE)


def default_name(command: Sequence[str]) -> str:
    """The program and its leading words (``lmx speed-test run sglang``): never its option values,
    which may hold an API key."""
    words = [Path(command[0]).name]
    for arg in command[1:5]:
        if arg.startswith("-"):
            break
        words.append(arg)
    return " ".join(words)[:200]


def redact_argv(argv: Sequence[str]) -> list[str]:
    """argv with the values of key/token/secret/password options replaced, for an export people publish."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        flag, eq, _value = arg.partition("=")
        if arg.startswith("-") and SECRET_FLAG.search(flag):
            if eq:
                out.append(f"{flag}=***")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out
