"""grader.grading.run.intake against hostile bytes: every submission becomes a gradable notebook or a message.

Each case is submitted to a course built once for this module, then mirrored; the mirror
must hold notebooks that nbformat and nbgrader accept, submitted/ must not change, nothing
outside the mirror may be written, and whatever was dropped or repaired must be said. The
last tests run nbgrader's own sanitising step on the mirror, and fuzz both with Hypothesis.
"""
import copy
import hashlib
import json
import os
import shutil
import signal
import socket
import sys
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from grader.grading.run import intake, notebook_repair
from grader.grading.run.intake import mirror_submission
from grader.grading.run.terminal import printable
from tests.course_helpers import make_course

ASSIGNMENT = "03_backward"
NOTEBOOK = f"{ASSIGNMENT}.ipynb"
SECRET = "secret-outside-the-submission"

pytestmark = [pytest.mark.filterwarnings("ignore::nbformat.warnings.DuplicateCellId"),
              # nbgrader's own, as in grader/grading/run/pipeline.py
              pytest.mark.filterwarnings("ignore:Object of type <Submitted")]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """03_backward's source, release and gradebook in a fresh course folder (about 10 s)."""
    course = make_course(tmp_path_factory.mktemp("intake"), ASSIGNMENT)
    (course.parent / "secret.txt").write_text(SECRET)
    return course


def release_json(course) -> dict:
    return json.loads((course / "release" / ASSIGNMENT / NOTEBOOK).read_text())


def graded_ids(course) -> list[str]:
    return [c["metadata"]["nbgrader"]["grade_id"] for c in release_json(course)["cells"] if "nbgrader" in c["metadata"]]


