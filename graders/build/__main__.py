"""``python -m graders.build`` (``make build``): the labs' release (graders/build/build.py)."""

import sys

from graders.build import build

if __name__ == "__main__":
    sys.argv[0] = build.__file__  # as when build.py itself was run: its usage line names it
    raise SystemExit(build.main())
