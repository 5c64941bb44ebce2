"""The run report: one self-contained HTML page (and static images) per run, built from an export alone."""