def answered(course) -> dict:
    """The release with an answer typed into each solution cell: what an honest learner submits."""
    nb = release_json(course)
    for cell in nb["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("solution"):
            cell["source"] = f"# my answer for {cell['metadata']['nbgrader']['grade_id']}\n"
    return nb


def encoded(nb: dict) -> bytes:
    return json.dumps(nb, indent=1).encode()


def tree_state(path: Path, digests: bool = False) -> dict:
    """Every entry under ``path`` (links not followed): kind, size, inode, mtime, and with
    ``digests`` the content of each regular file."""
    state = {}
    for p in sorted(path.rglob("*")):
        info = p.lstat()
        regular = p.is_file() and not p.is_symlink()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if digests and regular else None
        state[str(p.relative_to(path))] = (info.st_mode, info.st_size, info.st_ino, info.st_mtime_ns, digest,
                                            os.readlink(p) if p.is_symlink() else None)
    return state


@contextmanager
def time_limit(seconds: int):
    """Fail instead of hanging if intake ever blocks (on a FIFO, say)."""
    def expire(*_):
        raise TimeoutError("intake blocked")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def submission_folder(course, student: str) -> Path:
    folder = course / "submitted" / student / ASSIGNMENT
    shutil.rmtree(course / "submitted" / student, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def mirror(course, student: str) -> tuple[list[str], Path]:
    """Mirror ``student``'s submission and check what every case must satisfy."""
    work = course / "build" / "grading" / ASSIGNMENT
    target = work / "submitted" / student / ASSIGNMENT
    before = tree_state(course.parent)
    with time_limit(60):
        messages = mirror_submission(course, work, ASSIGNMENT, student)
    assert isinstance(messages, list) and all(isinstance(m, str) and printable(m) == m for m in messages)
    after = tree_state(course.parent)
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    mirror_prefix = str(target.relative_to(course.parent))
    assert all(p == mirror_prefix or p.startswith(mirror_prefix + "/") or mirror_prefix.startswith(p + "/")
               for p in changed), f"written outside the mirror: {sorted(changed)[:5]}"
    assert not mention(messages, "could not be repaired"), messages  # intake's last resort hides its own bugs
    nb = nbformat.read(target / NOTEBOOK, as_version=4)
    nbformat.validate(nb)  # nbgrader's MetadataValidator ran in intake: the line above says it passed
    ids = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if "nbgrader" in c.metadata]
    assert len(ids) == len(set(ids)) and set(ids) <= set(graded_ids(course))
    for path in target.rglob("*"):
        assert path.is_dir() or (path.is_file() and not path.is_symlink() and path.stat().st_nlink == 1)
        assert path.is_dir() or SECRET.encode() not in path.read_bytes()
    return messages, target


def submit(course, student: str, notebook: bytes | None = None, **files: bytes) -> tuple[list[str], Path]:
    folder = submission_folder(course, student)
    if notebook is not None:
        (folder / NOTEBOOK).write_bytes(notebook)
    for name, content in files.items():
        (folder / name).write_bytes(content)
    return mirror(course, student)


def is_blank(course, target: Path) -> bool:
    return (target / NOTEBOOK).read_bytes() == (course / "release" / ASSIGNMENT / NOTEBOOK).read_bytes()


def sources(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells]


def mention(messages: list[str], *words: str) -> bool:
    return any(all(w.lower() in m.lower() for w in words) for m in messages)


# --- notebooks that are whole and honest ----------------------------------------------------


def test_an_honest_notebook_passes_through_unchanged(course):
    nb = answered(course)
    messages, target = submit(course, "honest", encoded(nb), **{"helper.py": b"X = 1\n", "data.csv": b"1,2\n"})
    assert messages == []
    assert sources(target / NOTEBOOK) == ["".join(c["source"]) for c in nb["cells"]]
    mirrored = json.loads((target / NOTEBOOK).read_text())
    assert [c["metadata"] for c in mirrored["cells"]] == [c["metadata"] for c in nb["cells"]]
    assert [c["id"] for c in mirrored["cells"]] == [c["id"] for c in nb["cells"]]
    assert (target / "helper.py").read_bytes() == b"X = 1\n" and (target / "data.csv").read_bytes() == b"1,2\n"


def test_a_byte_order_mark_and_list_sources_are_accepted(course):
    nb = answered(course)
    for cell in nb["cells"]:
        cell["source"] = cell["source"].splitlines(keepends=True) if isinstance(cell["source"], str) else cell["source"]
    messages, target = submit(course, "bom", b"\xef\xbb\xbf" + encoded(nb))
    assert messages == [] and not is_blank(course, target)
    assert any("my answer" in s for s in sources(target / NOTEBOOK))


def test_garbage_outputs_cost_nothing(course):
    nb = answered(course)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [{"output_type": 3}, "junk", None], "seven"
        else:
            cell["outputs"] = [1]
    messages, target = submit(course, "outputs", encoded(nb))
    assert messages == [] and any("my answer" in s for s in sources(target / NOTEBOOK))


# --- notebooks that cannot be read: the blank release and a message ------------------------


@pytest.mark.parametrize("content, words", [
    (b"\x89PNG\r\n\x1a\n not a notebook", ["not UTF-8"]),
    ("{\"cells\": [\"dérivée\"]}".encode("latin-1"), ["not UTF-8"]),
    ("{}".encode("utf-16"), ["not UTF-8"]),
    (b'{"cells": [', ["not valid JSON"]),
    (b"", ["not valid JSON"]),
    (b"[" * 100_000 + b"]" * 100_000, ["nested"]),
    (b'{"nbformat": 4, "cells": [], "metadata": {"a": ' + b"[" * 500 + b"]" * 500 + b"}}", ["nested"]),
    (b"[]", ["not a notebook"]),
    (b"3", ["not a notebook"]),
    (b'{"cells": 3}', ["not a notebook"]),
    (b'{"nbformat": "4", "cells": []}', ["not a notebook"]),
    (b'{"nbformat": true, "cells": []}', ["not a notebook"]),
    (b'{"nbformat": 4, "cells": {"a": 1}}', ["not a notebook"]),
    (b'{"nbformat": 5, "nbformat_minor": 0, "cells": [], "metadata": {}}', ["format 5"]),
    (b'{"nbformat": 3, "worksheets": 7}', ["nbformat 3", "converted"]),
    (b'{"nbformat": 4, "metadata": {}, "cells": [' + b"{}," * 2500 + b"{}]}", ["more than"]),
    (b"[" + b"[]," * 600_000 + b"[]]", ["JSON values"]),
], ids=["png", "latin1", "utf16", "truncated", "empty", "deep_json", "deep_metadata", "list", "number",
        "cells_not_list", "version_string", "version_bool", "cells_dict", "format_5", "bad_format_3", "many_cells",
        "many_values"])
def test_an_unreadable_notebook_is_replaced_by_the_blank_release(course, content, words):
    messages, target = submit(course, "unreadable", content)
    assert is_blank(course, target)
    assert mention(messages, NOTEBOOK, "scores zero", *words), messages


def sparse_file(path: Path, size: int) -> None:
    path.touch()
    os.truncate(path, size)  # takes no disk space


@pytest.mark.parametrize("make, words", [
    (lambda folder: os.symlink(folder.parent.parent.parent.parent / "secret.txt", folder / NOTEBOOK),
     ["symbolic link"]),
    (lambda folder: os.mkfifo(folder / NOTEBOOK), ["pipe"]),
    (lambda folder: (folder / NOTEBOOK).mkdir(), ["folder"]),
    (lambda folder: sparse_file(folder / NOTEBOOK, intake.MAX_NOTEBOOK_BYTES + 1), ["larger than"]),
    (lambda folder: None, ["missing", "my_work.ipynb"]),
], ids=["symlink", "fifo", "folder", "huge", "missing"])
def test_a_notebook_that_is_not_a_regular_file_is_never_followed_or_read(course, make, words):
    folder = submission_folder(course, "not_a_file")
    (folder / "my_work.ipynb").write_bytes(encoded(answered(course)))
    make(folder)
    messages, target = mirror(course, "not_a_file")
    assert is_blank(course, target) and mention(messages, NOTEBOOK, *words), messages


def test_a_hardlinked_notebook_is_copied_as_an_independent_file(course):
    folder = submission_folder(course, "hardlink")
    (folder / "original.txt").write_bytes(encoded(answered(course)))
    os.link(folder / "original.txt", folder / NOTEBOOK)
    messages, target = mirror(course, "hardlink")
    assert messages == [] and not is_blank(course, target)
    assert (target / "original.txt").read_bytes() == (folder / "original.txt").read_bytes()


@pytest.mark.parametrize("link", ["student", "assignment"])
def test_a_submission_folder_that_is_a_link_is_not_read(course, link):
    elsewhere = course.parent / "elsewhere"
    shutil.rmtree(elsewhere, ignore_errors=True)
    (elsewhere / ASSIGNMENT).mkdir(parents=True)
    (elsewhere / ASSIGNMENT / NOTEBOOK).write_bytes(encoded(answered(course)))
    shutil.rmtree(course / "submitted" / "linked", ignore_errors=True)
    (course / "submitted").mkdir(exist_ok=True)
    if link == "student":
        os.symlink(elsewhere, course / "submitted" / "linked")
    else:
        (course / "submitted" / "linked").mkdir()
        os.symlink(elsewhere / ASSIGNMENT, course / "submitted" / "linked" / ASSIGNMENT)
    messages, target = mirror(course, "linked")
    assert is_blank(course, target) and mention(messages, "symbolic link", "scores zero"), messages
    if link == "student":
        os.unlink(course / "submitted" / "linked")
    else:
        shutil.rmtree(course / "submitted" / "linked")


def test_a_missing_submission_folder_gives_blank_notebooks(course):
    shutil.rmtree(course / "submitted" / "absent", ignore_errors=True)
    (course / "submitted" / "absent").mkdir(parents=True)
    messages, target = mirror(course, "absent")
    assert is_blank(course, target) and mention(messages, "missing"), messages


# --- notebooks whose cells or metadata are damaged: repaired, and said ----------------------


def solution_cell(nb: dict, grade_id: str = "layer_norm_vjp") -> dict:
    return next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)


