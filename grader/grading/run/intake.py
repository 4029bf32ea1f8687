"""Intake: turn whatever a learner submitted into notebooks nbgrader can grade, or a message.

``mirror_submission`` copies ``submitted/<student>/<assignment>/`` into the grader's private
mirror (submitted/ is only ever read). Every byte in submitted/ is treated as hostile:

- files are opened relative to their folder with O_NOFOLLOW | O_NONBLOCK and checked with
  fstat, so a symbolic link is never followed and a FIFO or device never blocks or is read;
  a hardlink is copied as an independent file; sizes, counts, depth and names are capped;
- each expected notebook is parsed within limits (size, nesting, cells), brought to v4.5 by
  nbformat and rebuilt cell by cell; its nbgrader metadata is checked against the release the
  learner was given, so nbgrader's sanitising step has nothing left to raise on;
- a notebook that cannot be repaired is replaced by the blank release (zero points);
- timestamp.txt is kept only if nbgrader's own parser reads it, and is rewritten canonically.

What is dropped or repaired is said in a short message to the learner. Only a failure of the
grader's own files (release/, the mirror's disk) raises.
"""
from __future__ import annotations

import copy
import json
import math
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import v4
from nbgrader.nbgraderformat import MetadataValidator
from nbgrader.utils import parse_utc

from grader.grading.run.terminal import printable

MAX_NOTEBOOK_BYTES = 20 * 2**20
MAX_FILE_BYTES = 20 * 2**20  # one other file (data, helper module)
MAX_TOTAL_BYTES = 100 * 2**20  # all other files of one submission
MAX_FILES = 200  # other files copied
MAX_ENTRIES = 2000  # entries looked at in one folder
MAX_FOLDER_DEPTH = 8
MAX_RELATIVE_PATH = 1000  # bytes: nbgrader later copies by full path, which must stay under PATH_MAX
MAX_TIMESTAMP_BYTES = 1024
MAX_JSON_DEPTH = 100  # notebooks nest about 10 deep; nbformat and jsonschema recurse per level
MAX_JSON_VALUES = 1_000_000  # 20 MiB of "[]," would take a GiB and half a minute to parse
MAX_CELLS = 2000  # rebuilding a cell costs about 1 ms
MAX_INT_DIGITS = 64  # int() refuses over 4300 digits; no notebook field needs more than a few
MAX_MESSAGE_CHARS = 600
NAMES_LISTED = 5  # names quoted in one message

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

# Caches Jupyter and Python leave in a folder (nbgrader_config.py ignores them too): no message.
SILENTLY_SKIPPED = {".ipynb_checkpoints", "__pycache__"}
CELL_MAKERS = {"code": v4.new_code_cell, "markdown": v4.new_markdown_cell, "raw": v4.new_raw_cell}
CELL_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # nbformat 4.5's cell id
SURROGATE = re.compile("[\ud800-\udfff]")


class Unreadable(Exception):
    """A learner's file or folder that is not taken; the text completes '<name> ...'."""


class Missing(Unreadable):
    pass


class Rejected(Exception):
    """A notebook that cannot be repaired; the text completes '<name>.ipynb ...'."""


def listed(names: list[str]) -> str:
    more = len(names) - NAMES_LISTED
    return ", ".join(names[:NAMES_LISTED]) + (f" and {more} more" if more > 0 else "")


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return printable(lines[0] if lines else type(error).__name__, 200)


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


# --- the learner's notebook -----------------------------------------------------------------


@dataclass
class Release:
    """What the learner was given for one notebook (trusted): its graded cells by grade_id."""

    graded: dict[str, nbformat.NotebookNode]
    metadata: dict

    @classmethod
    def read(cls, path: Path) -> Release:
        nb = nbformat.read(path, as_version=4)
        return cls({c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells if "nbgrader" in c.metadata}, nb.metadata)


def json_int(digits: str):
    return int(digits) if len(digits) <= MAX_INT_DIGITS else None


def json_float(text: str):
    value = float(text)
    return value if math.isfinite(value) else None  # 1e999 would be written back as Infinity


def parse_json(raw: bytes):
    """The JSON value in ``raw``, strings made encodable; raises Rejected."""
    try:
        text = raw.decode("utf-8-sig")  # a BOM is accepted
    except UnicodeDecodeError:
        raise Rejected("is not UTF-8 text (was it saved with another encoding?)") from None
    if sum(text.count(c) for c in ",[{") > MAX_JSON_VALUES:  # an upper bound of the values to build
        raise Rejected(f"holds more than {MAX_JSON_VALUES:,} JSON values, which no notebook needs")
    try:
        # NaN and Infinity are not JSON: nbformat would write them back and Jupyter refuse them.
        value = json.loads(text, parse_int=json_int, parse_float=json_float, parse_constant=lambda _: None)
    except RecursionError:
        raise Rejected(f"is nested more than {MAX_JSON_DEPTH} levels deep, which no notebook is") from None
    except json.JSONDecodeError as error:
        raise Rejected(f"is not valid JSON, perhaps truncated ({error.msg} at line {error.lineno})") from None
    return clean_json(value, 0)


