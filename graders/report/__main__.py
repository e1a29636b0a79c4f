"""``python -m graders.report`` (``make report``): the class report (graders/report/report.py)."""

import sys

from graders.report import report

if __name__ == "__main__":
    sys.argv[0] = report.__file__  # as when report.py itself was run: its usage line names it
    sys.exit(report.main())