def damaged(course, damage) -> dict:
    nb = answered(course)
    damage(nb)
    return nb


def set_nbgrader(key, value, grade_id="test_layer_norm_vjp"):
    return lambda nb: solution_cell(nb, grade_id)["metadata"]["nbgrader"].__setitem__(key, value)


def extra_cell(cell):
    return lambda nb: nb["cells"].append(cell)


REPAIRS = {
    "grade_id_list": (extra_cell({"cell_type": "code", "source": "x = 1", "metadata": {"nbgrader": {
        "grade_id": ["a"], "grade": True, "solution": False, "locked": False, "schema_version": 3, "points": 1}},
        "outputs": [], "execution_count": None}), ["not part of the assignment"]),
    "grade_id_dict": (extra_cell({"cell_type": "code", "source": "x = 1", "metadata": {"nbgrader": {
        "grade_id": {"a": 1}, "grade": True}}, "outputs": []}), ["not part of the assignment"]),
    "grade_id_int": (set_nbgrader("grade_id", 7), ["not part of the assignment"]),
    "grade_id_empty": (set_nbgrader("grade_id", ""), ["not part of the assignment"]),
    "grade_id_unknown": (extra_cell({"cell_type": "markdown", "source": "hi", "metadata": {"nbgrader": {
        "grade_id": "mine", "grade": True, "solution": False, "locked": False, "schema_version": 3}}}),
        ["not part of the assignment"]),
    "nbgrader_not_dict": (lambda nb: solution_cell(nb, "layer_norm_jacobian")["metadata"].__setitem__(
        "nbgrader", "yes"), ["not part of the assignment", "deleted"]),
    "nbgrader_null": (lambda nb: solution_cell(nb, "layer_norm_jacobian")["metadata"].__setitem__("nbgrader", None),
                      ["not part of the assignment"]),
    "grade_yes": (set_nbgrader("grade", "yes"), ["restored"]),
    "points_string": (set_nbgrader("points", "2"), ["restored"]),
    "points_huge": (set_nbgrader("points", 1e308), ["restored"]),
    "points_negative": (set_nbgrader("points", -5), ["restored"]),
    "solution_null": (set_nbgrader("solution", None), ["restored"]),
    "locked_list": (set_nbgrader("locked", [True]), ["restored"]),
    "schema_version_99": (set_nbgrader("schema_version", 99), ["restored"]),
    "schema_version_old": (set_nbgrader("schema_version", 1), ["restored"]),
    "extra_nbgrader_key": (set_nbgrader("bonus", 100), ["restored"]),
    "checksum_null": (set_nbgrader("checksum", None), []),  # found by the fuzzer: nbgrader requires a string
    "cell_type_changed": (lambda nb: solution_cell(nb).__setitem__("cell_type", "markdown"), ["restored"]),
    "duplicated_test_cell": (lambda nb: nb["cells"].append(copy.deepcopy(solution_cell(nb, "test_layer_norm_vjp"))),
                             ["more than once"]),
    "deleted_test_cell": (lambda nb: nb["cells"].remove(solution_cell(nb, "test_layer_norm_vjp")), ["deleted"]),
    "cell_not_dict": (lambda nb: nb["cells"].extend([3, "cell", [1], None]), ["left out"]),
    "missing_cell_type": (lambda nb: nb["cells"].append({"source": "x", "metadata": {}}), ["left out"]),
    "unknown_cell_type": (lambda nb: nb["cells"].append({"cell_type": "heading", "source": "x", "metadata": {}}),
                          ["left out"]),
    "cell_type_list": (lambda nb: nb["cells"].append({"cell_type": ["code"], "source": "x", "metadata": {}}),
                       ["left out"]),
    "source_int": (lambda nb: nb["cells"].append({"cell_type": "code", "source": 3, "metadata": {}}), ["left out"]),
    "source_mixed_list": (lambda nb: nb["cells"].append({"cell_type": "code", "source": ["a", 1], "metadata": {}}),
                          ["left out"]),
    "cell_metadata_invalid": (lambda nb: solution_cell(nb)["metadata"].update(collapsed="x", tags=3), ["metadata"]),
    "cell_metadata_not_dict": (lambda nb: nb["cells"][0].__setitem__("metadata", [1]), []),
    "notebook_metadata_invalid": (lambda nb: nb["metadata"].__setitem__("kernelspec", 3), ["notebook's metadata"]),
    "attachments_garbage": (lambda nb: nb["cells"][0].__setitem__("attachments", {"a.png": 3}), ["metadata"]),
}


