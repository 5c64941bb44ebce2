"""An hwmon energy accumulator's raw count (µJ) as monotonic joules since the agent started: through
wrap-around (spbm's 32-bit accumulators wrap after ≈12 h at 100 W), resets and read jitter."""

from __future__ import annotations

#: Moduli tried, smallest first, when an accumulator goes backwards: 32-bit counts of µJ or of mJ, 64-bit.
WRAP_MODULI = (2**32, 2**32 * 1000, 2**64)
#: The most power a wrap may stand for (a whole node's plausible most, as the coordinator's check): what a
#: counter adds across a wrap is at most this much times the time since the last reading, else a reset.
MAX_WRAP_W = 20_000.0


class EnergyAccumulator:
    """Monotonic joules from a raw µJ counter that may wrap or reset, each reading with the monotonic time
    it was taken at (what a wrap may have added is bounded by the time since the last reading)."""

    def __init__(self) -> None:
        self._last_raw: int | None = None
        self._last_s = 0.0  # when the base reading was taken
        self.total_j = 0.0

    def update(self, raw_uj: int, t_s: float) -> float:
        last = self._last_raw
        if last is None:
            self._last_raw, self._last_s = raw_uj, t_s
            return self.total_j
        delta = raw_uj - last
        if 0 > delta >= -max(1_000_000, last // 1000):
            # a small step back is read jitter (≤ 1 J or 0.1 %), not a wrap or a reset: the higher reading
            # stays the base, or the way back up to it would be counted a second time
            return self.total_j
        elapsed_s, self._last_raw, self._last_s = t_s - self._last_s, raw_uj, t_s
        if delta < 0:
            delta = self._after_step_back(last, raw_uj, elapsed_s)
        self.total_j += delta / 1e6
        return self.total_j

    @staticmethod
    def _after_step_back(last: int, raw: int, elapsed_s: float) -> int:
        """What a counter that went back from ``last`` to ``raw`` added: a wrap adds what was left below its
        modulus plus the new count; a reset (the driver counting from zero again) the new count. A wrap is
        taken where the modulus is the smallest above ``last``, ``last`` was in its upper half, and what it
        adds is no more than MAX_WRAP_W could draw in the time since the last reading (a reset read as a
        wrap of spbm's 2^32 mJ added up to 2.1 MJ that never happened)."""
        modulus = next((m for m in WRAP_MODULI if m > last), None)
        if modulus is None or last <= modulus // 2:
            return raw
        wrapped = raw + modulus - last
        return wrapped if wrapped <= max(elapsed_s, 0.0) * MAX_WRAP_W * 1e6 else raw
