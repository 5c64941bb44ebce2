"""NVML through nvidia-ml-py: the wrapper-based probe, direct polling, and the return codes."""