@pytest.mark.parametrize("case", list(REPAIRS))
def test_damaged_metadata_is_repaired_and_said(course, case):
    damage, words = REPAIRS[case]
    messages, target = submit(course, "damaged", encoded(damaged(course, damage)))
    assert not is_blank(course, target), messages
    assert any("my answer for layer_norm_backward" in s for s in sources(target / NOTEBOOK))
    for word in words:
        assert mention(messages, word), (word, messages)
    kept = [c.metadata["nbgrader"]["grade_id"] for c in nbformat.read(target / NOTEBOOK, as_version=4).cells
            if "nbgrader" in c.metadata]
    deleted_ids = {"deleted_test_cell": {"test_layer_norm_vjp"}, "nbgrader_not_dict": {"layer_norm_jacobian"},
                   "nbgrader_null": {"layer_norm_jacobian"}, "grade_id_int": {"test_layer_norm_vjp"},
                   "grade_id_empty": {"test_layer_norm_vjp"}}.get(case, set())
    assert set(kept) == set(graded_ids(course)) - deleted_ids


def test_the_first_copy_of_a_duplicated_cell_keeps_its_grade_id(course):
    nb = answered(course)
    cell = solution_cell(nb)
    second = copy.deepcopy(cell)
    second["source"] = "# the second copy\n"
    nb["cells"].append(second)
    messages, target = submit(course, "duplicate", encoded(nb))
    cells = nbformat.read(target / NOTEBOOK, as_version=4).cells
    graded = {c.metadata["nbgrader"]["grade_id"]: c.source for c in cells if "nbgrader" in c.metadata}
    assert graded["layer_norm_vjp"] == cell["source"] and cells[-1].source == "# the second copy\n"
    assert "nbgrader" not in cells[-1].metadata and mention(messages, "layer_norm_vjp", "more than once")


def test_cell_ids_are_made_unique_and_valid_deterministically(course):
    nb = answered(course)
    nb["cells"][1]["id"] = nb["cells"][0]["id"]
    nb["cells"][2]["id"] = "not a valid id!"
    nb["cells"][3]["id"] = 42
    del nb["cells"][4]["id"]
    first = submit(course, "ids", encoded(nb))[1] / NOTEBOOK
    first_bytes = first.read_bytes()
    again = submit(course, "ids", encoded(nb))[1] / NOTEBOOK
    ids = [c.id for c in nbformat.read(again, as_version=4).cells]
    assert len(set(ids)) == len(ids) and ids[0] == nb["cells"][0]["id"] and again.read_bytes() == first_bytes