def clean_json(value, depth: int):
    """A copy with lone surrogates replaced (UTF-8 cannot encode them); raises Rejected past
    MAX_JSON_DEPTH, so nothing downstream recurses too deep."""
    if depth > MAX_JSON_DEPTH:
        raise Rejected(f"is nested more than {MAX_JSON_DEPTH} levels deep, which no notebook is")
    if isinstance(value, str):
        return SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [clean_json(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {SURROGATE.sub("\ufffd", key): clean_json(item, depth + 1) for key, item in value.items()}
    return value


def upgrade_to_v4(document) -> dict:
    """The notebook as a v4 dict, older formats converted by nbformat; raises Rejected."""
    if not isinstance(document, dict):
        raise Rejected("is JSON but not a notebook")
    major = document.get("nbformat")
    if type(major) is not int:  # True is an int too
        raise Rejected("is JSON but not a notebook (it has no nbformat version)")
    if major == 4:
        return document
    if major not in (1, 2, 3):
        raise Rejected(f"uses notebook format {major}, which Jupyter cannot read")
    try:
        return nbformat.convert(nbformat.from_dict(document), 4)
    except Exception as error:  # noqa: BLE001 - nbformat's converters fail in many ways on bad input
        raise Rejected(f"is an nbformat {major} notebook that could not be converted ({first_line(error)})") from None


def cell_content(raw, position: int) -> tuple[dict | None, str]:
    """What is worth keeping of a raw cell, or None and why it is left out. Outputs are not
    kept: nbgrader clears them before grading anyway, so garbage there costs nothing."""
    if not isinstance(raw, dict):
        return None, "is not a notebook cell"
    kind = raw.get("cell_type")
    if not isinstance(kind, str) or kind not in CELL_MAKERS:
        return None, "has no valid cell type"
    source = raw.get("source", "")
    if isinstance(source, list) and all(isinstance(line, str) for line in source):
        source = "".join(source)  # nbformat's on-disk form: a list of lines
    if not isinstance(source, str):
        return None, "has no readable source"
    metadata = raw.get("metadata")
    return {"position": position, "kind": kind, "source": source,
            "metadata": metadata if isinstance(metadata, dict) else {},
            "attachments": raw.get("attachments"), "id": raw.get("id")}, ""


def repair_grading(contents: list[dict], release: Release, name: str) -> list[str]:
    """Make every nbgrader entry one nbgrader accepts; returns messages.

    A cell whose grade_id is one of the assignment's keeps it, with the release's metadata and
    cell type (nbgrader restores locked cells and points from the gradebook anyway). Any other
    nbgrader entry (unknown or malformed id, not a dict, a later copy of a graded cell) is
    removed: the cell runs as an ordinary one.
    """
    seen, unknown, copies, restored = set(), [], [], []
    for content in contents:
        metadata = content["metadata"]
        if "nbgrader" not in metadata:
            continue
        grade_id = metadata["nbgrader"].get("grade_id") if isinstance(metadata["nbgrader"], dict) else None
        known = isinstance(grade_id, str) and grade_id in release.graded  # a list or dict id is unhashable
        if not known or grade_id in seen:
            del metadata["nbgrader"]
            if known:
                copies.append(grade_id)
            else:
                unknown.append(f"cell {content['position'] + 1}")
            continue
        seen.add(grade_id)
        expected = release.graded[grade_id]
        wanted = copy.deepcopy(dict(expected.metadata["nbgrader"]))
        if without_checksum(metadata["nbgrader"]) != without_checksum(wanted) or content["kind"] != expected.cell_type:
            restored.append(grade_id)  # a damaged checksum alone is not worth a message
        metadata["nbgrader"], content["kind"] = wanted, expected.cell_type
    messages = [f"{name}: cell '{grade_id}' appears more than once (copied?); only the first copy is graded, "
                "the others run as ordinary cells." for grade_id in dict.fromkeys(copies)]
    if unknown:
        messages.append(f"{name}: {listed(unknown)} carried grading metadata that is not part of the assignment; "
                        "they run as ordinary cells, worth no points.")
    if restored:
        messages.append(f"{name}: the grading metadata of cell(s) {listed(restored)} had been changed; it was "
                        "restored from the assignment and the cells are graded as usual.")
    missing = [grade_id for grade_id in release.graded if grade_id not in seen]
    if missing:
        messages.append(f"{name}: cells {', '.join(missing)} were deleted from the notebook; graded cells among them "
                        "score zero. Start again from a fresh copy of the assignment to restore them.")
    return messages


def without_checksum(meta) -> dict:
    return {key: value for key, value in meta.items() if key != "checksum"}  # nbgrader rewrites it anyway


def unchecked_cell(content: dict) -> nbformat.NotebookNode:
    """The cell ``build_cell`` makes when nothing has to be dropped, not validated (its notebook is)."""
    cell = {"id": "placeholder", "cell_type": content["kind"], "metadata": content["metadata"],
            "source": content["source"]}
    if content["kind"] == "code":
        cell.update(execution_count=None, outputs=[])
    elif isinstance(content["attachments"], dict):
        cell["attachments"] = content["attachments"]
    return nbformat.NotebookNode(cell)


def build_cell(content: dict) -> tuple[nbformat.NotebookNode, bool]:
    """A cell nbformat accepts, and whether metadata or attachments had to be dropped for it."""
    make = CELL_MAKERS[content["kind"]]
    extras = {"attachments": content["attachments"]} if (
        content["kind"] != "code" and isinstance(content["attachments"], dict)) else {}
    try:
        return make(source=content["source"], metadata=content["metadata"], id="placeholder", **extras), False
    except nbformat.ValidationError:
        # nbformat's schema does not look into "nbgrader" (repair_grading did): keep it alone.
        kept = {"nbgrader": content["metadata"]["nbgrader"]} if "nbgrader" in content["metadata"] else {}
        return make(source=content["source"], metadata=kept, id="placeholder"), True


def assign_ids(cells: list, raw_ids: list) -> None:
    """Keep each valid, unused cell id; give the others a deterministic one (nbformat's own
    repair draws random ids, and a grading job is keyed by the notebook's content)."""
    kept, used = [], set()
    for raw_id in raw_ids:
        valid = isinstance(raw_id, str) and CELL_ID.fullmatch(raw_id) and raw_id not in used
        kept.append(raw_id if valid else None)
        used.add(raw_id if valid else None)
    for index, (cell, cell_id) in enumerate(zip(cells, kept, strict=True)):
        if cell_id is None:
            cell_id, suffix = f"cell-{index}", 0
            while cell_id in used:
                suffix += 1
                cell_id = f"cell-{index}-{suffix}"
            used.add(cell_id)
        cell.id = cell_id


def notebook_metadata(document: dict, release: Release) -> tuple[dict, bool]:
    """The learner's notebook metadata if nbformat accepts it, else the release's (and True)."""
    metadata = document.get("metadata")
    if isinstance(metadata, dict):
        try:
            v4.new_notebook(metadata=metadata)  # validates
            return metadata, False
        except nbformat.ValidationError:
            pass
    return copy.deepcopy(release.metadata), True


def repair_notebook(document, release: Release, name: str) -> tuple[nbformat.NotebookNode, list[str]]:
    """A valid v4.5 notebook with the learner's cells, and messages; raises Rejected."""
    document = upgrade_to_v4(document)
    raw_cells = document.get("cells")
    if not isinstance(raw_cells, list):
        raise Rejected("is JSON but not a notebook (it has no list of cells)")
    if len(raw_cells) > MAX_CELLS:
        raise Rejected(f"has more than {MAX_CELLS} cells")
    contents, dropped = [], []
    for position, raw in enumerate(raw_cells):
        content, why = cell_content(raw, position)
        if content is None:
            dropped.append(f"cell {position + 1} {why}")
        else:
            contents.append(content)
    messages = [f"{name}: {len(dropped)} cell(s) could not be read and were left out ({listed(dropped)}); "
                "an answer in them scores zero."] if dropped else []
    messages += repair_grading(contents, release, name)
    metadata, replaced = notebook_metadata(document, release)
    nb, stripped = None, []
    try:  # usually every cell is valid: one validation of the whole notebook instead of one per cell
        cells = [unchecked_cell(content) for content in contents]
        assign_ids(cells, [content["id"] for content in contents])
        nb = v4.new_notebook(cells=cells, metadata=metadata)  # validates every cell
    except nbformat.ValidationError:
        built = [build_cell(content) for content in contents]  # which cells must lose metadata or attachments
        stripped = [f"{content['position'] + 1}" for content, (_, lost) in zip(contents, built, strict=True) if lost]
        cells = [cell for cell, _ in built]
        assign_ids(cells, [content["id"] for content in contents])
    if stripped:
        messages.append(f"{name}: the metadata or attachments of cell(s) {listed(stripped)} were invalid and were "
                        "removed; this does not change the score.")
    if replaced:
        messages.append(f"{name}: the notebook's metadata was invalid and was replaced by the assignment's; "
                        "this does not change the score.")
    return nb if nb is not None else v4.new_notebook(cells=cells, metadata=metadata), messages


def serialise(nb: nbformat.NotebookNode) -> bytes:
    """The notebook's file, after the check nbgrader's sanitising will make (nbformat's own
    validation was made by ``new_notebook``). Raises if repair_grading missed a case."""
    MetadataValidator().validate_nb(nb)
    return nbformat.writes(nb).encode("utf-8")


def intake_notebook(raw: bytes, release: Release, name: str) -> tuple[bytes | None, list[str]]:
    """The repaired notebook's bytes and messages, or None and why it scores zero."""
    try:
        nb, messages = repair_notebook(parse_json(raw), release, name)
        return serialise(nb), messages
    except Rejected as problem:
        return None, [f"{name}.ipynb {problem}; it could not be graded and scores zero."]
    except Exception as error:  # noqa: BLE001 - a learner's bytes must never stop the class
        return None, [f"{name}.ipynb could not be repaired ({type(error).__name__}: {first_line(error)}); "
                      "it could not be graded and scores zero."]


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
