"""A CSV file as records of fields that remember their bytes: change one field, keep every other byte.

Canvas's gradebook export is filled in place (``grader.grading.export.canvas.fill_export``): the csv
module would re-quote fields and rewrite line ends, so this reader keeps each field's raw text
(quotes included) and each record's line end, and ``join`` gives back the file unchanged.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_PLAIN = re.compile(r'[^,"\r\n]*')


class CsvSyntaxError(ValueError):
    pass


@dataclass
class Field:
    raw: str  # as written, quotes included
    value: str  # as read


@dataclass
class Record:
    fields: list[Field]
    end: str  # "\r\n", "\n", "\r" or "" (the last line without one)

    def values(self) -> list[str]:
        return [f.value for f in self.fields]


def split(text: str) -> list[Record]:
    """RFC 4180 records of ``text``; a quoted field may hold commas, quotes ("") and line ends."""
    records, i, n = [], 0, len(text)
    while i < n:
        fields = []
        while True:
            start = i
            if i < n and text[i] == '"':
                parts, i = [], i + 1
                while True:
                    j = text.find('"', i)
                    if j < 0:
                        raise CsvSyntaxError(f"a quoted field opened at character {start} never closes")
                    parts.append(text[i:j])
                    if text.startswith('""', j):
                        parts.append('"')
                        i = j + 2
                        continue
                    i = j + 1
                    break
                value = "".join(parts)
            else:
                i = _PLAIN.match(text, i).end()
                value = text[start:i]
                if i < n and text[i] == '"':
                    raise CsvSyntaxError(f"a quote inside an unquoted field at character {i}")
            fields.append(Field(text[start:i], value))
            if i < n and text[i] == ",":
                i += 1
                continue
            break
        if text.startswith("\r\n", i):
            end = "\r\n"
        elif i < n and text[i] in "\r\n":
            end = text[i]
        elif i >= n:
            end = ""
        else:
            raise CsvSyntaxError(f"unexpected {text[i]!r} after a quoted field at character {i}")
        i += len(end)
        records.append(Record(fields, end))
    return records


def join(records: list[Record]) -> str:
    return "".join(",".join(f.raw for f in r.fields) + r.end for r in records)


def quote(value: str) -> str:
    """``value`` as a CSV field: quoted when it must be (what csv.QUOTE_MINIMAL does)."""
    if any(c in value for c in ',"\r\n') or value != value.strip():
        return '"' + value.replace('"', '""') + '"'
    return value
