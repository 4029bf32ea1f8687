"""What reaches feedback/: the grader's pages only, each built within a budget.

**Learner files never become feedback.** nbgrader's ``GenerateFeedback`` (``BaseConverter.init_assignment``)
copies every non-notebook file of autograded/<student>/<assignment>/ (and autograded/ holds every file the
learner submitted beside the notebook) into feedback/<student>/<assignment>/, and ``nbgrader
release_feedback`` hands out every ``*.html`` there: a learner's ``evil.html`` with a ``<script>`` would be
released, and opened by the instructor. ``FeedbackConverter`` (what ``generate_feedback`` runs) copies only
``KEPT_FILES`` (what release_feedback reads beside the pages: the canonical timestamp.txt intake wrote and
nbgrader's submission_secret.txt, each a small regular file), and ``clean_folder`` then removes anything
else in that folder but the notebooks' pages. ``sweep`` does the same, at the start of every grading run,
for every learner's folder of the assignment: it removes what an earlier run, plain ``nbgrader
generate_feedback`` or an older nbgrader left there. Everything in feedback/ is derived (nbgrader rebuilds
it from autograded/ and the gradebook), and the files removed are copies of learner files whose original
stays in submitted/; ``sweep`` only enters real folders (never a link) under the course's feedback
directory, and refuses to work at all if that directory is, or holds, submitted/, autograded/, source/,
release/ or the gradebook.

**Budgets.** A feedback worker builds one learner's pages under ``Budget``: ``GradeConfig.submission_seconds``
of CPU (a profiling timer raises ``OverBudget`` in the worker: even a regular expression stops, CPython's
checks signals), then the kernel's RLIMIT_CPU kills the worker a grace later if it is stuck where Python
cannot interrupt it, and ``GradeConfig.submission_memory`` of address space (RLIMIT_AS: MemoryError). A
learner over budget gets ``write_plain_pages``: one escaped page per notebook with their scores, comments
and grading notes (read from the gradebook, a few milliseconds) and a note saying why. The coordinator
(``grader.grading.run.pipeline``) writes the same page for a learner whose worker had to be killed.
"""
from __future__ import annotations

import functools
import html
import math
import os
import resource
import shutil
import signal
import stat
from pathlib import Path

KEPT_FILES = ("timestamp.txt", "submission_secret.txt")  # release_feedback reads both beside the pages
MAX_KEPT_FILE_BYTES = 4096
CPU_GRACE_SECONDS = 10  # after the soft limit, before the kernel kills a worker Python could not interrupt
MAX_NOTE_CHARS = 2000
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class OverBudget(BaseException):
    """A learner's feedback went over its budget. Not an Exception: nbgrader's converter catches every
    Exception per assignment (and would only log it); this one reaches ``grader.grading.run.pipeline``."""


# --- only the grader's pages -------------------------------------------------------------------


def page_names(notebooks) -> set[str]:
    return {f"{notebook}.html" for notebook in notebooks}


def _clean_fd(folder: int, keep: set[str]) -> list[str]:
    """Remove every entry of the open folder but the regular files named in ``keep``; links are removed,
    never followed; returns the names removed."""
    removed = []
    for name in sorted(os.listdir(folder)):
        try:
            mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
        except FileNotFoundError:
            continue
        if name in keep and stat.S_ISREG(mode):
            continue
        if stat.S_ISDIR(mode):
            shutil.rmtree(name, dir_fd=folder)  # Linux: fd-based, never follows a link inside
        else:
            os.unlink(name, dir_fd=folder)
        removed.append(name)
    return removed


