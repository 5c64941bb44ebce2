"""The sampling loop and what it keeps: samples, the bounded ring, the snapshot, interval leases."""
