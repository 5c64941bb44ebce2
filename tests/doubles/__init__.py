"""Test doubles: the fake libnvidia-ml.so.1 (compiled per session) and a pynvml-shaped fake for the seam."""
