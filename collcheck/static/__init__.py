"""The static analyzer: extract (ast -> per-function programs) -> symbolic -> solve -> divergences,
which collcheck.classify turns into the rules' findings (this package names no rule)."""
