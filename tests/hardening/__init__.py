"""Hardening: fuzzing of every file rlx reads, hostile inputs, crash safety, integrity at
scale and concurrency (docs/reliability.md says what is promised and how it is tested)."""
