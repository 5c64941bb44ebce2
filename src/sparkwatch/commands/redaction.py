"""What of a benchmark's command line may be published: its run name and argv, without secrets.

The argv of ``sparkwatch run`` goes into the run (name and ``run.command``), so into the coordinator's
log, its SQLite file, its export and (formerly) its /metrics. Secrets are found by where they stand (the
name they are given), and a few by their well-known shape; each is replaced by ``***``, and what is not a
secret stays readable so that the published command still says how the benchmark ran. The rules, each
applied wherever the text appears (an argv item, or a ``sh -c`` script inside one):

- a *secret name* is a name with a word (split at ``-``, ``_``, ``.`` and camelCase) that is, or ends
  in, key, token, secret, password/passwd, auth, or is pass, passphrase, pwd, authorization, bearer,
  credential(s), cred(s), cookie, sig, signature (``OPENAI_API_KEY``, ``--hf-token``, ``PGPASSWORD``,
  ``X-Amz-Signature``), but not ``--max-tokens`` or ``TOKENIZERS_PARALLELISM``;
- ``NAME=value`` (``env`` assignments, form bodies) and ``--flag=value``/``--flag value`` whose name is
  secret: the value; other assignments (``CUDA_VISIBLE_DEVICES=0``) stay, they make the run reproducible;
- headers (``-H``/``--header``/``--proxy-header``, attached or separate, ``Name: value`` or vLLM's
  ``Name=value``; ``Authorization:`` anywhere): every value but those of a few harmless headers
  (Content-Type, Accept, …), because custom auth headers have any name; ``Authorization`` keeps its
  scheme (``Bearer ***``);
- URLs: the userinfo's password (``user:***@``, or ``***@`` for a bare token) and secret-named query
  parameters (``?api_key=***``); ``-u``/``--user user:pw`` keeps the user;
- JSON/dict fields with a secret name (``{"api_key": "***"}``);
- and, wherever they stand, well-known key shapes (``sk-…``, ``hf_…``, ``ghp_…``, AWS ``AKIA…``, JWTs).
A boolean flag with a secret name (``--no-auth``) costs the next item its value: hiding too much is the
safe mistake.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sparkwatch.defaults import CONTROL_CHARS_RE, MAX_RUN_NAME_CHARS
from sparkwatch_agent.shared.strict_text import utf8_escaped

MASK = "***"

_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_SECRET_WORDS = frozenset(
    {
        "pass",
        "passphrase",
        "pwd",
        "bearer",
        "authorization",
        "credential",
        "credentials",
        "cred",
        "creds",
        "cookie",
        "sig",
        "signature",
    }
)
_SECRET_ENDINGS = ("key", "token", "secret", "password", "passwd", "auth")
#: Headers whose values say how a request was made, never who made it.
HARMLESS_HEADERS = frozenset(
    {
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "cache-control",
        "connection",
        "content-encoding",
        "content-length",
        "content-type",
        "expect",
        "host",
        "pragma",
        "user-agent",
        "x-request-id",
        "x-sparkwatch-phase",
    }
)
HEADER_FLAGS = frozenset({"-H", "--header", "--proxy-header"})
USER_FLAGS = frozenset({"-u", "--user", "--proxy-user", "-U"})
ENV_OPTIONS_WITH_VALUE = frozenset({"-u", "--unset", "-C", "--chdir"})

_Q = r"(?:\"[^\"]*\"|'[^']*'|[^\s'\"]*)"  # a value: quoted, or up to the next space or quote
# Names are bounded and possessive (``{0,127}+``) and patterns start only where a word does: each starting
# point costs a bounded amount, so even a megabyte of request body on the command line is redacted in
# linear time.
_START = r"(?<![^\s;&|(`'\"])"  # at the start of the text or of a shell word
_NAME = r"[A-Za-z][\w.-]{0,127}+"
_USERINFO = re.compile(r"(?P<scheme>(?<![\w+.-])[A-Za-z][A-Za-z0-9+.-]{0,31}+://)(?P<info>[^/?#@\s'\"]++)@")
_QUERY = re.compile(r"(?P<lead>[?&;])(?P<name>[^=&#?;\s'\"]{1,128}+)=(?P<value>[^&#\s'\"]*+)")
_ASSIGN = re.compile(
    r"(?<![^\s;&|(`'\"=,])(?P<name>_?" + _NAME + r")(?P<eq>:?==?)(?P<value>\"[^\"]*\"|'[^']*'|[^\s;&|'\"]*)"
)
_FLAG_EQ = re.compile(_START + r"(?P<name>--?" + _NAME + r")(?P<eq>=)(?P<value>" + _Q + ")")
_FLAG_SPACE = re.compile(_START + r"(?P<name>--?" + _NAME + r")(?P<eq>\s+)(?P<value>" + _Q + ")")
_HEADER_IN_TEXT = re.compile(
    _START
    + r"(?P<flag>-H|--header|--proxy-header)(?P<sep>\s*=?\s*)(?P<q>[\"'])?(?P<header>(?(q)[^\"']*|\S+))"
)
_USER_IN_TEXT = re.compile(
    _START + r"(?P<flag>-u|--user|--proxy-user|-U)(?P<sep>\s+|=)?(?P<user>[^\s:'\"]+):(?P<pw>[^\s'\"]+)"
)
_AUTHORIZATION = re.compile(
    r"(?i)\b(?P<name>(?:proxy-)?authorization)(?P<sep>[\"']?\s*[:=]\s*[\"']?)"
    r"(?P<scheme>(?:bearer|basic|token|digest|apikey)\s+)?(?P<value>[^\s'\",}]+)"
)
_JSON_FIELD = re.compile(
    r"(?P<q>[\"'])(?P<name>[^\"'\\\n]{1,128})(?P=q)(?P<sep>\s*:\s*)(?P<vq>[\"'])"
    r"(?P<value>(?:\\.|(?!(?P=vq))[^\\])*)(?P=vq)"
)
_KNOWN_SHAPES = re.compile(
    r"(?<![\w-])(?:sk-[A-Za-z0-9_-]{20,}|hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_\w{20,}|glpat-[\w-]{20,}|nvapi-[\w-]{20,}|xox[abprs]-[\w-]{10,}|AKIA[0-9A-Z]{16}"
    r"|gsk_[A-Za-z0-9]{20,}|pplx-[A-Za-z0-9]{20,}|r8_[A-Za-z0-9]{20,}|xai-[A-Za-z0-9]{20,}"
    r"|AIza[\w-]{35}|eyJ[\w-]{8,}+\.[\w-]{8,}+\.[\w-]{8,}+)"
)
_HEADER = re.compile(r"(?P<name>[A-Za-z0-9][\w.-]{0,127}+)(?P<sep>\s*[:=])(?P<value>(?!//).*)", re.DOTALL)
_ASSIGNMENT_WORD = re.compile(r"[A-Za-z_]\w*=")


def secret_name(name: str) -> bool:
    """Does a variable, flag, header, parameter or JSON key of this name hold a secret?"""
    for word in _WORDS.findall(name):
        low = word.lower()
        if low in _SECRET_WORDS or low.endswith(_SECRET_ENDINGS):
            return True
    return False


def redact_header(header: str) -> str:
    """``Name: value`` (or ``Name=value``) with the value hidden unless the header is a harmless one."""
    match = _HEADER.fullmatch(header)
    if match is None:  # not a header (a file reference, a URL): the text rules still apply
        return redact_text(header)
    name, value = match["name"], match["value"]
    if name.lower() in HARMLESS_HEADERS:
        return header
    lead = value[: len(value) - len(value.lstrip())]
    scheme, space, _rest = value.strip().partition(" ")
    kept = f"{scheme} " if space and name.lower().endswith("authorization") else ""
    return f"{name}{match['sep']}{lead}{kept}{MASK}"


def _mask_if_secret(match: re.Match[str]) -> str:
    if not secret_name(match["name"]):
        return match[0]
    return match[0][: match.start("value") - match.start()] + MASK


def _userinfo(match: re.Match[str]) -> str:
    user, colon, _password = match["info"].partition(":")
    return f"{match['scheme']}{user}:{MASK}@" if colon else f"{match['scheme']}{MASK}@"


def _query(match: re.Match[str]) -> str:
    return f"{match['lead']}{match['name']}={MASK}" if secret_name(match["name"]) else match[0]


def _header_in_text(match: re.Match[str]) -> str:
    return f"{match['flag']}{match['sep']}{match['q'] or ''}{redact_header(match['header'])}"


def _json_field(match: re.Match[str]) -> str:
    if not secret_name(match["name"]):
        return match[0]
    scheme, space, _rest = match["value"].partition(" ")
    kept = f"{scheme} " if space and match["name"].lower().endswith("authorization") else ""
    return f"{match['q']}{match['name']}{match['q']}{match['sep']}{match['vq']}{kept}{MASK}{match['vq']}"


_TEXT_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (_HEADER_IN_TEXT, _header_in_text),
    (_AUTHORIZATION, lambda m: m[0][: m.start("value") - m.start()] + MASK),
    (_USER_IN_TEXT, lambda m: f"{m['flag']}{m['sep'] or ''}{m['user']}:{MASK}"),
    (_USERINFO, _userinfo),
    (_QUERY, _query),
    (_JSON_FIELD, _json_field),
    (_FLAG_EQ, _mask_if_secret),
    (_FLAG_SPACE, _mask_if_secret),
    (_ASSIGN, _mask_if_secret),
    (_KNOWN_SHAPES, lambda _m: MASK),
)


def redact_text(text: str) -> str:
    """One string (an argv item, a shell script, a run name) with every secret the rules find hidden."""
    for pattern, replace in _TEXT_RULES:
        text = pattern.sub(replace, text)
    return text


def _mask_user(value: str) -> str:
    user, colon, _password = value.partition(":")
    return f"{user}:{MASK}" if colon else redact_text(value)


def _redact_item(arg: str) -> tuple[str, Callable[[str], str] | None]:
    """One argv item, and how the next one is to be redacted when this one is a flag that takes it."""
    if arg in HEADER_FLAGS:
        return arg, redact_header
    if arg in USER_FLAGS:
        return arg, _mask_user
    flag, eq, value = arg.partition("=")
    if eq and flag in HEADER_FLAGS:
        return f"{flag}={redact_header(value)}", None
    if eq and flag in USER_FLAGS:
        return f"{flag}={_mask_user(value)}", None
    if arg.startswith("-H") and not arg.startswith("--") and len(arg) > 2:
        return f"-H{redact_header(arg[2:])}", None
    if arg.startswith("-") and not eq and secret_name(arg.lstrip("-")):
        return arg, lambda _value: MASK
    name, colon, _rest = arg.partition(":")
    if colon and re.fullmatch(r"[A-Za-z][\w-]*", name) and secret_name(name):
        return redact_header(arg), None  # httpie's ``X-Api-Key:value`` items
    return redact_text(arg), None


def redact_argv(argv: Sequence[str]) -> list[str]:
    """argv as it may be published: every item through the rules above, and the item after a flag that
    takes a secret (``--api-key X``, ``-H X``, ``-u X``) through that flag's rule; bytes that are not
    UTF-8 (a file name in another encoding) as ``\\xff`` text, since JSON cannot carry them as they
    come (surrogate-escaped: the run's end was refused, and its export lost)."""
    out: list[str] = []
    pending: Callable[[str], str] | None = None
    for arg in map(utf8_escaped, argv):
        if pending is not None:
            out.append(pending(arg))
            pending = None
            continue
        item, pending = _redact_item(arg)
        out.append(item)
    return out


def default_name(redacted: Sequence[str]) -> str:
    """The program and its leading words (``lmx speed-test run sglang``), never its option values; a
    leading ``env`` and its assignments are passed over (``env HF_TOKEN=… vllm bench serve`` is ``vllm
    bench serve``). Give it the *redacted* argv: a leading word may still be a URL with a password."""
    words = list(redacted)
    if Path(words[0]).name == "env":
        rest = words[1:]
        while rest and (rest[0].startswith("-") or _ASSIGNMENT_WORD.match(rest[0])):
            rest = rest[2:] if rest[0] in ENV_OPTIONS_WITH_VALUE else rest[1:]
        words = rest or words
    name = [Path(words[0]).name]
    for arg in words[1:5]:
        if arg.startswith("-"):
            break
        name.append(arg)
    return CONTROL_CHARS_RE.sub(" ", " ".join(name))[:MAX_RUN_NAME_CHARS]  # a name is one line


def command_record(argv: Sequence[str], exit_code: int | None) -> dict[str, Any] | None:
    """What a run's end records of the command it wrapped: its argv, redacted, and exit code; None when it
    never ran."""
    return None if exit_code is None else {"argv": redact_argv(argv), "exit_code": exit_code}
