"""The class report (``python -m graders.report``, ``make report``; `report`: ``main``): what
the class got wrong and how long grading took, read from the gradebook and the grading log
after any class run (`report_data`: ``ClassData``), computed (`report_numbers`), drawn
(`report_charts`) and written as pages (`report_page`, `report_labs`, `report_html`) with the
wide grades table for an LMS. Imports the formats and the course's settings only: nothing of
grading (no sandbox, judge, class run or build), and no Dask or nbclient."""

__all__ = [
    "report",
    "report_charts",
    "report_data",
    "report_html",
    "report_labs",
    "report_numbers",
    "report_page",
]
