"""sparkwatch: measured power and memory for LLM benchmark runs (coordinator, analysis core, CLI)."""

import time

__version__ = "0.1.0"
#: When this process began running sparkwatch's code (monotonic ns), before any of its imports: what
#: `runs mark … end` dates its window's end back to, so its own start-up is not counted as the request's.
#: Taken here, after the interpreter's exec, not from the kernel's start time of the process: that is its
#: fork's, and a shell that execs its last command in its own process (`bash -c 'a; b'`) forked long before.
STARTED_MONO_NS = time.monotonic_ns()
