"""The POST requests the proxy relayed to paths it makes no window for, said when it closes: a harness on
an API the proxy does not read (a server's native endpoint, say) was measured as nothing, and before this
nothing said why."""

from __future__ import annotations

#: How many paths are named; the rest are counted together (a path may hold an id: the list stays short).
NAMED_PATHS = 8
#: What the proxy times (proxy.GENERATION_SUFFIXES), in words.
TIMED = (
    "chat and text completions (…/chat/completions, …/completions, llama.cpp's /completion), …/responses"
    " and …/v1/messages"
)


class UntimedPosts:
    """POST requests relayed without a window, by path (GET and other methods fetch, they do not generate)."""

    def __init__(self) -> None:
        self.by_path: dict[str, int] = {}
        self.others = 0  # to paths past the first NAMED_PATHS

    def seen(self, method: str, path: str) -> None:
        if method != "POST":
            return
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
            f" {TIMED}; a harness on another API is not measured through it (import its result file instead)"
        )
