"""Auth, backoff, systemd notify and HTTP helpers: the only agent code the sparkwatch distribution reuses."""
