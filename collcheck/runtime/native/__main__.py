"""`python -m collcheck.runtime.native build`: native_recorder's command line, under the name the
README gives (see __init__.py)."""

import sys

from collcheck.runtime.native_recorder import main

raise SystemExit(main(sys.argv[1:]))
