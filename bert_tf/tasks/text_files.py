"""Rows of a user's data file, by extension: the readers behind `--task_name=classification`,
`regression` and the Korean tasks (`tasks.classification`).

* `.tsv` / `.txt`: tab-separated, a header row naming the columns, no quoting (a `"` is
  text, as in NSMC, KorNLI and the GLUE files), a UTF-8 BOM dropped; every row has as
  many fields as the header.
* `.csv`: comma-separated with the csv module's quoting (a field may hold commas, quotes
  and newlines), a header row.
* `.json`: a JSON list of objects (KLUE's files), or one object per line.
* `.jsonl`: one JSON object per line.

Each row is a `Row`: its values by column name (JSON: the object) and `source`, the
"file:line" that error messages name (a JSON list's object: the line it starts on).
`Row.get(name)` reads a column; in JSON a dotted name reaches into nested objects
(`labels.real-label`, KLUE-STS). Blank lines are skipped everywhere.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "train.tsv")
>>> _ = open(path, "w").write('id\\tdocument\\tlabel\\n1\\t"좋다"\\t1\\n2\\t\\t0\\n')
>>> rows = read_rows(path)
>>> [(r.get("document"), r.get("label")) for r in rows], rows[1].source.endswith(":3")
([('"좋다"', '1'), ('', '0')], True)
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
from typing import Any, List, Mapping, Optional

from bert_tf.tasks.base import TaskDataError, read_task_text

TABLE_EXTENSIONS = (".tsv", ".txt")
JSON_EXTENSIONS = (".json", ".jsonl")
EXTENSIONS = TABLE_EXTENSIONS + (".csv",) + JSON_EXTENSIONS
_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of a data file: `values` by column (a JSON object as it is), `source`
    "file:line"."""

    values: Mapping[str, Any]
    source: str

    def get(self, column: str, default: Any = _MISSING) -> Any:
        """The value of `column` (a dotted path into nested JSON objects); `default` when
        the row has no such column, else TaskDataError naming the row and its columns."""
        value: Any = self.values
        for i, key in enumerate([column] if column in self.values else column.split(".")):
            if not isinstance(value, Mapping) or key not in value:
                if default is not _MISSING:
                    return default
                names = ", ".join(sorted(map(str, self.values)))
                raise TaskDataError(f"{self.source}: no column {column!r} (this row has: "
                                    f"{names}); name the right one with --text_column, "
                                    f"--text_b_column or --label_column")
            value = value[key]
        return value

    def has(self, column: Optional[str]) -> bool:
        """Whether the row has `column` (dotted paths as `get`)."""
        absent = object()
        return bool(column) and self.get(column, absent) is not absent


def is_json(path: str) -> bool:
    return os.path.splitext(path)[1].lower() in JSON_EXTENSIONS


def check_extension(path: str) -> str:
    extension = os.path.splitext(path)[1].lower()
    if extension not in EXTENSIONS:
        raise TaskDataError(f"{path}: unknown file type {extension or '(none)'!r}; the data "
                            f"files are .tsv/.txt (tab-separated, a header row), .csv, "
                            f".json or .jsonl")
    return extension


def read_rows(path: str, missing_hint: str = "check the file flag") -> List[Row]:
    """The rows of `path`, read as its extension says (module docstring)."""
    extension = check_extension(path)
    text = read_task_text(path, missing_hint)
    if extension in JSON_EXTENSIONS:
        return _json_rows(path, text, lines=extension == ".jsonl")
    if extension == ".csv":
        return _csv_rows(path, text)
    return _tsv_rows(path, text)


def _header(path: str, names: List[str]) -> List[str]:
    names = [n.strip() for n in names]
    seen = set()
    for name in names:
        if not name or name in seen:
            raise TaskDataError(f"{path}:1: the header row names columns {names}; every "
                                f"column needs a distinct name (the first row is the header)")
        seen.add(name)
    return names


def _tsv_rows(path: str, text: str) -> List[Row]:
    lines = text.split("\n")
    if not lines or not lines[0].strip():
        raise TaskDataError(f"{path}:1: expected a header row of tab-separated column names")
    header = _header(path, lines[0].rstrip("\r").split("\t"))
    rows = []
    for line_no, line in enumerate(lines[1:], start=2):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(header):
            raise TaskDataError(f"{path}:{line_no}: {len(fields)} tab-separated fields, the "
                                f"header has {len(header)} ({', '.join(header)}); fix or "
                                f"drop the row")
        rows.append(Row(dict(zip(header, fields)), f"{path}:{line_no}"))
    return rows


def _csv_rows(path: str, text: str) -> List[Row]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if not header:
            raise TaskDataError(f"{path}:1: expected a header row of comma-separated names")
        header = _header(path, header)
        rows, line_no = [], reader.line_num + 1
        for fields in reader:
            if fields and any(f.strip() for f in fields):
                if len(fields) != len(header):
                    raise TaskDataError(f"{path}:{line_no}: {len(fields)} comma-separated "
                                        f"fields, the header has {len(header)} "
                                        f"({', '.join(header)}); quote fields that hold "
                                        f"commas, or fix the row")
                rows.append(Row(dict(zip(header, fields)), f"{path}:{line_no}"))
            line_no = reader.line_num + 1
    except csv.Error as e:
        raise TaskDataError(f"{path}:{reader.line_num}: not valid CSV ({e})") from None
    return rows


def _object(path: str, line_no: int, value) -> Row:
    if not isinstance(value, dict):
        raise TaskDataError(f"{path}:{line_no}: expected a JSON object per row, got "
                            f"{type(value).__name__}")
    return Row(value, f"{path}:{line_no}")


def _json_rows(path: str, text: str, lines: bool) -> List[Row]:
    start = len(text) - len(text.lstrip())
    if not lines and text[start:start + 1] == "[":
        return _json_list(path, text, start + 1)
    rows = []
    for line_no, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            hint = "" if lines else " (a .json file is a list of objects or one object a line)"
            raise TaskDataError(f"{path}:{line_no}: not a JSON object ({e.msg}, column "
                                f"{e.colno}){hint}") from None
        rows.append(_object(path, line_no, value))
    return rows


def _json_list(path: str, text: str, position: int) -> List[Row]:
    """The objects of a JSON list, each with the line it starts on."""
    decoder = json.JSONDecoder()
    rows = []

    def skip(i):
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    def fail(i, what):
        line = text.count("\n", 0, i) + 1
        raise TaskDataError(f"{path}:{line}: not valid JSON ({what})")

    position = skip(position)
    if text[position:position + 1] == "]":
        return rows
    while True:
        line = text.count("\n", 0, position) + 1
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as e:
            fail(e.pos, e.msg)
        rows.append(_object(path, line, value))
        position = skip(position)
        if text[position:position + 1] == "]":
            return rows
        if text[position:position + 1] != ",":
            fail(position, "expected , or ] after an object")
        position = skip(position + 1)
