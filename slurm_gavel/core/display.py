"""Text from users, made safe for an admin's terminal: one function for all listing output.

Job names, comments, user and account names, model names and reasons come from
users.  Printed raw, an ESC sequence recolours or retitles the terminal (or worse),
``\\r`` and newlines forge table rows, and a bidi override (U+202E) makes a line
read backwards.  `printable` replaces every such character by a visible escape
(``\\x1b``, ``\\n``, ``\\u202e``); `clean` does it to every string of a JSON-able
structure -- the escaped text is then what the JSON strings hold, so ``jq -r``
output is as safe as the table -- and turns non-finite numbers into strings
(``"inf"``), which keeps the JSON valid.  `PrintableLog` does it to the daemon's log
messages (a job's comment or a path in a user's directory may be quoted there).
"""
from __future__ import annotations

import logging
import math
import re
import unicodedata

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Cc: C0, DEL and C1 controls; Cf: format (bidi overrides and isolates, zero-width
# characters, ...); Zl/Zp: line and paragraph separators; Cs: lone surrogates.
_UNSAFE_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs"}
_NOT_PLAIN = re.compile(r"[^\x20-\x7e]")


def _escape(m: re.Match) -> str:
    ch = m.group()
    if ch in _NAMED:
        return _NAMED[ch]
    if unicodedata.category(ch) not in _UNSAFE_CATEGORIES:
        return ch                           # letters, marks, symbols of any script
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text) -> str:
    """`text` (anything: str() is taken) with every control or format character escaped."""
    text = text if isinstance(text, str) else str(text)
    if text.isascii() and text.isprintable():
        return text
    return _NOT_PLAIN.sub(_escape, text)


def clean(value):
    """`value` (dicts, lists, strings, numbers, None) with every string `printable`, keys
    included, and inf/-inf/nan as the strings "inf", "-inf", "nan"."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(k) if isinstance(k, str) else k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


class PrintableLog(logging.Filter):
    """A handler filter: each record's message, its arguments filled in, made `printable`.
    Tracebacks are left alone: they are the program's own text."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not (message.isascii() and message.isprintable()):
            record.msg, record.args = printable(message), None
        return True


__all__ = ["PrintableLog", "clean", "printable"]
