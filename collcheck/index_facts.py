"""The cross-file index's facts of a run's files (`static.project.file_facts`), each read once.

In: the run's files (real paths), the catalog, the settings, a worker count and, for a partial
run, the files it checks and the project's module names. Out: path -> `FileFacts`, from the cache
where a file's size and modification time are unchanged, otherwise computed (by worker processes
when there are enough files). A partial run reads only the files its own files reach
(`project.files_reached`, any number of steps): each batch's successors go to the workers as soon
as the batch comes back, so that no worker waits for one step of the reach to end.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from pathlib import Path

from collcheck.catalog import Catalog, settings_catalog
from collcheck.config import Settings
from collcheck.findings import FileError
from collcheck.source import MAX_SOURCE_BYTES, read_source
from collcheck.static.prefilter import rank_words
from collcheck.static.project import FileFacts, Resolver, resolver_for

PARALLEL_FACTS_FROM = 200  # below this, starting worker processes costs more than it saves
REACH_BATCH = 16  # files a worker reads at a time while the reach is followed
Successors = Callable[[str, FileFacts], Iterable[str]]


def facts_of(path: str, catalog: Catalog) -> FileFacts:
    from collcheck.static.prefilter import trigger_pattern
    from collcheck.static.project import file_facts, unreadable_facts

    source = read_source(Path(path), MAX_SOURCE_BYTES)
    if isinstance(source, FileError):
        return unreadable_facts()
    return file_facts(source.text, trigger_pattern(catalog), rank_words(catalog))


def _facts_job(args: tuple[list[str], Settings]) -> list[FileFacts]:
    paths, settings = args
    catalog = settings_catalog(settings)
    return [facts_of(path, catalog) for path in paths]


def _load_the_engine() -> None:
    """Import the engine, the rules and z3 in this process, which otherwise waits for the index workers:
    each analysis worker forked later then starts with them (about 0.3 s of imports a worker)."""
    import z3  # noqa: F401

    import collcheck.classify
    import collcheck.static.engine  # noqa: F401


def read_facts(
    paths: list[str],
    catalog: Catalog,
    settings: Settings,
    jobs: int,
    modules: list[tuple[str, str]] | None = None,
    checked: list[str] | None = None,
    resolver: Resolver | None = None,
) -> dict[str, FileFacts]:
    """Each file's facts, or with `checked` (among `paths`; `modules` given) those of the checked
    files and of every file they reach through imports and calls: pre-commit on two files of a
    large project, or one folder of it, reads what those files reach, not the whole tree.
    `resolver` (`project.resolver_for` the paths): the reach's, to hand on to `build_project`."""
    from collcheck.cache import load_facts, store_facts

    known, stored = load_facts(settings, catalog.fingerprint, paths)
    parallel = jobs > 1 and len(paths) - len(known) >= PARALLEL_FACTS_FROM
    pool = _pool(jobs) if parallel else None
    reader = _Reader(known, catalog, settings, pool)
    try:
        if checked is None or modules is None:
            size = max(1, min(64, -(-(len(paths) - len(known)) // (4 * jobs))))  # a few batches a worker
            found = reader.read(paths, lambda path, facts: (), size)
        else:
            reach = _reach(resolver or resolver_for(modules, paths))
            found = reader.read(list(dict.fromkeys(checked)), reach, REACH_BATCH)
    finally:
        if pool is not None:
            pool.shutdown()
    if reader.fresh:
        store_facts(settings, catalog.fingerprint, reader.fresh, stored)
    return {path: found[path] for path in paths if path in found}  # in the run's order


def _pool(jobs: int) -> Executor:
    import concurrent.futures

    return concurrent.futures.ProcessPoolExecutor(max_workers=jobs)


def _reach(resolver: Resolver) -> Successors:
    from collcheck.static.project import files_reached

    return lambda path, facts: sorted(files_reached(path, facts, resolver))


class _Reader:
    """Facts from the cache as they are, the others computed in this process or by `pool`;
    `fresh` collects what was computed (for the cache)."""

    def __init__(
        self, known: dict[str, FileFacts], catalog: Catalog, settings: Settings, pool: Executor | None
    ) -> None:
        self.known = known
        self.catalog = catalog
        self.settings = settings  # what a worker process needs to load the same catalog
        self.pool = pool
        self.fresh: dict[str, FileFacts] = {}
        self.engine_loading = pool is not None

    def read(self, start: list[str], successors: Successors, batch_size: int) -> dict[str, FileFacts]:
        """The facts of `start` and of every file `successors` leads to, any number of steps."""
        found: dict[str, FileFacts] = {}
        seen = set(start)
        todo = deque(start)
        running: dict[Future[list[FileFacts]], list[str]] = {}

        def take(path: str, facts: FileFacts) -> None:
            found[path] = facts
            for other in successors(path, facts):
                if other not in seen:
                    seen.add(other)
                    todo.append(other)

        while todo or running:
            missing = []
            while todo:
                path = todo.popleft()
                cached = self.known.get(path)
                if cached is not None:
                    take(path, cached)
                else:
                    missing.append(path)
            if self.pool is None:
                for path in missing:
                    take(path, self._computed(path, facts_of(path, self.catalog)))
                continue
            for index in range(0, len(missing), batch_size):
                batch = missing[index : index + batch_size]
                running[self.pool.submit(_facts_job, (batch, self.settings))] = batch
            if self.engine_loading:  # while the workers read: the analysis workers are forked from here
                self.engine_loading = False
                _load_the_engine()
            if running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    for path, facts in zip(running.pop(future), future.result(), strict=True):
                        take(path, self._computed(path, facts))
        return found

    def _computed(self, path: str, facts: FileFacts) -> FileFacts:
        self.fresh[path] = facts
        return facts
