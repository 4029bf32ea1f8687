"""Intake: turn whatever a learner submitted into notebooks nbgrader can grade, or a message.

``mirror_submission`` copies ``submitted/<student>/<assignment>/`` into the grader's private
mirror (submitted/ is only ever read). Every byte in submitted/ is treated as hostile:

- files are opened relative to their folder with O_NOFOLLOW | O_NONBLOCK and checked with
  fstat, so a symbolic link is never followed and a FIFO or device never blocks or is read;
  a hardlink is copied as an independent file; sizes, counts, depth and names are capped;
- each expected notebook is parsed within limits (size, nesting, cells), brought to v4.5 by
  nbformat and rebuilt cell by cell; its nbgrader metadata is checked against the release the
  learner was given, so nbgrader's sanitising step has nothing left to raise on
  (``grader.grading.run.notebook_repair``);
- a notebook that cannot be repaired is replaced by the blank release (zero points);
- timestamp.txt is kept only if nbgrader's own parser reads it, and is rewritten canonically.

What is dropped or repaired is said in a short message to the learner. Only a failure of the
grader's own files (release/, the mirror's disk) raises.
"""
from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.utils import parse_utc

from grader.grading.run.notebook_repair import Release, intake_notebook, listed
from grader.grading.run.terminal import printable

MAX_NOTEBOOK_BYTES = 20 * 2**20
MAX_FILE_BYTES = 20 * 2**20  # one other file (data, helper module)
MAX_TOTAL_BYTES = 100 * 2**20  # all other files of one submission
MAX_FILES = 200  # other files copied
MAX_ENTRIES = 2000  # entries looked at in one folder
MAX_FOLDER_DEPTH = 8
MAX_RELATIVE_PATH = 1000  # bytes: nbgrader later copies by full path, which must stay under PATH_MAX
MAX_TIMESTAMP_BYTES = 1024
MAX_MESSAGE_CHARS = 600

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

# Caches Jupyter and Python leave in a folder (nbgrader_config.py ignores them too): no message.
SILENTLY_SKIPPED = {".ipynb_checkpoints", "__pycache__"}


class Unreadable(Exception):
    """A learner's file or folder that is not taken; the text completes '<name> ...'."""


class Missing(Unreadable):
    pass


# --- reading submitted/ without trusting it -------------------------------------------------


def size_text(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit} bytes"


