"""``python -m graders.grade`` (``make autograde``): grade the class (graders/grade/grade.py)."""

import sys

from graders.grade import grade

if __name__ == "__main__":
    sys.argv[0] = grade.__file__  # as when grade.py itself was run: its usage line names it
    sys.exit(grade.main())