def submit_odd_strings(course, student: str) -> tuple[list[str], Path]:
    nb = answered(course)
    solution_cell(nb)["metadata"]["nbgrader"]["schema_version"] = 1
    nb["cells"][0]["metadata"]["note\ud800"] = "x"
    text = encoded(nb).decode().replace("# my answer for layer_norm_vjp", "# answer \\ud800 \\udfff \\u0000 \\u001b ok")
    text = text.replace('"x"', 'NaN', 1).replace('"cells"', '"huge": ' + "9" * 5000 + ', "big": 1e999, "cells"', 1)
    return submit(course, student, text.encode())


def test_unencodable_and_odd_strings_are_written_back_safely(course):
    messages, target = submit_odd_strings(course, "surrogates")
    assert not is_blank(course, target)
    source = solution_cell(nbformat.read(target / NOTEBOOK, as_version=4))["source"]
    assert source.startswith("# answer \ufffd \ufffd \x00 \x1b ok") and mention(messages, "restored")


def submit_format_3(course, student: str) -> tuple[list[str], Path]:
    v3 = nbformat.convert(nbformat.reads(json.dumps(answered(course)), as_version=4), 3)
    return submit(course, student, nbformat.writes(v3, version=3).encode())


def test_a_format_3_notebook_is_upgraded(course):
    messages, target = submit_format_3(course, "v3")
    assert not is_blank(course, target), messages
    assert any("my answer for layer_norm_vjp" in s for s in sources(target / NOTEBOOK))
    assert {c.metadata["nbgrader"]["grade_id"] for c in nbformat.read(target / NOTEBOOK, as_version=4).cells
            if "nbgrader" in c.metadata} == set(graded_ids(course))


# --- timestamp.txt --------------------------------------------------------------------------


@pytest.mark.parametrize("content, kept", [
    (b"2024-01-15 10:23:45.123456 UTC", "2024-01-15 10:23:45.123456 UTC\n"),
    (b"\xef\xbb\xbf2024-01-15T11:23:45+01:00\n", "2024-01-15 10:23:45.000000 UTC\n"),
    (b"2024-01-15T10:23:45Z", "2024-01-15 10:23:45.000000 UTC\n"),
    (b"yesterday, around noon", None),
    (b"", None),
    (b"\xff\xfe", None),
    (b"2024-01-15 10:23:45 /etc/passwd", None),
    (b"9" * 5000, None),
    (b"0001-01-01 00:00:00 +2359", None),
], ids=["nbgrader", "offset_bom", "iso", "words", "empty", "not_utf8", "tz_path", "huge_number", "overflow"])
def test_a_timestamp_is_kept_only_if_nbgrader_can_read_it(course, content, kept):
    messages, target = submit(course, "timestamp", encoded(answered(course)), **{"timestamp.txt": content})
    if kept:
        assert (target / "timestamp.txt").read_text() == kept and messages == []
    else:
        assert not (target / "timestamp.txt").exists() and mention(messages, "timestamp.txt", "ignored"), messages


@pytest.mark.parametrize("make, words", [
    (lambda folder: os.symlink(folder.parent.parent.parent.parent / "secret.txt", folder / "timestamp.txt"), ["link"]),
    (lambda folder: os.mkfifo(folder / "timestamp.txt"), ["pipe"]),
    (lambda folder: (folder / "timestamp.txt").mkdir(), ["folder"]),
    (lambda folder: (folder / "timestamp.txt").write_bytes(b"2024-01-15 10:23:45 " + b" " * 2000), ["larger"]),
], ids=["symlink", "fifo", "folder", "huge"])
def test_a_timestamp_that_is_not_a_small_regular_file_is_ignored(course, make, words):
    folder = submission_folder(course, "timestamp_file")
    (folder / NOTEBOOK).write_bytes(encoded(answered(course)))
    make(folder)
    messages, target = mirror(course, "timestamp_file")
    assert not (target / "timestamp.txt").exists() and mention(messages, "timestamp.txt", *words), messages


# --- the learner's other files ---------------------------------------------------------------


def test_other_files_and_subfolders_are_copied_byte_for_byte(course):
    folder = submission_folder(course, "files")
    (folder / NOTEBOOK).write_bytes(encoded(answered(course)))
    (folder / "helpers").mkdir()
    (folder / "helpers" / "__init__.py").write_bytes(b"")
    (folder / "helpers" / "maths.py").write_bytes(b"def f():\n    return 1\n")
    (folder / "data").mkdir()
    (folder / "data" / "numbers é.csv").write_bytes(bytes(range(256)))
    (folder / "data" / "inner.ipynb").write_bytes(b"{}")
    (folder / "my_notes.ipynb").write_bytes(b"not graded")
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / ".ipynb_checkpoints" / "x.ipynb").write_bytes(b"{}")
    messages, target = mirror(course, "files")
    assert messages == ["Other notebooks are not graded: my_notes.ipynb."]
    for path in ["helpers/__init__.py", "helpers/maths.py", "data/numbers é.csv", "data/inner.ipynb"]:
        assert (target / path).read_bytes() == (folder / path).read_bytes()
    assert not (target / "my_notes.ipynb").exists() and not (target / ".ipynb_checkpoints").exists()


