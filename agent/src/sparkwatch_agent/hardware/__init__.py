"""The only code that touches the machine: NVML, /proc/meminfo, hwmon, host facts, and the simulated GB10."""
