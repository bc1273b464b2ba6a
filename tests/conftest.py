"""Fixtures shared by the test modules of this folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from collcheck import index_facts
from collcheck.catalog import Catalog
from collcheck.static.project import FileFacts


@pytest.fixture
def facts_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files whose index facts are computed (not taken from the cache) during
    the test, in order: a test reads the list it is given."""
    read: list[str] = []
    real = index_facts.facts_of

    def recording(path: str, catalog: Catalog) -> FileFacts:
        read.append(Path(path).name)
        return real(path, catalog)

    monkeypatch.setattr(index_facts, "facts_of", recording)
    return read
