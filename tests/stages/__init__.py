"""Per-stage unit tests of `collcheck/static/` (see docs/architecture.md, "The stages of
`collcheck/static/`"): one file per stage, named after its module, each driving that stage alone
through its public entry point and asserting what it returns.

Stages whose unit tests were written earlier and live beside this folder: `launchers`
(tests/test_static_units.py), `reexports` (tests/test_object_receivers.py), `comprehensions`
(tests/test_p2p_schedule.py), `handoff` (tests/test_handoff.py), `object_protocols`
(tests/test_object_protocols.py), `package_summaries` (tests/test_package_summaries.py), summary
reuse across call sites (tests/test_summaries.py). `engine` is the fixture suite's
(tests/test_fixtures.py).
"""
