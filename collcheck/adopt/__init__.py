"""Adopting collcheck on existing code: fixes, suppressions written into the source, baselines.

`collcheck check --fix/--diff/--show-fixes/--unsafe-fixes`, `--add-ignore` and
`--baseline/--write-baseline` all run after the check, through `flow.adopt`. A plain check imports
only `request` (its options carry an `Adoption`); the rest is imported when asked for. The modules
that rewrite code with libcst (`rewrite`, `blocks`, `fixes`, `fixers`) import it themselves;
`--add-ignore` and the baseline never load it.

    request   the options (`Adoption`) and the error every step raises (`AdoptionError`)
    flow      what runs after the check: baseline, suppressions, fixes (never prints)
    baseline  record today's findings by fingerprint; report only new ones
    ignore    `--add-ignore`: `# collcheck: ignore[CCxxx]` where the suppression is read
    textio    read and write a file byte for byte (encoding, BOM and line endings kept)
    edits     a rewrite as the minimal edit, and applying edits to text
    rewrite   what a fixer gets (`Source`, the parsed file) and returns (`Rewrite`)
    blocks    what the statement-moving fixers share: the statement at a finding, its block
    fixes     propose, verify (re-check) and apply fixes; unified diffs
    fixers    one module per kind of fix, each declaring its rule and the variants it handles
"""
