"""A lab from its text source to its release, and the checks a lab's author runs before a
term: ``python -m graders.build`` (``make build``; `build`: ``build``, ``source_notebook``)
writes nbgrader's source notebooks (the labs' shared fragments put in by `includes`), the
student release in labs/ and the README's lab table, and has the sandbox make the grader's
reference records; the demo class (`demo`, ``python -m graders.build.demo``, ``make demo``)
and the mistake catalogue (`catalogue`, ``python -m graders.build.catalogue``) grade a lab's
declared students and compare their scores. The top of the grader: it may import every other
package, and none imports it."""

__all__ = ["build", "catalogue", "demo", "includes"]