def submit_odd_files(course, student: str) -> tuple[list[str], Path]:
    folder = submission_folder(course, student)
    (folder / NOTEBOOK).write_bytes(encoded(answered(course)))
    secret = course.parent / "secret.txt"
    os.symlink(secret, folder / "data.csv")
    os.symlink(secret.parent, folder / "linked_folder")
    os.symlink("/proc/self/environ", folder / "environ")
    shared = course.parent / "shared.txt"
    shared.write_bytes(b"shared")
    os.link(shared, folder / "hardlinked.txt")  # a hardlink is a regular file: copied, as its own file
    os.mkfifo(folder / "pipe")
    with socket.socket(socket.AF_UNIX) as server:  # bound by a relative name: a socket path has ~108 bytes at most
        here = os.getcwd()
        os.chdir(folder)
        try:
            server.bind("socket")
        finally:
            os.chdir(here)
    os.mkdir(folder / "sub")
    os.mkfifo(folder / "sub" / "pipe2")
    (folder / "bell\x07.py").write_bytes(b"x")
    with open(os.fsencode(folder) + b"/bad\xffname.txt", "wb") as undecodable:
        undecodable.write(b"x")
    try:
        os.mknod(folder / "null", 0o600 | 0o020000, os.makedev(1, 3))  # a character device, if allowed here
    except OSError:
        pass
    return mirror(course, student)


def test_links_pipes_sockets_and_odd_names_are_skipped_with_a_message(course):
    messages, target = submit_odd_files(course, "odd")
    assert mention(messages, "symbolic link", "data.csv", "environ", "linked_folder")
    assert mention(messages, "pipe, socket or device", "pipe", "socket", "sub/pipe2")
    assert mention(messages, "control characters", "bell") and mention(messages, "bad\\udcffname")
    assert sorted(p.name for p in target.iterdir()) == ["03_backward.ipynb", "hardlinked.txt", "sub"]


def test_limits_on_files_sizes_depth_and_entries(course, monkeypatch):
    monkeypatch.setattr(intake, "MAX_FILES", 5)
    monkeypatch.setattr(intake, "MAX_FILE_BYTES", 1000)
    monkeypatch.setattr(intake, "MAX_TOTAL_BYTES", 2500)
    monkeypatch.setattr(intake, "MAX_ENTRIES", 20)
    folder = submission_folder(course, "limits")
    (folder / NOTEBOOK).write_bytes(encoded(answered(course)))
    (folder / "big.bin").write_bytes(b"x" * 1001)
    for name in "abc":
        (folder / f"{name}.bin").write_bytes(b"x" * 900)
    deep = folder
    for level in range(intake.MAX_FOLDER_DEPTH + 2):
        deep = deep / f"level{level}"
    deep.mkdir(parents=True)
    (deep / "deep.txt").write_bytes(b"x")
    (folder / "many").mkdir()
    for n in range(30):
        (folder / "many" / f"{n:02}.txt").write_bytes(b"x")
    messages, target = mirror(course, "limits")
    assert mention(messages, "larger than", "big.bin") and mention(messages, "in all", "c.bin")
    assert mention(messages, "nested more than") and mention(messages, "first 20 entries", "many")
    assert mention(messages, "more than 5 files")
    assert sum(p.is_file() for p in target.rglob("*")) == 1 + 5
    assert not (target / "big.bin").exists() and (target / "a.bin").exists() and not (target / "c.bin").exists()


def test_a_very_long_path_is_skipped(course):
    folder = submission_folder(course, "long")
    (folder / NOTEBOOK).write_bytes(encoded(answered(course)))
    deep = folder
    for level in range(5):
        deep = deep / (f"{level}" * 250)
    deep.mkdir(parents=True)
    (deep / "file.txt").write_bytes(b"x")
    messages, target = mirror(course, "long")
    assert mention(messages, "too long") and not any(p.name == "file.txt" for p in target.rglob("*"))


def test_submitted_is_never_written(course):
    """Every case above ran on this course's submitted/; mirroring it all again changes nothing there."""
    before = tree_state(course / "submitted", digests=True)
    work = course / "build" / "grading" / ASSIGNMENT
    for student in sorted(p.name for p in (course / "submitted").iterdir() if p.is_dir() and not p.is_symlink()):
        with time_limit(60):
            mirror_submission(course, work, ASSIGNMENT, student)
    assert tree_state(course / "submitted", digests=True) == before


