"""The course's settings, read by every other package and importing none of them: where the
course's folders and labs are and the data a lab reads (`course`: ``REPO``, ``LABS``,
``lab_source``, ``notebooks``, ``prepare_data``, the setting ``c.CourseData.root``), where the
course is published and its Open-in-Colab links (`colab`, from course.toml), and how nbgrader
is run on the course, as a command or through its Python API in this process
(`nbgrader_cli`). The grading steps themselves are configured in nbgrader_config.py at the
repository's root."""

__all__ = ["colab", "course", "nbgrader_cli"]
