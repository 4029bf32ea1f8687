"""The learner's notebook, repaired: any bytes in, a valid v4.5 notebook nbgrader accepts (or why not) out.

Part of the intake (``grader.grading.run.intake``, which reads the bytes without trusting them).
The notebook is parsed within limits (size, nesting, cells), brought to v4.5 by nbformat and
rebuilt cell by cell; its nbgrader metadata is checked against the release the learner was
given, so nbgrader's sanitising step has nothing left to raise on. What is dropped or repaired
is said in a short message to the learner.
"""
from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat import v4
from nbgrader.nbgraderformat import MetadataValidator

from grader.grading.run.terminal import printable

MAX_JSON_DEPTH = 100  # notebooks nest about 10 deep; nbformat and jsonschema recurse per level
MAX_JSON_VALUES = 1_000_000  # 20 MiB of "[]," would take a GiB and half a minute to parse
MAX_CELLS = 2000  # rebuilding a cell costs about 1 ms
MAX_INT_DIGITS = 64  # int() refuses over 4300 digits; no notebook field needs more than a few
NAMES_LISTED = 5  # names quoted in one message

CELL_MAKERS = {"code": v4.new_code_cell, "markdown": v4.new_markdown_cell, "raw": v4.new_raw_cell}
CELL_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # nbformat 4.5's cell id
SURROGATE = re.compile("[\ud800-\udfff]")


class Rejected(Exception):
    """A notebook that cannot be repaired; the text completes '<name>.ipynb ...'."""


def listed(names: list[str]) -> str:
    more = len(names) - NAMES_LISTED
    return ", ".join(names[:NAMES_LISTED]) + (f" and {more} more" if more > 0 else "")


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return printable(lines[0] if lines else type(error).__name__, 200)


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
