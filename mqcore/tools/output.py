"""Output helpers shared by the ``mqstore`` subcommands: JSON lines or a streamed table."""
from __future__ import annotations

import base64
import datetime
import json
import re
from collections.abc import Sequence
from typing import IO, Any

_PRINTABLE_ASCII = re.compile(rb"[\t\n\r\x20-\x7e]*")


def body_fields(body: bytes) -> dict[str, str]:
    """``{"body": text}`` when the body is printable UTF-8, else ``{"body_base64": ...}``.

    Why both: most bodies are text and an operator wants to read them; binary (or
    compressed) bodies must still round-trip exactly, which base64 does.
    """
    if _PRINTABLE_ASCII.fullmatch(body):
        return {"body": body.decode("ascii")}
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and all(ch.isprintable() or ch in "\t\n\r" for ch in text):
        return {"body": text}
    return {"body_base64": base64.b64encode(body).decode("ascii")}


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as UTC ISO-8601 (``-`` when 0 or out of range)."""
    if ms <= 0:
        return "-"
    try:
        dt = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (ms % 1000)


class Emitter:
    """Writes rows as JSON lines, or as a fixed-width table streamed row by row.

    ``columns`` are (key, title, width); the last column is not padded. Table cells are
    shortened with ``…`` so one row stays one line.
    """

    def __init__(self, out: IO[str], fmt: str, columns: Sequence[tuple[str, str, int]]):
        self.out = out
        self.fmt = fmt
        self.columns = columns
        self.rows = 0

    def row(self, row: dict[str, Any]) -> None:
        if self.fmt == "jsonl":
            self.out.write(json.dumps(row, ensure_ascii=False) + "\n")
        else:
            if self.rows == 0:
                self.out.write(self._line([title for _, title, _ in self.columns]) + "\n")
            self.out.write(self._line([_cell(row.get(key)) for key, _, _ in self.columns]) + "\n")
        self.rows += 1

    def _line(self, cells: list[str]) -> str:
        parts = []
        for i, ((_, _, width), cell) in enumerate(zip(self.columns, cells)):
            if i == len(self.columns) - 1:
                parts.append(cell)
            else:
                if len(cell) > width:
                    cell = cell[: width - 1] + "…"
                parts.append(cell.ljust(width))
        return " ".join(parts).rstrip()


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    text = str(value)
    return text.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
