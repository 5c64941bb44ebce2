"""Python values to numpy columns without holding the GIL for the whole conversion.

``np.array`` over a list of 500 000 items is one C call of 50–300 ms, during which no other thread (the
coordinator's event loop) runs. ``np.fromiter`` over a generator executes a bytecode step per item, and the
interpreter may hand the GIL over between steps; the result is the same array.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def int_column(values: Iterable[int], count: int = -1) -> I64:
    """``np.array(list(values), dtype=np.int64)``, with turns for other threads; ``count`` when known."""
    return np.fromiter((v for v in values), dtype=np.int64, count=count)
