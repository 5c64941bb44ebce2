"""What each CLI subcommand does: run, demo, attach, hardware, nodes check, the summary table, sim-model."""
