"""Which requests the proxy makes a window for, and the POST requests it relayed to other paths, said when
it closes: a harness on an API the proxy does not read was measured as nothing, and before this nothing
said why."""

from __future__ import annotations

from aiohttp import web

from sparkwatch.defaults import CONTROL_CHARS_RE

#: The OpenAI paths (``/v1/chat/completions``, ``/v1/completions``, ``/v1/responses``; llama.cpp serves them
#: without ``/v1`` too), llama.cpp's own (``/completion``) and ``/v1/messages``.
GENERATION_SUFFIXES = (
    "/chat/completions",
    "/completions",
    "/completion",
    "/responses",
    "/v1/messages",
)
#: Paths timed as they are, not as endings: SGLang's native endpoint (``/api/generate``, Ollama's, and
#: Triton's ``/v2/models/M/generate`` answer in other shapes).
GENERATION_PATHS = frozenset({"/generate"})
#: What the proxy times (GENERATION_SUFFIXES and GENERATION_PATHS), in words.
TIMED = (
    "chat and text completions (…/chat/completions, …/completions, llama.cpp's /completion), …/responses,"
    " …/v1/messages and SGLang's /generate"
)
#: How many paths are named; the rest are counted together (a path may hold an id: the list stays short).
NAMED_PATHS = 8


def generation(request: web.Request) -> bool:
    """A request that makes a window: a completion, a chat completion, a response, a message, a generation."""
    path = request.path
    return request.method == "POST" and (path.endswith(GENERATION_SUFFIXES) or path in GENERATION_PATHS)


class UntimedPosts:
    """POST requests relayed without a window, by path (GET and other methods fetch, they do not generate)."""

    def __init__(self) -> None:
        self.by_path: dict[str, int] = {}
        self.others = 0  # to paths past the first NAMED_PATHS

    def seen(self, method: str, path: str) -> None:
        if method != "POST":
            return
        path = CONTROL_CHARS_RE.sub("?", path)  # decoded: a %0A would break the log's line
        if path in self.by_path or len(self.by_path) < NAMED_PATHS:
            self.by_path[path] = self.by_path.get(path, 0) + 1
        else:
            self.others += 1

    def said(self) -> str | None:
        """The line for the log, or None where every POST made a window."""
        if not self.by_path:
            return None
        total = sum(self.by_path.values()) + self.others
        named = ", ".join(f"{path} ×{count}" for path, count in self.by_path.items())
        more = f", {self.others} to other paths" if self.others else ""
        return (
            f"the proxy relayed {total} POST request(s) it made no window for ({named}{more}): it times"
            f" {TIMED}; any of these that generated was not measured (a harness on another API: import its"
            " result file instead)"
        )
