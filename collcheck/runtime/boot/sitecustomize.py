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
    """Run the sitecustomize this one shadows and leave it as `sys.modules["sitecustomize"]`, so
    `import sitecustomize` finds the user's module and its attributes, as without collcheck."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    ours = sys.modules.get(__name__)
    sys.modules["sitecustomize"] = module  # as an import would: the module may import itself
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if ours is not None:  # site.py reports the user's error; ours stays, as it ran fine
            sys.modules["sitecustomize"] = ours
        raise


try:
    _arm()
except Exception as error:  # never stop the user's program from starting
    sys.stderr.write(f"collcheck: tracer not armed: {type(error).__name__}: {error}\n")
_chain()