def clean_folder(folder: Path, notebooks) -> list[str]:
    """Leave in feedback/<student>/<assignment>/ only the notebooks' pages and KEPT_FILES (regular files)."""
    try:
        fd = os.open(folder, FOLDER_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return []
    try:
        return _clean_fd(fd, page_names(notebooks) | set(KEPT_FILES))
    finally:
        os.close(fd)


def _course_directory(config, root: Path):
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    coursedir = CourseDirectory(config=config if isinstance(config, Config) else Config(config or {}))
    coursedir.root = str(root)
    return coursedir


def _protected(root: Path, config) -> list[Path]:
    coursedir = _course_directory(config, root)
    paths = [Path(root) / getattr(coursedir, name) for name in
             ("submitted_directory", "autograded_directory", "source_directory", "release_directory")]
    if coursedir.db_url.startswith("sqlite:///"):
        paths.append(Path(coursedir.db_url.removeprefix("sqlite:///")))
    return [Path(os.path.realpath(p)) for p in paths]


def feedback_root(config, root: Path) -> Path | None:
    """The course's feedback directory, or None where sweeping it could touch anything else of the course."""
    folder = Path(root) / _course_directory(config, root).feedback_directory
    if folder.is_symlink() or not folder.is_dir():
        return None
    real = Path(os.path.realpath(folder))
    for other in _protected(root, config):
        if real == other or real in other.parents or other in real.parents:
            return None
    return real


def sweep(config, root: Path, assignment: str, notebooks) -> list[str]:
    """Remove from every feedback/<student>/<assignment>/ what is not a notebook's page or a KEPT_FILE;
    returns '<student>/<name>' of what was removed. Only real folders are entered; a link where a folder
    should be is removed itself (its target is never touched)."""
    base = feedback_root(config, root)
    if base is None:
        return []
    removed = []
    top = os.open(base, FOLDER_FLAGS)
    try:
        for student in sorted(os.listdir(top)):
            try:
                student_fd = os.open(student, FOLDER_FLAGS, dir_fd=top)
            except OSError:
                continue  # a file or a link: not a learner's folder
            try:
                try:
                    mode = os.stat(assignment, dir_fd=student_fd, follow_symlinks=False).st_mode
                except FileNotFoundError:
                    continue
                if not stat.S_ISDIR(mode):
                    os.unlink(assignment, dir_fd=student_fd)
                    removed.append(f"{student}/{assignment}")
                    continue
                folder = os.open(assignment, FOLDER_FLAGS, dir_fd=student_fd)
                try:
                    removed += [f"{student}/{name}" for name in _clean_fd(folder,
                                                                          page_names(notebooks) | set(KEPT_FILES))]
                finally:
                    os.close(folder)
            finally:
                os.close(student_fd)
    finally:
        os.close(top)
    return removed


def copy_kept_files(source: Path, dest: Path) -> None:
    """KEPT_FILES from autograded/ into feedback/, each only if it is a small regular file (never a link)."""
    for name in KEPT_FILES:
        try:
            fd = os.open(source / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_KEPT_FILE_BYTES:
                continue
            data = os.read(fd, MAX_KEPT_FILE_BYTES + 1)
        finally:
            os.close(fd)
        target = dest / name
        if target.is_symlink() or target.exists():
            target.unlink()
        target.write_bytes(data[:MAX_KEPT_FILE_BYTES])


@functools.cache
def exporter_class():
    """nbconvert's HTMLExporter with the feedback's speed-ups (imported at first use): templates compiled once per
    worker (``template_cache``, through the public ``environment``), common cells highlighted once and within a
    budget (``highlight_cache``, through the public ``filters`` trait), and nbconvert's accessibility pass done
    cell by cell (``soup_cache``, where ``grader.grading.seams.nbconvert`` allows it). The page is the same."""
    from nbconvert.exporters import HTMLExporter

    from grader.grading.feedback import highlight_cache, soup_cache, template_cache
    from grader.grading.seams import nbconvert as nbconvert_seam

    class FeedbackExporter(HTMLExporter):
        def from_notebook_node(self, nb, resources=None, **kw):
            if "highlight_code" not in self.filters or getattr(self, "highlights", None) is not None:
                # the lexer nbconvert itself picks (HTMLExporter.from_notebook_node), for this notebook
                info = nb.metadata.get("language_info", {})
                self.highlights = highlight_cache.highlighter_class()(
                    pygments_lexer=info.get("pygments_lexer", info.get("name", None)), parent=self)
                self.filters = {**self.filters, "highlight_code": self.highlights}
            template_cache.attach(self)
            if not nbconvert_seam.soup_pass_on():
                return super().from_notebook_node(nb, resources, **kw)
            with nbconvert_seam.without_soup_pass():
                page, resources = super().from_notebook_node(nb, resources, **kw)
            page, missing = soup_cache.accessible(page)
            if missing:
                self.log.warning("Alternative text is missing on %s image(s).", missing)
            return page, resources

    return FeedbackExporter


@functools.cache
def converter_class():
    """nbgrader's GenerateFeedback, copying only KEPT_FILES and leaving only the pages, with ``exporter_class()``
    (nbgrader's public ``exporter_class`` trait) (imported at first use)."""
    from nbgrader.converters import GenerateFeedback
    from traitlets import default

    from grader.grading.seams.nbgrader import feedback_folders

    class FeedbackConverter(GenerateFeedback):
        @default("exporter_class")
        def _exporter_class_default(self):
            return exporter_class()

        def init_assignment(self, assignment_id: str, student_id: str) -> None:
            # nbgrader's own copies every learner file of autograded/ into feedback/: only KEPT_FILES here
            source, dest = (Path(folder) for folder in feedback_folders(self, assignment_id, student_id))
            dest.mkdir(parents=True, exist_ok=True)
            clean_folder(dest, ())
            copy_kept_files(source, dest)

        def convert_single_notebook(self, notebook_filename: str) -> None:
            try:
                super().convert_single_notebook(notebook_filename)
            except MemoryError:
                raise OverBudget("memory") from None

        def set_permissions(self, assignment_id: str, student_id: str) -> None:
            names = [Path(n).stem for n in self.notebooks]
            clean_folder(Path(feedback_folders(self, assignment_id, student_id)[1]), names)
            super().set_permissions(assignment_id, student_id)

    return FeedbackConverter


# --- budgets ---------------------------------------------------------------------------------------


def _raise_over_budget(signum, frame):
    raise OverBudget("time")


class Budget:
    """CPU seconds and bytes of address space for one learner's feedback in this (worker) process.

    Soft: a profiling timer (process CPU time) raises OverBudget. Hard: RLIMIT_CPU's soft limit, set to the
    CPU used so far + ``seconds`` + CPU_GRACE_SECONDS, makes the kernel kill the worker (SIGXCPU) if Python
    never got to handle the timer. Memory: RLIMIT_AS at the current size + ``memory`` (MemoryError).
    Everything is restored on exit (soft limits only, so an unprivileged worker can restore them).
    """

    def __init__(self, seconds: float, memory: int | None, grace: int = CPU_GRACE_SECONDS) -> None:
        self.seconds, self.memory, self.grace = seconds, memory, grace
        self.saved: dict = {}

    def __enter__(self) -> "Budget":
        used = resource.getrusage(resource.RUSAGE_SELF)
        for limit, soft in ((resource.RLIMIT_CPU, math.ceil(used.ru_utime + used.ru_stime + self.seconds) + self.grace),
                            (resource.RLIMIT_AS, _address_space() + self.memory if self.memory else None)):
            if soft is None:
                continue
            old_soft, hard = resource.getrlimit(limit)
            self.saved[limit] = (old_soft, hard)
            if hard != resource.RLIM_INFINITY:
                soft = min(soft, hard)
            try:
                resource.setrlimit(limit, (soft, hard))
            except (ValueError, OSError):
                del self.saved[limit]
        signal.signal(signal.SIGPROF, _raise_over_budget)
        signal.setitimer(signal.ITIMER_PROF, self.seconds)
        return self

    def __exit__(self, *exc) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0)
        for limit, values in self.saved.items():
            try:
                resource.setrlimit(limit, values)
            except (ValueError, OSError):
                pass


def _address_space() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# --- the plain page ------------------------------------------------------------------------------


def _scores(db_url: str, assignment: str, student: str, notebook: str):
    """(score, max score, [(cell, score, max)], [(cell, comment)]) from the gradebook, or None."""
    from nbgrader.api import Gradebook

    try:
        with Gradebook(db_url) as gradebook:
            submitted = gradebook.find_submission_notebook(notebook, assignment, student)
            grades = [(g.name, g.score, g.max_score) for g in submitted.grades]
            comments = [(c.name, c.comment) for c in submitted.comments if c.comment]
            return submitted.score, submitted.max_score, grades, comments
    except Exception:  # noqa: BLE001 - no record: the page says so
        return None


def plain_page(notebook: str, why: str, notes, scores) -> str:
    """A minimal page, every learner-derived string escaped, with no script, style or link."""
    esc = lambda text: html.escape(str(text)[:MAX_NOTE_CHARS], quote=True)  # noqa: E731 - a one-line helper
    parts = ["<!DOCTYPE html>", '<html><head><meta charset="utf-8">', f"<title>{esc(notebook)}</title></head><body>",
             f"<h1>{esc(notebook)}</h1>", f"<p><strong>{esc(why)}</strong></p>"]
    if scores is None:
        parts.append("<p>No score was recorded for this notebook: ask your instructor.</p>")
    else:
        score, max_score, grades, comments = scores
        parts.append(f"<p>Score: {score:g} / {max_score:g}</p>")
        if grades:
            parts.append("<table><tr><th>cell</th><th>score</th></tr>")
            parts += [f"<tr><td>{esc(name)}</td><td>{(got or 0):g} / {(most or 0):g}</td></tr>"
                      for name, got, most in grades]
            parts.append("</table>")
        if comments:
            parts.append("<h2>Comments</h2>")
            parts += [f"<h3>{esc(name)}</h3><pre>{esc(text)}</pre>" for name, text in comments]
    if notes:
        parts.append("<h2>Grading notes</h2><ul>")
        parts += [f"<li>{esc(note)}</li>" for note in list(notes)[:50]]
        parts.append("</ul>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_plain_pages(config, root: Path, assignment: str, student: str, notebooks, why: str, notes=()) -> None:
    """Replace the learner's feedback folder's content by one plain page per notebook (and KEPT_FILES)."""
    from grader.grading.autograde.nbgrader_steps import course_directory

    coursedir = course_directory(config, root, assignment, student)
    dest = Path(root) / coursedir.feedback_directory / student / assignment
    if dest.is_symlink():
        dest.unlink()
    dest.mkdir(parents=True, exist_ok=True)
    clean_folder(dest, ())
    copy_kept_files(Path(root) / coursedir.autograded_directory / student / assignment, dest)
    for notebook in notebooks:
        page = plain_page(notebook, why, notes, _scores(coursedir.db_url, assignment, student, notebook))
        (dest / f"{notebook}.html").write_text(page, encoding="utf-8")
    for path in dest.iterdir():
        path.chmod(0o644)


def over_budget_note(kind: str, seconds: float, memory: int | None) -> str:
    if kind == "memory":
        limit = f"{(memory or 0) / 2**30:.1f} GiB of memory"
    else:
        limit = f"{seconds:g} seconds"
    return (f"Your feedback page needed more than the grader's budget of {limit} to build (very large outputs, "
            "cells or markdown), so this plain page shows your scores, comments and notes instead. Your scores "
            "are unaffected.")
