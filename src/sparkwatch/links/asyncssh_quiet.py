"""asyncssh, imported without the warnings its own type hints raise.

asyncssh (2.24 and before) names cryptography's DSA key classes in module-level annotations, and
cryptography 51 warns on each such access (``CryptographyDeprecationWarning: DSA is deprecated``, a
``UserWarning``): five two-line warnings on stderr for every command that may dial a node, before its own
one-line answer, about nothing sparkwatch does (it never makes or asks for a DSA key). Only that message
is silenced, and only while asyncssh is imported.
"""

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="DSA is deprecated", category=UserWarning)
    import asyncssh

__all__ = ["asyncssh"]
