"""The static analyzer: extract (ast -> per-function programs) -> symbolic -> solve -> checks."""
