"""Per-stage unit tests of `collcheck/static/` (see docs/architecture.md)."""