# --- nbgrader's own sanitising step on the mirror -------------------------------------------


@pytest.fixture(scope="module")
def sanitise(course):
    """Run nbgrader's sanitising phase on one learner's mirror, as pipeline.py does."""
    from grader.grading.autograde.nbgrader_steps import run_phase
    from grader.grading.run.course_setup import load_config

    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])  # alembic
    config = load_config(course)
    work = course / "build" / "grading" / ASSIGNMENT

    def run(student: str) -> nbformat.NotebookNode:
        run_phase(config, course, ASSIGNMENT, student, "sanitize", os.path.relpath(work / "submitted", course))
        return nbformat.read(course / "autograded" / student / ASSIGNMENT / NOTEBOOK, as_version=4)

    return run


@pytest.mark.parametrize("case", list(REPAIRS))
def test_nbgrader_sanitises_every_repaired_notebook(course, sanitise, case):
    damage, _ = REPAIRS[case]
    submit(course, f"sanitise_{case}", encoded(damaged(course, damage)))
    sanitised = sanitise(f"sanitise_{case}")
    assert any("my answer for layer_norm_backward" in c.source for c in sanitised.cells)


@pytest.mark.parametrize("make", [submit_odd_strings, submit_format_3, submit_odd_files])
def test_nbgrader_sanitises_odd_strings_old_formats_and_odd_files(course, sanitise, make):
    student = f"sanitise_{make.__name__}"
    make(course, student)
    sanitised = sanitise(student)
    assert any("layer_norm_backward" in c.source for c in sanitised.cells)


# --- fuzzing ----------------------------------------------------------------------------------

# A longer local run: INTAKE_FUZZ_EXAMPLES=3000 INTAKE_SANITISE_EXAMPLES=300 INTAKE_FUZZ_RANDOM=1
FUZZ_EXAMPLES = int(os.environ.get("INTAKE_FUZZ_EXAMPLES", "150"))
SANITISE_EXAMPLES = int(os.environ.get("INTAKE_SANITISE_EXAMPLES", "25"))
DERANDOMIZE = not os.environ.get("INTAKE_FUZZ_RANDOM")  # CI is deterministic; a local run may explore
HUGE, DEEP = "@@huge-number@@", "@@deep-nesting@@"  # spliced into the JSON text: json.dumps cannot write them

odd_text = st.lists(st.sampled_from(["\ud800", "\udfff", "\x00", "\x1b", "\u2028", "\ufeff", "é", "😀", "\"", "\\",
                                     "layer_norm_vjp", "test_layer_norm_vjp", " ", "\n", HUGE, DEEP]),
                    max_size=6).map("".join)
scalars = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | odd_text
           | st.sampled_from(["code", "markdown", "raw", "heading", 3, "3", 1e308, -1, "yes"])
           | st.integers(10**4, 2 * 10**5).map(lambda n: "x" * n))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8) | odd_text, inner, max_size=4), max_leaves=12)
NBGRADER_KEYS = ["grade_id", "grade", "solution", "locked", "points", "schema_version", "task", "cell_type",
                 "checksum", "extra"]
CELL_KEYS = ["cell_type", "source", "metadata", "outputs", "execution_count", "id", "attachments"]


@st.composite
def any_path(draw, document):
    """A path to some node of ``document``, biased towards the cells and their nbgrader metadata."""
    path, node = [], document
    if draw(st.booleans()) and isinstance(document, dict) and isinstance(document.get("cells"), list) \
            and document["cells"]:
        index = draw(st.integers(0, len(document["cells"]) - 1))
        path, node = ["cells", index], document["cells"][index]
        key = draw(st.sampled_from(CELL_KEYS + ["nbgrader"]))
        if key == "nbgrader":
            return path + ["metadata", "nbgrader"] + draw(st.sampled_from([[], *[[k] for k in NBGRADER_KEYS]]))
        return path + [key]
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 9)) < 8:
        key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
        path.append(key)
        node = node[key]
    return path


def put(document, path, value):
    """``document`` with the node at ``path`` replaced (made, where the path does not exist yet)."""
    if not path:
        return value
    node = document
    for key in path[:-1]:
        if isinstance(node, dict):
            node = node.setdefault(key, {})
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            return document
        if not isinstance(node, (dict, list)):
            return document
    if isinstance(node, dict) or (isinstance(node, list) and isinstance(path[-1], int) and path[-1] < len(node)):
        node[path[-1]] = value
    return document


