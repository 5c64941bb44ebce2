"""Helpers several test folders share: real processes started on loopback and the calls they answer."""
