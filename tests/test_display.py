"""slurm_gavel.core.display: users' text escaped for the terminal, in tables and JSON."""
from __future__ import annotations

import json

from slurm_gavel.core.display import clean, printable

HOSTILE = "a\x1b]0;owned\x07\x1b[31mred\r\nFAKE  1 root\u202eevil\x9b\u2028\u200b\ud800\x00\t\x7f"


def test_every_control_and_format_character_is_escaped_visibly():
    out = printable(HOSTILE)
    assert out == ("a\\x1b]0;owned\\x07\\x1b[31mred\\r\\nFAKE  1 root\\u202eevil\\x9b\\u2028"
                   "\\u200b\\ud800\\x00\\t\\x7f")
    assert out.isprintable() and out.isascii()
    for text in ("plain-name_1", "résumé", "日本語", "naïve ü", "emoji \U0001f600"):
        assert printable(text) == text               # people's names stay as they are
    assert printable(42) == "42"


def test_clean_escapes_keys_and_values_and_makes_numbers_strict_json():
    data = clean({"jobs": [{"name": HOSTILE, "priority": float("inf"), "x": float("nan"),
                            "share": {"v\x1b": -float("inf")}, "n": 3, "none": None}]})
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    assert "\x1b" not in text and "\u202e" not in text and "\x9b" not in text
    job = json.loads(text)["jobs"][0]
    assert job["name"] == printable(HOSTILE)         # what jq -r prints is escaped too
    assert job["priority"] == "inf" and job["x"] == "nan" and job["share"] == {"v\\x1b": "-inf"}
    assert job["n"] == 3 and job["none"] is None