@st.composite
def mutated_notebooks(draw, release: dict) -> bytes:
    """The release, answered, then damaged in a few places, then perhaps mangled as bytes."""
    document = copy.deepcopy(release)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(any_path(document))
        action = draw(st.sampled_from(["replace", "replace", "delete", "deepen", "duplicate", "nest_nbgrader"]))
        if action == "replace":
            document = put(document, path, draw(json_values))
        elif action == "delete" and path:
            document = put(document, path, None) if draw(st.booleans()) else document
        elif action == "deepen":
            document = put(document, path, DEEP)
        elif action == "duplicate" and isinstance(document, dict) and isinstance(document.get("cells"), list) \
                and document["cells"]:
            document["cells"].append(copy.deepcopy(draw(st.sampled_from(document["cells"]))))
        elif action == "nest_nbgrader" and isinstance(document, dict) and isinstance(document.get("cells"), list) \
                and document["cells"]:
            cell = draw(st.sampled_from(document["cells"]))
            if isinstance(cell, dict):
                cell["metadata"] = {"nbgrader": draw(json_values)}
    text = json.dumps(document, ensure_ascii=draw(st.booleans()))
    text = text.replace(json.dumps(HUGE), "9" * draw(st.integers(1, 6000)))
    depth = draw(st.integers(50, 3000))
    text = text.replace(json.dumps(DEEP), "[" * depth + "]" * depth)
    data = text.encode("utf-8", "surrogatepass")
    mangle = draw(st.sampled_from(["none"] * 6 + ["truncate", "bom", "utf16", "latin1", "flip"]))
    if mangle == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    elif mangle == "bom":
        data = b"\xef\xbb\xbf" + data
    elif mangle == "utf16":
        data = text.encode("utf-16", "surrogatepass")
    elif mangle == "latin1":
        data = text.encode("latin-1", "replace")
    elif mangle == "flip":
        position = draw(st.integers(0, len(data) - 1))
        data = data[:position] + bytes([draw(st.integers(0, 255))]) + data[position + 1:]
    return data


def fuzz_one(course, data: bytes, student: str) -> Path:
    folder = submission_folder(course, student)
    (folder / NOTEBOOK).write_bytes(data)
    messages, target = mirror(course, student)
    assert (folder / NOTEBOOK).read_bytes() == data  # mirror() checked the rest of submitted/
    blank = is_blank(course, target)
    assert not blank or mention(messages, NOTEBOOK, "scores zero"), messages
    event("replaced by the blank release" if blank else "repaired" if messages else "unchanged")
    return target


@pytest.fixture(scope="module")
def answered_release(course):
    return answered(course)


def fuzz_settings(examples: int):
    return settings(max_examples=examples, deadline=None, derandomize=DERANDOMIZE, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example])


@pytest.mark.slow  # Hypothesis, hundreds of examples
@fuzz_settings(FUZZ_EXAMPLES)
@given(data=st.data())
def test_fuzzed_notebooks_always_become_valid_notebooks(course, answered_release, data):
    fuzz_one(course, data.draw(mutated_notebooks(answered_release)), "fuzz")


@pytest.mark.slow  # Hypothesis, hundreds of examples
@fuzz_settings(FUZZ_EXAMPLES // 3)
@given(raw=st.binary(max_size=2000))
def test_fuzzed_bytes_always_become_valid_notebooks(course, raw):
    fuzz_one(course, raw, "fuzz_bytes")


@pytest.mark.slow  # Hypothesis, nbgrader on each example
@fuzz_settings(SANITISE_EXAMPLES)
@given(data=st.data())
def test_nbgrader_sanitises_whatever_intake_writes(course, answered_release, sanitise, data):
    fuzz_one(course, data.draw(mutated_notebooks(answered_release)), "fuzz_sanitise")
    sanitise("fuzz_sanitise")



def repaired_twice(course, raw: bytes):
    """intake's repair of ``raw`` as it runs (the cells validated together, one at a time only if that
    fails), and with every cell repaired on its own: (bytes, messages) of each."""
    release = notebook_repair.Release.read(course / "release" / ASSIGNMENT / NOTEBOOK)

    def refused(content):
        raise nbformat.ValidationError("every cell is repaired on its own")

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(notebook_repair, "unchecked_cell", refused)
        one_by_one = notebook_repair.intake_notebook(raw, release, "twice")
    return notebook_repair.intake_notebook(raw, release, "twice"), one_by_one


@pytest.mark.parametrize("case", list(REPAIRS))
def test_one_validation_of_the_whole_notebook_repairs_as_one_per_cell(course, case):
    together, one_by_one = repaired_twice(course, encoded(damaged(course, REPAIRS[case][0])))
    assert together == one_by_one


@pytest.mark.slow  # Hypothesis, hundreds of examples
@fuzz_settings(FUZZ_EXAMPLES // 2)
@given(data=st.data())
def test_one_validation_of_fuzzed_notebooks_repairs_as_one_per_cell(course, answered_release, data):
    together, one_by_one = repaired_twice(course, data.draw(mutated_notebooks(answered_release)))
    assert together == one_by_one
