"""Third-party code vendored for parity tests only (each file names its source and licence)."""
