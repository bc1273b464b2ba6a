"""Put first on PYTHONPATH by `collcheck run`: arms the tracer in every Python process of the job.

It then runs the sitecustomize it shadows, if any, so the environment's own customisation still
happens. Nothing here imports torch.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _arm() -> None:
    if os.environ.get("COLLCHECK_TRACE") != "1":
        return
    try:
        import collcheck.runtime.bootstrap as bootstrap
    except ImportError:
        home = os.environ.get("COLLCHECK_HOME")
        if not home:
            return
        sys.path.append(home)
        import collcheck.runtime.bootstrap as bootstrap
    bootstrap.arm()


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


try:
    _arm()
except Exception as error:  # never stop the user's program from starting
    sys.stderr.write(f"collcheck: tracer not armed: {type(error).__name__}: {error}\n")
_chain()
