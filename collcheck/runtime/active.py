"""The running tracer, as the wrappers installed at interpreter start find it.

adapters.py, backends.py and groups.py wrap communicator methods and group creators before torch is
imported; each wrapped call asks `active_tracer()` whether a tracer runs. In: nothing. Out: the
active `tracer.Tracer`, or None. It imports nothing: no tracer module loaded means none runs, and
this module stays cheap enough for sitecustomize.
"""

from __future__ import annotations

import sys
from typing import Any

TRACER_MODULE = "collcheck.runtime.tracer"


def active_tracer() -> Any:
    """The running tracer, or None, without importing anything."""
    module = sys.modules.get(TRACER_MODULE)
    return module.active() if module is not None else None
