"""Fixes, suppressions written into the source, and what both share.

Only imported when a fix or `--add-ignore` is asked for. The modules that rewrite code with
libcst (`engine`, the per-rule fixers in `registry`) import it themselves; `ignore` and `textio`
do not need it, so `--add-ignore` never loads it.

    textio    read and write a file byte for byte (encoding, BOM and line endings kept)
    edits     a rewrite as the minimal edit, and applying edits to text
    ignore    `--add-ignore`: `# collcheck: ignore[CCxxx]` where the suppression is read
    engine    propose, verify (re-check) and apply fixes; unified diffs
    registry  rule code -> fixers; one module per fix kind (set_order, hoist, root, ...)
"""
