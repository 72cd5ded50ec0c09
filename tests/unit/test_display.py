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


def test_log_messages_are_escaped_but_tracebacks_kept(capsys):
    import io
    import logging

    from slurm_gavel.core.display import PrintableLog

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(PrintableLog())
    log = logging.getLogger("test_display.escaped")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("bad flags of job %s: %s", "7", HOSTILE)
        try:
            raise ValueError("x")
        except ValueError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "bad flags of job 7: " + printable(HOSTILE)
    assert lines[1] == "failed" and lines[2].startswith("Traceback")


def test_throughputs_show_prints_model_names_escaped(tmp_path, capsys):
    """A model name is a user's text (`model=` in the comment): `slurm-gavel throughputs
    show` prints it escaped, table and --json, through the same `printable`."""
    from slurm_gavel.cli.throughputs import main as tp_main
    from slurm_gavel.estimator.learning import EstimatingThroughputs
    from slurm_gavel.daemon.store import SqliteStore

    from tests.support.estimator import _observation, job, make_table, measure, TYPES

    evil = "twin\x1b[2J\u202e\nFAKE"
    db = tmp_path / "state.db"
    store = SqliteStore(db)
    est = EstimatingThroughputs(make_table(), store=store)
    jobs = [job(7, evil), job(8, "conv")]
    store.observe(0.0, _observation(jobs))
    est.lookup(jobs, TYPES)
    measure(est, [("7", "k80", 2.0)])
    est.lookup(jobs, TYPES)
    store.close()
    capsys.readouterr()
    assert tp_main(["throughputs", "show", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert not any(ch in text for ch in ("\x1b", "\u202e")) and printable(evil) in text
    assert not any(line.startswith("FAKE") for line in text.splitlines())
    assert tp_main(["throughputs", "show", "--db", str(db), "--json"]) == 0
    text = capsys.readouterr().out
    data = json.loads(text)
    assert not any(ch in text for ch in ("\x1b", "\u202e"))
    assert printable(evil) in {e["model"] for e in data["estimates"]}