def kind_of(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a file"
    return "a pipe, socket or device"


def read_regular(folder: int, name: str, limit: int) -> bytes:
    """The bytes of the regular file ``name`` in the open folder; raises Unreadable otherwise."""
    try:
        mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
    except FileNotFoundError:
        raise Missing("is missing") from None
    except OSError as error:
        raise Unreadable(f"could not be read ({error.strerror})") from None
    if not stat.S_ISREG(mode):  # decided before opening: opening a device can act on it
        raise Unreadable(f"is {kind_of(mode)}, not a regular file")
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=folder)
    except OSError as error:  # ELOOP: swapped for a link since the stat
        raise Unreadable(f"could not be read ({error.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Unreadable("is not a regular file")
        chunks, size = [], 0
        while chunk := os.read(fd, 2**20):
            size += len(chunk)
            if size > limit:
                raise Unreadable(f"is larger than {size_text(limit)}")
            chunks.append(chunk)
    except OSError as error:
        raise Unreadable(f"could not be read ({error.strerror})") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def open_folder(name: str, parent: int) -> int:
    """A descriptor of the real folder ``name`` in ``parent``, never through a link; raises Unreadable."""
    try:
        return os.open(name, FOLDER_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        raise Missing("is missing") from None
    except OSError as error:
        problem = f"could not be opened ({error.strerror})"
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
        if not stat.S_ISDIR(mode):
            problem = f"is {kind_of(mode)}, not a folder"
    except OSError:
        pass
    raise Unreadable(problem)


def list_names(folder: int) -> tuple[list[str], bool]:
    """Up to MAX_ENTRIES names in the open folder, sorted, and whether there were more."""
    names = []
    with os.scandir(folder) as entries:  # scans a duplicate of the descriptor
        for entry in entries:
            if len(names) == MAX_ENTRIES:
                return sorted(names), True
            names.append(entry.name)
    return sorted(names), False


def is_plain_name(name: str) -> bool:
    """A name every tool downstream can print, store and pass on: no control characters and no
    undecodable bytes (which Python shows as lone surrogates)."""
    return name.isprintable() and name.strip() == name


def shown(name: str) -> str:
    return printable(name, 200)


# --- timestamp.txt --------------------------------------------------------------------------


def intake_timestamp(folder: int) -> tuple[str | None, list[str]]:
    """timestamp.txt rewritten canonically if nbgrader's parser reads it, else None and why."""
    ignored = "it was ignored, so no submission time (and no lateness) is recorded."
    try:
        raw = read_regular(folder, "timestamp.txt", MAX_TIMESTAMP_BYTES)
    except Missing:
        return None, []
    except Unreadable as problem:
        return None, [f"timestamp.txt {problem}; {ignored}"]
    try:
        when = parse_utc(raw.decode("utf-8-sig").strip())  # what nbgrader reads when it records the grade
        canonical = f"{when.isoformat(sep=' ', timespec='microseconds')} UTC"
        if parse_utc(canonical) != when:
            raise ValueError(canonical)
    except Exception:  # noqa: BLE001 - dateutil raises ValueError, OverflowError, TypeError...
        return None, [f"timestamp.txt is not a date nbgrader can read; {ignored}"]
    return canonical + "\n", []


# --- the learner's other files --------------------------------------------------------------


@dataclass
class OtherFiles:
    """Copies a learner's other files into the mirror within the caps; notes what it skipped."""

    target: Path
    files: int = 0
    total: int = 0
    skipped: dict[str, list[str]] = field(default_factory=dict)

    def skip(self, reason: str, path: str) -> None:
        self.skipped.setdefault(reason, []).append(path)

    def copy_folder(self, folder: int, relative: str, depth: int, names: list[str], more: bool) -> None:
        if more:
            self.skip(f"beyond the first {MAX_ENTRIES} entries of a folder", relative or "the submission folder")
        for name in names:
            path = f"{relative}/{name}" if relative else name
            if name in SILENTLY_SKIPPED:
                continue
            if not is_plain_name(name):
                self.skip("a name with control characters or undecodable bytes", shown(path))
            elif len(path.encode()) > MAX_RELATIVE_PATH:
                self.skip("a path that is too long", path[:60] + "…")
            else:
                self.copy_entry(folder, name, path, depth)

    def copy_entry(self, folder: int, name: str, path: str, depth: int) -> None:
        try:
            mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
        except OSError:
            return self.skip("could not be read", path)
        if stat.S_ISDIR(mode):
            return self.copy_subfolder(folder, name, path, depth + 1)
        if not stat.S_ISREG(mode):
            return self.skip(kind_of(mode), path)
        if self.files == MAX_FILES:
            return self.skip(f"more than {MAX_FILES} files", path)
        try:
            data = read_regular(folder, name, MAX_FILE_BYTES)
        except Unreadable as problem:
            return self.skip(str(problem), path)
        if self.total + len(data) > MAX_TOTAL_BYTES:
            return self.skip(f"more than {size_text(MAX_TOTAL_BYTES)} in all", path)
        write_new(self.target / path, data)
        self.files += 1
        self.total += len(data)

    def copy_subfolder(self, parent: int, name: str, path: str, depth: int) -> None:
        if depth > MAX_FOLDER_DEPTH:
            return self.skip(f"folders nested more than {MAX_FOLDER_DEPTH} deep", path)
        try:
            folder = open_folder(name, parent)
        except Unreadable as problem:
            return self.skip(str(problem), path)
        try:
            names, more = list_names(folder)
        except OSError as error:
            os.close(folder)
            return self.skip(f"a folder that could not be listed ({error.strerror})", path)
        try:
            (self.target / path).mkdir()
            self.copy_folder(folder, path, depth, names, more)
        finally:
            os.close(folder)

    def messages(self) -> list[str]:
        return [f"Not copied for grading ({reason}): {listed(paths)}; code that reads them fails when graded."
                for reason, paths in self.skipped.items()]


def write_new(path: Path, data: bytes) -> None:
    """Create ``path`` in the mirror (never through an existing file or link) holding ``data``."""
    fd = os.open(path, WRITE_FLAGS, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


# --- one learner's submission ---------------------------------------------------------------


def expected_notebooks(root: Path, assignment: str) -> list[str]:
    return sorted(p.stem for p in (root / "source" / assignment).glob("*.ipynb"))


def open_submission(root: Path, student: str, assignment: str) -> int:
    """A descriptor of submitted/<student>/<assignment>, neither part a link; raises Unreadable."""
    submitted = os.open(root / "submitted", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the course's own
    try:
        student_folder = open_folder(student, submitted)
    finally:
        os.close(submitted)
    try:
        return open_folder(assignment, student_folder)
    finally:
        os.close(student_folder)


def mirror_submission(root: Path, work: Path, assignment: str, student: str) -> list[str]:
    """Copy one learner's submission into the private mirror; returns messages for the learner.

    Never raises for anything under submitted/. The mirror holds each expected notebook
    (repaired, or the blank release), a canonical timestamp.txt if there was a valid one, and
    the learner's other files that are safe to copy.
    """
    target = work / "submitted" / student / assignment
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    notebooks = expected_notebooks(root, assignment)
    try:
        folder = open_submission(root, student, assignment)
    except Unreadable as problem:
        for notebook in notebooks:
            copy_blank(root, assignment, notebook, target)
        return [printable(f"The submission folder {problem}; nothing in it was read and every notebook scores zero.",
                          MAX_MESSAGE_CHARS)]
    try:
        messages = mirror_folder(folder, root, target, assignment, notebooks)
    finally:
        os.close(folder)
    return [printable(message, MAX_MESSAGE_CHARS) for message in messages]


def copy_blank(root: Path, assignment: str, notebook: str, target: Path) -> None:
    shutil.copyfile(root / "release" / assignment / f"{notebook}.ipynb", target / f"{notebook}.ipynb")


def mirror_folder(folder: int, root: Path, target: Path, assignment: str, notebooks: list[str]) -> list[str]:
    messages = []
    try:
        names, more = list_names(folder)
    except OSError as error:
        names, more = [], False
        messages.append(f"The submission folder could not be listed ({error.strerror}); only its notebooks were read.")
    expected = {f"{notebook}.ipynb" for notebook in notebooks}
    others = [shown(n) for n in names if n.endswith(".ipynb") and n not in expected]
    for notebook in notebooks:
        messages += mirror_notebook(folder, root, target, assignment, notebook, others)
    if others and expected & set(names):
        messages.append(f"Other notebooks are not graded: {listed(others)}.")
    timestamp, notes = intake_timestamp(folder)
    messages += notes
    if timestamp:
        write_new(target / "timestamp.txt", timestamp.encode("ascii"))
    other_files = OtherFiles(target)
    rest = [n for n in names if not n.endswith(".ipynb") and n != "timestamp.txt"]
    other_files.copy_folder(folder, "", 0, rest, more)
    return messages + other_files.messages()


def mirror_notebook(folder: int, root: Path, target: Path, assignment: str, notebook: str,
                    others: list[str]) -> list[str]:
    try:
        raw = read_regular(folder, f"{notebook}.ipynb", MAX_NOTEBOOK_BYTES)
    except Missing:
        copy_blank(root, assignment, notebook, target)
        return [f"{notebook}.ipynb is missing from the submission (found: {listed(others) or 'no notebook'}); "
                "it scores zero. Submit the notebook under its original name."]
    except Unreadable as problem:
        copy_blank(root, assignment, notebook, target)
        return [f"{notebook}.ipynb {problem}; it could not be graded and scores zero."]
    data, messages = intake_notebook(raw, Release.read(root / "release" / assignment / f"{notebook}.ipynb"), notebook)
    if data is None:
        copy_blank(root, assignment, notebook, target)
    else:
        write_new(target / f"{notebook}.ipynb", data)
    return messages
