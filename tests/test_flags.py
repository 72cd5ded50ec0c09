"""The gavel flag grammar: slurm_gavel/flags.py, and the same cases through job_submit.lua.

Both implementations must accept and reject the same comments with the same
messages and write the same admin comment. The Lua side runs the real plugin
file under a standalone interpreter with a fake `slurm` table
(tests/lua/driver.lua); without an interpreter those tests skip, except under
CI (env CI set) where they fail.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_gavel.core.errors import InputError
from slurm_gavel.slurm.flags import (MAX_SLO_SECONDS, MAX_SPEEDS, MAX_STEPS, UNIT_SECONDS,
                                     FlagError, GavelFlags, from_admin_comment, is_admin_comment,
                                     is_gavel_comment, parse_comment, to_admin_comment, with_entity)

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24

ROOT = pathlib.Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "slurm_conf" / "job_submit.lua"
DRIVER = ROOT / "tests" / "lua" / "driver.lua"

UNIT = "(s, m, h or d)"
KNOWN = "(known keys: model, weight, entity, slo, steps, speeds, types)"
SPEEDS_EG = "e.g. speeds=v100:4.2,p100:2.1"


def err(item, problem):
    return f"gavel flags: {item}: {problem}"


LONG_E = "model=x" + "é" * 40          # 87 bytes: shortened in messages, on a char boundary
LONG_E_SHOWN = ("model=x" + "é" * 40).encode()[:63].decode() + "..."   # 7 + 28*2 = 63 bytes
SIXTEEN = ",".join(f"g{i:02d}:{i + 1}" for i in range(16))             # g00:1,...,g15:16
LONG_TYPE = "x" * 80


def short(text):
    """What messages show of a long ASCII item: its first 64 bytes and "..."."""
    return text if len(text) <= 72 else text[:64] + "..."

# (comment, account, expected): expected is the admin comment of an accepted job,
# the user's message for a rejected one, or None for a comment that is not gavel's.
CASES = [
    # valid
    ("gavel", "acct", "gavel:v1 weight=1 entity=acct"),
    ("gavel", None, "gavel:v1 weight=1"),
    ("gavel ", None, "gavel:v1 weight=1"),
    ("gavel model=resnet50 weight=2 slo=36h steps=100000", "acct",
     "gavel:v1 model=resnet50 weight=2 entity=acct slo=129600 steps=100000"),
    ("gavel model=resnet50 weight=2 slo=36h steps=100000", None,
     "gavel:v1 model=resnet50 weight=2 slo=129600 steps=100000"),
    ("gavel   steps=100000\tslo=90m  weight=0.5 model=ResNet-50_v1.5+x entity=physics ", "acct",
     "gavel:v1 model=ResNet-50_v1.5+x weight=0.5 entity=physics slo=5400 steps=100000"),
    ("gavel\nmodel=transformer\r\n", "a", "gavel:v1 model=transformer weight=1 entity=a"),
    ("gavel\tmodel=unknown.to.any.table", None, "gavel:v1 model=unknown.to.any.table weight=1"),
    ("gavel slo=1.5d", None, "gavel:v1 weight=1 slo=129600"),
    ("gavel slo=45s", None, "gavel:v1 weight=1 slo=45"),
    ("gavel slo=.5h", None, "gavel:v1 weight=1 slo=1800"),
    ("gavel slo=5.h", None, "gavel:v1 weight=1 slo=18000"),
    ("gavel slo=007m", None, "gavel:v1 weight=1 slo=420"),
    ("gavel slo=0.5s", None, "gavel:v1 weight=1 slo=1"),          # rounds half up
    ("gavel slo=2.5s", None, "gavel:v1 weight=1 slo=3"),          # half up, not to even
    ("gavel slo=1.000001h", None, "gavel:v1 weight=1 slo=3600"),  # 0.0036 s rounds away
    ("gavel slo=365d", None, f"gavel:v1 weight=1 slo={MAX_SLO_SECONDS}"),
    ("gavel slo=8760.000001h", None, f"gavel:v1 weight=1 slo={MAX_SLO_SECONDS}"),
    ("gavel weight=0.000001", None, "gavel:v1 weight=0.000001"),
    ("gavel weight=1000000", None, "gavel:v1 weight=1000000"),
    ("gavel weight=2.50", None, "gavel:v1 weight=2.5"),
    ("gavel weight=.5", None, "gavel:v1 weight=0.5"),
    ("gavel weight=007", None, "gavel:v1 weight=7"),
    ("gavel weight=0.1", None, "gavel:v1 weight=0.1"),
    ("gavel weight=123456.654321", None, "gavel:v1 weight=123456.654321"),
    ("gavel steps=1", None, "gavel:v1 weight=1 steps=1"),
    ("gavel steps=0001", None, "gavel:v1 weight=1 steps=1"),
    ("gavel steps=1000000000000000", None, f"gavel:v1 weight=1 steps={MAX_STEPS}"),
    ("gavel model=" + "m" * 64, None, "gavel:v1 model=" + "m" * 64 + " weight=1"),
    ("gavel entity=" + "e" * 64, "acct", "gavel:v1 weight=1 entity=" + "e" * 64),
    ("gavel entity=team.a_b-c", "acct", "gavel:v1 weight=1 entity=team.a_b-c"),
    ("gavel", "bad account!", "gavel:v1 weight=1"),              # account the grammar can't carry
    ("gavel", "a" * 65, "gavel:v1 weight=1"),
    # speeds: the throughput hint
    ("gavel model=mynet speeds=v100:4.2,p100:2.1,k80:0.9", None,
     "gavel:v1 model=mynet weight=1 speeds=k80:0.9,p100:2.1,v100:4.2"),
    ("gavel speeds=v100:4.2 steps=10 model=m slo=1h weight=2 entity=e", "acct",
     "gavel:v1 model=m weight=2 entity=e slo=3600 steps=10 speeds=v100:4.2"),
    ("gavel speeds=a100-80gb:1000000,K80:.5,v100:007,p100:2.50,x.y_z:5.,A:0.000001", None,
     "gavel:v1 weight=1 speeds=A:0.000001,K80:0.5,a100-80gb:1000000,p100:2.5,v100:7,x.y_z:5"),
    ("gavel speeds=ab:2,a_b:3,a.b:4,a-b:1,B:5", None,        # bytewise order, not the locale's
     "gavel:v1 weight=1 speeds=B:5,a-b:1,a.b:4,a_b:3,ab:2"),
    ("gavel speeds=v100:1,V100:2", None, "gavel:v1 weight=1 speeds=V100:2,v100:1"),  # case matters
    ("gavel speeds=v100:123456.654321", None, "gavel:v1 weight=1 speeds=v100:123456.654321"),
    ("gavel speeds=v100:0.1", None, "gavel:v1 weight=1 speeds=v100:0.1"),
    ("gavel speeds=" + "t" * 32 + ":1", None, "gavel:v1 weight=1 speeds=" + "t" * 32 + ":1"),
    ("gavel speeds=" + SIXTEEN, None, "gavel:v1 weight=1 speeds=" + SIXTEEN),
    ("gavel speeds=", None, err("speeds=", f"empty value, {SPEEDS_EG}")),
    ("gavel speeds=v100", None, err("speeds=v100", f"entry v100 is not TYPE:NUMBER, {SPEEDS_EG}")),
    ("gavel speeds=v100:1,p100", None,
     err("speeds=v100:1,p100", f"entry p100 is not TYPE:NUMBER, {SPEEDS_EG}")),
    ("gavel speeds=v100=1", None, err("speeds=v100=1", f"entry v100=1 is not TYPE:NUMBER, {SPEEDS_EG}")),
    ("gavel speeds=v100:0", None, err("speeds=v100:0", "speed of v100 must be greater than 0")),
    ("gavel speeds=v100:0.000000", None,
     err("speeds=v100:0.000000", "speed of v100 must be greater than 0")),
    ("gavel speeds=v100:1,p100:0", None,
     err("speeds=v100:1,p100:0", "speed of p100 must be greater than 0")),
    ("gavel speeds=v100:1,v100:2", None, err("speeds=v100:1,v100:2", "GPU type v100 is given twice")),
    ("gavel speeds=v100:1,v100:x", None,                     # each entry whole before the duplicate
     err("speeds=v100:1,v100:x", f"speed of v100 must be a number, {SPEEDS_EG}")),
    ("gavel speeds=v100:1,", None, err("speeds=v100:1,", f"empty entry (a stray comma), {SPEEDS_EG}")),
    ("gavel speeds=,v100:1", None, err("speeds=,v100:1", f"empty entry (a stray comma), {SPEEDS_EG}")),
    ("gavel speeds=v100:1,,p100:2", None,
     err("speeds=v100:1,,p100:2", f"empty entry (a stray comma), {SPEEDS_EG}")),
    ("gavel speeds=,", None, err("speeds=,", f"empty entry (a stray comma), {SPEEDS_EG}")),
    ("gavel speeds=v100:", None, err("speeds=v100:", f"speed of v100 must be a number, {SPEEDS_EG}")),
    ("gavel speeds=:1", None, err("speeds=:1", f"entry :1 has no GPU type before ':', {SPEEDS_EG}")),
    ("gavel speeds=:", None, err("speeds=:", f"entry : has no GPU type before ':', {SPEEDS_EG}")),
    ("gavel speeds=v100:1:2", None, err("speeds=v100:1:2", f"speed of v100 must be a number, {SPEEDS_EG}")),
    ("gavel speeds=v100:-1", None, err("speeds=v100:-1", f"speed of v100 must be a number, {SPEEDS_EG}")),
    ("gavel speeds=v100:1e3", None, err("speeds=v100:1e3", f"speed of v100 must be a number, {SPEEDS_EG}")),
    ("gavel speeds=v100:inf", None, err("speeds=v100:inf", f"speed of v100 must be a number, {SPEEDS_EG}")),
    ("gavel speeds=v100:.", None, err("speeds=v100:.", f"speed of v100 must be a number, {SPEEDS_EG}")),
    ("gavel speeds=v100:0.0000001", None,
     err("speeds=v100:0.0000001", "speed of v100: at most 6 digits after the decimal point")),
    ("gavel speeds=v100:1000000.000001", None,
     err("speeds=v100:1000000.000001", "speed of v100 must be at most 1000000")),
    ("gavel speeds=v100:" + "9" * 40, None,
     err("speeds=v100:" + "9" * 40, "speed of v100 must be at most 1000000")),
    ("gavel speeds=v/100:1", None,
     err("speeds=v/100:1", "GPU type v/100 may use only letters, digits and . _ -")),
    ("gavel speeds=a+b:1", None, err("speeds=a+b:1", "GPU type a+b may use only letters, digits and . _ -")),
    ("gavel speeds=résnet:1", None,
     err("speeds=résnet:1", "GPU type résnet may use only letters, digits and . _ -")),
    ("gavel speeds=" + "t" * 33 + ":1", None,
     err("speeds=" + "t" * 33 + ":1", "GPU type " + "t" * 33 + " is longer than 32 characters")),
    ("gavel speeds=" + LONG_TYPE + ":1", None,
     err(short("speeds=" + LONG_TYPE + ":1"), f"GPU type {short(LONG_TYPE)} is longer than 32 characters")),
    ("gavel speeds=" + "é" * 50, None,                       # item and entry both shortened
     err("speeds=" + "é" * 28 + "...", "entry " + "é" * 32 + "... is not TYPE:NUMBER, " + SPEEDS_EG)),
    ("gavel speeds=" + SIXTEEN + ",g16:17", None,
     err(short("speeds=" + SIXTEEN + ",g16:17"), f"at most {MAX_SPEEDS} GPU types")),
    ("gavel speeds=" + SIXTEEN + ",", None,
     err(short("speeds=" + SIXTEEN + ","), f"empty entry (a stray comma), {SPEEDS_EG}")),
    ("gavel speeds=v100:1 speeds=p100:1", None, err("speeds=p100:1", "speeds is given twice")),
    # not key=value
    ("gavel resnet50", None, err("resnet50", "expected key=value, e.g. model=resnet50")),
    ("gavel model=a b", None, err("b", "expected key=value, e.g. model=resnet50")),
    ("gavel weight=2 gavel", None, err("gavel", "expected key=value, e.g. model=resnet50")),
    ("gavel =5", None, err("=5", "missing the key before '='")),
    ("gavel =", None, err("=", "missing the key before '='")),
    # unknown and duplicate keys
    ("gavel foo=1", None, err("foo=1", f"unknown key foo {KNOWN}")),
    ("gavel Model=x", None, err("Model=x", f"unknown key Model {KNOWN}")),
    ("gavel foo=1 slo=36", None, err("foo=1", f"unknown key foo {KNOWN}")),   # first one wins
    ("gavel weight=1 weight=2", None, err("weight=2", "weight is given twice")),
    ("gavel slo=1h model=x slo=1h", None, err("slo=1h", "slo is given twice")),
    # empty values
    ("gavel model=", None, err("model=", "empty value, e.g. model=resnet50")),
    ("gavel weight=", None, err("weight=", "empty value, e.g. weight=2")),
    ("gavel entity=", None, err("entity=", "empty value, e.g. entity=physics")),
    ("gavel slo=", None, err("slo=", "empty value, e.g. slo=36h")),
    ("gavel steps=", None, err("steps=", "empty value, e.g. steps=100000")),
    # model / entity
    ("gavel model=a=b", None, err("model=a=b", "may use only letters, digits and . _ + -")),
    ("gavel model=a%sb", None, err("model=a%sb", "may use only letters, digits and . _ + -")),
    ("gavel model=résnet", None, err("model=résnet", "may use only letters, digits and . _ + -")),
    ("gavel model=x\u2003weight=2", None,
     err("model=x\u2003weight=2", "may use only letters, digits and . _ + -")),
    ("gavel model=" + "m" * 65, None,
     err("model=" + "m" * 65, "longer than 64 characters")),
    ("gavel " + LONG_E, None, err(LONG_E_SHOWN, "may use only letters, digits and . _ + -")),
    ("gavel entity=a+b", None, err("entity=a+b", "may use only letters, digits and . _ -")),
    ("gavel entity=" + "e" * 65, None, err("entity=" + "e" * 65, "longer than 64 characters")),
    # weight
    ("gavel weight=0", None, err("weight=0", "must be greater than 0")),
    ("gavel weight=0.000000", None, err("weight=0.000000", "must be greater than 0")),
    ("gavel weight=-1", None, err("weight=-1", "must be a number, e.g. weight=2 or weight=0.5")),
    ("gavel weight=abc", None, err("weight=abc", "must be a number, e.g. weight=2 or weight=0.5")),
    ("gavel weight=1e3", None, err("weight=1e3", "must be a number, e.g. weight=2 or weight=0.5")),
    ("gavel weight=inf", None, err("weight=inf", "must be a number, e.g. weight=2 or weight=0.5")),
    ("gavel weight=nan", None, err("weight=nan", "must be a number, e.g. weight=2 or weight=0.5")),
    ("gavel weight=0x10", None, err("weight=0x10", "must be a number, e.g. weight=2 or weight=0.5")),
    ("gavel weight=.", None, err("weight=.", "must be a number, e.g. weight=2 or weight=0.5")),
    ("gavel weight=1.2.3", None, err("weight=1.2.3", "must be a number, e.g. weight=2 or weight=0.5")),
    ("gavel weight=0.0000001", None, err("weight=0.0000001", "at most 6 digits after the decimal point")),
    ("gavel weight=1000000.000001", None, err("weight=1000000.000001", "must be at most 1000000")),
    ("gavel weight=" + "9" * 40, None, err("weight=" + "9" * 40, "must be at most 1000000")),
    # slo
    ("gavel slo=36", None, err("slo=36", f"needs a unit {UNIT}, e.g. slo=36h")),
    ("gavel slo=1.5", None, err("slo=1.5", f"needs a unit {UNIT}, e.g. slo=36h")),
    ("gavel slo=36H", None, err("slo=36H", f"unknown unit H (use s, m, h or d), e.g. slo=36h")),
    ("gavel slo=36hours", None, err("slo=36hours", "unknown unit hours (use s, m, h or d), e.g. slo=36h")),
    ("gavel slo=1e3s", None, err("slo=1e3s", "unknown unit e3s (use s, m, h or d), e.g. slo=36h")),
    ("gavel slo=h", None, err("slo=h", f"must be a number with a unit {UNIT}, e.g. slo=36h")),
    ("gavel slo=-1h", None, err("slo=-1h", f"must be a number with a unit {UNIT}, e.g. slo=36h")),
    ("gavel slo=1.2.3h", None, err("slo=1.2.3h", f"must be a number with a unit {UNIT}, e.g. slo=36h")),
    ("gavel slo=.h", None, err("slo=.h", f"must be a number with a unit {UNIT}, e.g. slo=36h")),
    ("gavel slo=0h", None, err("slo=0h", "must be greater than 0")),
    ("gavel slo=0.000s", None, err("slo=0.000s", "must be greater than 0")),
    ("gavel slo=0.4s", None, err("slo=0.4s", "must be at least 1s")),
    ("gavel slo=0.000001d", None, err("slo=0.000001d", "must be at least 1s")),
    ("gavel slo=1.0000001h", None, err("slo=1.0000001h", "at most 6 digits after the decimal point")),
    ("gavel slo=366d", None, err("slo=366d", "must be at most 365d")),
    ("gavel slo=8760.0002h", None, err("slo=8760.0002h", "must be at most 365d")),
    ("gavel slo=31536001s", None, err("slo=31536001s", "must be at most 365d")),
    ("gavel slo=99999999999d", None, err("slo=99999999999d", "must be at most 365d")),
    # steps
    ("gavel steps=0", None, err("steps=0", "must be at least 1")),
    ("gavel steps=000", None, err("steps=000", "must be at least 1")),
    ("gavel steps=1.5", None, err("steps=1.5", "must be a whole number, e.g. steps=100000")),
    ("gavel steps=1e5", None, err("steps=1e5", "must be a whole number, e.g. steps=100000")),
    ("gavel steps=-1", None, err("steps=-1", "must be a whole number, e.g. steps=100000")),
    ("gavel steps=1000000000000001", None, err("steps=1000000000000001", f"must be at most {MAX_STEPS}")),
    ("gavel steps=" + "9" * 30, None, err("steps=" + "9" * 30, f"must be at most {MAX_STEPS}")),
    # not gavel comments: left alone
    ("gavelx model=1", None, None),
    ("Gavel model=x", None, None),
    ("GAVEL", None, None),
    (" gavel model=x", None, None),
    ("", None, None),
    ("my job", None, None),
    ("gavel\u00a0model=x", None, None),   # no-break space is not ASCII whitespace
    ("gavel=1", None, None),
    ("gavel:v1 weight=1", None, None),
]


def python_result(comment, account):
    """What flags.py makes of a comment: admin comment, message, or None."""
    if not is_gavel_comment(comment):
        return None
    try:
        return to_admin_comment(parse_comment(comment, account))
    except FlagError as e:
        return str(e)


# -- flags.py ------------------------------------------------------------------
@pytest.mark.parametrize("comment,account,expected", CASES)
def test_python_parser(comment, account, expected):
    assert python_result(comment, account) == expected
    if expected is not None and expected.startswith("gavel:v1"):
        flags = parse_comment(comment, account)
        assert from_admin_comment(expected) == flags
        assert is_admin_comment(expected)


def test_message_names_flag_and_reason_on_one_line():
    with pytest.raises(InputError) as caught:
        parse_comment("gavel model=resnet50 slo=36")
    e = caught.value
    assert isinstance(e, FlagError)
    assert str(e) == "gavel flags: slo=36: needs a unit (s, m, h or d), e.g. slo=36h"
    assert e.field == "slo=36"
    assert e.problem == "needs a unit (s, m, h or d), e.g. slo=36h"
    for _, _, expected in CASES:
        assert expected is None or "\n" not in expected


def test_flag_error_survives_pickling():
    import pickle
    e = pickle.loads(pickle.dumps(FlagError("slo=36", "why")))
    assert str(e) == "gavel flags: slo=36: why" and e.field == "slo=36"


def test_defaults_and_fields():
    f = parse_comment("gavel")
    assert f == GavelFlags() and f.model is None and f.weight == 1.0
    assert f.entity is None and f.slo_seconds is None and f.steps is None and f.speeds is None
    assert f.speed_map() == {}
    f = parse_comment("gavel model=resnet50 weight=2 slo=36h steps=100000", "acct")
    assert f == GavelFlags("resnet50", 2.0, "acct", 129600, 100000)
    assert parse_comment("gavel entity=mine", "acct").entity == "mine"
    assert with_entity(GavelFlags(), "acct").entity == "acct"
    assert with_entity(GavelFlags(entity="x"), "acct").entity == "x"
    with pytest.raises(Exception):
        f.weight = 3   # frozen


def test_speeds_field():
    f = parse_comment("gavel model=mynet speeds=v100:4.2,p100:2.1,k80:0.9")
    assert f.speeds == (("k80", 0.9), ("p100", 2.1), ("v100", 4.2))
    assert f.speed_map() == {"k80": 0.9, "p100": 2.1, "v100": 4.2}
    assert isinstance(hash(f), int)
    # Any mapping or pairs, normalized: sorted, floats, a tuple of tuples.
    g = GavelFlags(model="mynet", speeds={"v100": 4.2, "p100": 2.1, "k80": 0.9})
    assert g == f and hash(g) == hash(f)
    assert GavelFlags(speeds=[("b", 2), ("a", 1)]).speeds == (("a", 1.0), ("b", 2.0))
    assert type(GavelFlags(speeds={"a": 1}).speeds[0][1]) is float
    # Old admin comments (before speeds) still read, with no hint.
    assert from_admin_comment("gavel:v1 model=m weight=2 slo=60 steps=5").speeds is None


@pytest.mark.parametrize("speeds", [
    (), {}, "v100:1", {"v100": 0}, {"v100": -1.0}, {"v100": 1e6 + 1}, {"v100": 0.1 + 0.2},
    {"v100": float("nan")}, {"v100": float("inf")}, {"v100": True}, {"v100": "1"},
    {"a b": 1}, {"": 1}, {"t" * 33: 1}, {3: 1}, [("a", 1), ("a", 2)], [("a",)], [1, 2], 5,
    {f"g{i}": 1 for i in range(MAX_SPEEDS + 1)},
])
def test_gavel_flags_validates_speeds(speeds):
    with pytest.raises(InputError) as caught:
        GavelFlags(speeds=speeds)
    assert caught.value.field == "speeds"


def test_parse_rejects_non_gavel_comment():
    with pytest.raises(FlagError, match="must start with the word gavel"):
        parse_comment("Gavel model=x")


def test_is_gavel_comment():
    assert is_gavel_comment("gavel") and is_gavel_comment("gavel\tx=1")
    assert not is_gavel_comment(None) and not is_gavel_comment("gavel-x")


@pytest.mark.parametrize("fields,field", [
    (dict(weight=0), "weight"), (dict(weight=-1.0), "weight"), (dict(weight=1e6 + 1), "weight"),
    (dict(weight=0.1 + 0.2), "weight"), (dict(weight=float("nan")), "weight"),
    (dict(weight=True), "weight"), (dict(weight="2"), "weight"),
    (dict(model="a b"), "model"), (dict(model=""), "model"), (dict(model=3), "model"),
    (dict(entity="a+b"), "entity"), (dict(slo_seconds=0), "slo_seconds"),
    (dict(slo_seconds=1.5), "slo_seconds"), (dict(slo_seconds=MAX_SLO_SECONDS + 1), "slo_seconds"),
    (dict(steps=0), "steps"), (dict(steps=MAX_STEPS + 1), "steps"), (dict(steps=True), "steps"),
])
def test_gavel_flags_validates(fields, field):
    with pytest.raises(InputError) as caught:
        GavelFlags(**fields)
    assert caught.value.field == field


@pytest.mark.parametrize("text,field,problem", [
    ("gavel model=x", "admin_comment", "does not start with gavel:"),
    ("gavel:v2 weight=1", "admin_comment", "unsupported version 'v2'"),
    ("gavel:v1 weight=1 foo=2", "admin_comment", "unexpected item 'foo=2'"),
    ("gavel:v1 weight=1  slo=3", "admin_comment", "unexpected item ''"),
    ("gavel:v1 slo=36h", "admin_comment.slo", "must be a whole number of seconds"),
    ("gavel:v1 slo=0", "admin_comment.slo", "must be between 1 and"),
    ("gavel:v1 weight=0", "admin_comment.weight", "must be greater than 0"),
    ("gavel:v1 steps=1 steps=1", "admin_comment.steps", "given twice"),
    ("gavel:v1 model=a%b", "admin_comment.model", "may use only"),
    ("gavel:v1 speeds=v100:0", "admin_comment.speeds", "speed of v100 must be greater than 0"),
    ("gavel:v1 speeds=v100:1,v100:1", "admin_comment.speeds", "GPU type v100 is given twice"),
    ("gavel:v1 speeds=v100:1,", "admin_comment.speeds", "empty entry"),
    ("gavel:v1 speeds=", "admin_comment.speeds", "empty entry"),
])
def test_from_admin_comment_errors(text, field, problem):
    with pytest.raises(InputError) as caught:
        from_admin_comment(text)
    assert caught.value.field == field and problem in caught.value.problem


def test_from_admin_comment_accepts_any_order():
    f = from_admin_comment("gavel:v1 steps=5 slo=60 model=m")
    assert f == GavelFlags(model="m", slo_seconds=60, steps=5)
    assert to_admin_comment(f) == "gavel:v1 model=m weight=1 slo=60 steps=5"
    assert from_admin_comment("gavel:v1") == GavelFlags()
    f = from_admin_comment("gavel:v1 speeds=v100:4.20,k80:.9 weight=1")
    assert f == GavelFlags(speeds={"k80": 0.9, "v100": 4.2})
    assert to_admin_comment(f) == "gavel:v1 weight=1 speeds=k80:0.9,v100:4.2"


# -- hypothesis ------------------------------------------------------------------
NAME_CHARS = "ABCXYZabcxyz0189._-"
names = st.text(NAME_CHARS, min_size=1, max_size=64)
models = st.text(NAME_CHARS + "+", min_size=1, max_size=64)
weights = st.builds(
    lambda units: float(Decimal(units) / Decimal(10 ** 6)),
    st.integers(1, 10 ** 12))
gpu_types = st.text(NAME_CHARS, min_size=1, max_size=32)
flags_strategy = st.builds(
    GavelFlags,
    model=st.none() | models, weight=weights, entity=st.none() | names,
    slo_seconds=st.none() | st.integers(1, MAX_SLO_SECONDS),
    steps=st.none() | st.integers(1, MAX_STEPS),
    speeds=st.none() | st.dictionaries(gpu_types, weights, min_size=1, max_size=MAX_SPEEDS),
    types=st.none() | st.lists(gpu_types, min_size=1, max_size=16, unique=True))


@given(flags_strategy)
def test_admin_comment_round_trip(flags):
    text = to_admin_comment(flags)
    assert from_admin_comment(text) == flags
    assert to_admin_comment(from_admin_comment(text)) == text
    assert re.fullmatch(r"gavel:v1( [a-z]+=[^ ]+)+", text)


def _spell(units: int) -> str:
    """A plain decimal spelling of units/10**6, with optional extra zeros."""
    whole, frac = divmod(units, 10 ** 6)
    return f"{whole}.{frac:06d}"


@given(flags_strategy, st.sampled_from([" ", "  ", "\t", "\n ", " \r\n"]), st.randoms())
def test_comment_round_trip(flags, sep, rnd):
    """Any valid flags, written as a comment in shuffled order, parse back equal."""
    items = []
    if flags.model is not None:
        items.append(f"model={flags.model}")
    items.append("weight=" + _spell(round(Decimal(repr(flags.weight)) * 10 ** 6)))
    if flags.entity is not None:
        items.append(f"entity={flags.entity}")
    if flags.slo_seconds is not None:
        s = flags.slo_seconds
        unit, n = rnd.choice([(u, n) for u, n in UNIT_SECONDS.items() if s % n == 0])
        items.append(f"slo={s // n}{unit}")
    if flags.steps is not None:
        items.append(f"steps={'0' * rnd.randint(0, 2)}{flags.steps}")
    if flags.speeds is not None:
        entries = [f"{t}:{_spell(round(Decimal(repr(v)) * 10 ** 6))}" for t, v in flags.speeds]
        rnd.shuffle(entries)
        items.append("speeds=" + ",".join(entries))
    if flags.types is not None:
        items.append("types=" + ",".join(rnd.sample(flags.types, len(flags.types))))
    rnd.shuffle(items)
    comment = "gavel" + sep + sep.join(items)
    assert parse_comment(comment) == flags


# -- the same cases through job_submit.lua ---------------------------------------------
LUA_NAMES = ("lua5.1", "lua5.2", "lua5.3", "lua5.4", "lua")


def _lua_interpreters():
    found, seen = [], set()
    for name in LUA_NAMES:
        path = shutil.which(name)
        if path and os.path.realpath(path) not in seen:
            seen.add(os.path.realpath(path))
            found.append(path)
    return found


LUAS = _lua_interpreters()


def _no_lua():
    if os.environ.get("CI"):
        pytest.fail("no Lua interpreter (install lua5.1: Slurm's job_submit/lua embeds it)")
    pytest.skip("no Lua interpreter found (apt-get install lua5.1)")


@pytest.fixture(params=LUAS or [None], ids=[os.path.basename(p) for p in LUAS] or ["no-lua"])
def lua(request):
    """Each Lua interpreter found (the plugin must run on all of them)."""
    if request.param is None:
        _no_lua()
    return request.param


@pytest.fixture
def luas():
    """All Lua interpreters found, at least one."""
    if not LUAS:
        _no_lua()
    return LUAS


def run_driver(lua, args, plugin=PLUGIN):
    """Run tests/lua/driver.lua with the plugin and ARGs; one dict per submit/modify."""
    proc = subprocess.run([lua, str(DRIVER), str(plugin), *args], capture_output=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    lines = proc.stdout.decode("utf-8", "surrogateescape").split("\n")
    assert lines[-1] == ""
    return [json.loads(line) for line in lines[:-1]]


def submit_args(cases, tres="gres:gpu:1"):
    args = [f"set:tres_per_node={tres}"]
    for comment, account, *_ in cases:
        args.append(f"set:account={account}" if account is not None else "unset:account")
        args.append("submit-nil" if comment is None else f"submit:{comment}")
    return args


def lua_result(out):
    """The driver's answer in python_result's terms."""
    assert out["rc"] != "LUA_ERROR", out["error"]
    if out["rc"] == "ERROR":
        assert out["writes"] == {}, out
        assert len(out["messages"]) == 1, out
        return out["messages"][0]
    assert out["rc"] == "SUCCESS" and out["messages"] == [], out
    if not out["writes"]:
        return None
    assert out["writes"] == {"admin_comment": out["writes"]["admin_comment"],
                             "priority": 0, "requeue": 1}, out
    return out["writes"]["admin_comment"]


# -- types= and the partition list given at submission (issue 14) ------------------------
CLUSTER_TYPES = ("k80", "p100", "v100")
TYPES_EG = "e.g. types=v100,p100"
HAS = "(this cluster has k80, p100, v100)"
SEVENTEEN = ",".join(f"g{i:02d}" for i in range(17))
MANY_PARTS = ",".join(f"p{i}" for i in range(33))
# (comment, partition list given at submission or None, the cluster's types known, expected)
TYPE_CASES = [
    ("gavel types=v100,p100", None, False, "gavel:v1 weight=1 types=p100,v100"),
    ("gavel types=v100,p100", None, True, "gavel:v1 weight=1 types=p100,v100"),
    ("gavel types=k80 model=m", None, True, "gavel:v1 model=m weight=1 types=k80"),
    ("gavel types=a100", None, False, "gavel:v1 weight=1 types=a100"),      # the daemon checks it
    ("gavel types=B,a_b,ab,a-b", None, False, "gavel:v1 weight=1 types=B,a-b,a_b,ab"),
    ("gavel types=" + ",".join(f"g{i:02d}" for i in range(16)), None, False,
     "gavel:v1 weight=1 types=" + ",".join(f"g{i:02d}" for i in range(16))),
    ("gavel types=a100", None, True, err("types=a100", f"unknown GPU type a100 {HAS}")),
    ("gavel types=v100,a100", None, True, err("types=v100,a100", f"unknown GPU type a100 {HAS}")),
    ("gavel types=V100", None, True, err("types=V100", f"unknown GPU type V100 {HAS}")),
    ("gavel types=a100,a100", None, True, err("types=a100,a100", f"unknown GPU type a100 {HAS}")),
    ("gavel types=v100,v100", None, True, err("types=v100,v100", "GPU type v100 is given twice")),
    ("gavel types=v100,v100", None, False, err("types=v100,v100", "GPU type v100 is given twice")),
    ("gavel types=", None, False, err("types=", f"empty value, {TYPES_EG}")),
    ("gavel types=v100,", None, True, err("types=v100,", f"empty entry (a stray comma), {TYPES_EG}")),
    ("gavel types=,", None, False, err("types=,", f"empty entry (a stray comma), {TYPES_EG}")),
    ("gavel types=v100,,k80", None, False, err("types=v100,,k80", f"empty entry (a stray comma), {TYPES_EG}")),
    ("gavel types=v/100", None, True, err("types=v/100", "GPU type v/100 may use only letters, digits and . _ -")),
    ("gavel types=v100:1", None, False, err("types=v100:1", "GPU type v100:1 may use only letters, digits and . _ -")),
    ("gavel types=" + "t" * 33, None, False,
     err("types=" + "t" * 33, "GPU type " + "t" * 33 + " is longer than 32 characters")),
    ("gavel types=" + SEVENTEEN, None, False, err(short("types=" + SEVENTEEN), "at most 16 GPU types")),
    ("gavel types=k80 types=k80", None, False, err("types=k80", "types is given twice")),
    # the partition list (sbatch -p)
    ("gavel", "v100,p100", False, "gavel:v1 weight=1 partitions=p100,v100"),
    ("gavel model=m types=k80", "k80", True, "gavel:v1 model=m weight=1 types=k80 partitions=k80"),
    ("gavel", "p100,,p100,", False, "gavel:v1 weight=1 partitions=p100"),
    ("gavel", "", False, "gavel:v1 weight=1"),
    ("gavel", ",", False, "gavel:v1 weight=1"),
    ("gavel", "a b", False, err("--partition=a b", "partition a b may use only letters, digits and . _ -")),
    ("gavel slo=36", "a b", False, err("slo=36", f"needs a unit {UNIT}, e.g. slo=36h")),
    ("gavel", "p" * 65, False,
     err(short("--partition=" + "p" * 65), "partition " + "p" * 65 + " is longer than 64 characters")),
    ("gavel", MANY_PARTS, False, err(short("--partition=" + MANY_PARTS), "at most 32 partitions")),
    ("not gavel", "v100", True, None),
]


def python_typed(comment, partition, known):
    if not is_gavel_comment(comment):
        return None
    try:
        return to_admin_comment(parse_comment(comment, None, CLUSTER_TYPES if known else None, partition))
    except FlagError as e:
        return str(e)


@pytest.mark.parametrize("comment,partition,known,expected", TYPE_CASES)
def test_python_types_and_partitions(comment, partition, known, expected):
    assert python_typed(comment, partition, known) == expected
    if expected is not None and expected.startswith("gavel:v1"):
        assert from_admin_comment(expected) == parse_comment(
            comment, None, CLUSTER_TYPES if known else None, partition)


def test_types_fields():
    f = parse_comment("gavel types=v100,k80", partition="v100,p100")
    assert f.types == ("k80", "v100") and f.partitions == ("p100", "v100")
    assert GavelFlags(types=["v100", "k80"]) == GavelFlags(types=("k80", "v100"))
    assert from_admin_comment("gavel:v1 weight=1").types is None
    for bad in (dict(types=()), dict(types="v100"), dict(types=("a b",)), dict(types=("v100", "v100")),
                dict(partitions=()), dict(partitions=("a b",)), dict(types=(3,))):
        with pytest.raises(InputError):
            GavelFlags(**bad)
    with pytest.raises(InputError) as caught:
        from_admin_comment("gavel:v1 partitions=")
    assert caught.value.field == "admin_comment.partitions"


def plugin_with_types(tmp_path) -> pathlib.Path:
    """The plugin as an administrator edits it: GAVEL_GPU_TYPES lists the cluster's types."""
    text = PLUGIN.read_text()
    assert text.count("local GAVEL_GPU_TYPES = nil\n") == 1
    edited = tmp_path / "job_submit.lua"
    edited.write_text(text.replace("local GAVEL_GPU_TYPES = nil\n",
                                   'local GAVEL_GPU_TYPES = { "v100", "p100", "k80" }\n'))
    return edited


def test_lua_same_types_and_partition_cases(lua, tmp_path):
    edited = plugin_with_types(tmp_path)
    for known, plugin in ((False, PLUGIN), (True, edited)):
        cases = [c for c in TYPE_CASES if c[2] == known]
        args = ["set:tres_per_node=gres:gpu:1", "unset:account"]
        for comment, partition, _, _ in cases:
            args.append(f"set:partition={partition}" if partition is not None else "unset:partition")
            args.append(f"submit:{comment}")
        outs = run_driver(lua, args, plugin)
        assert len(outs) == len(cases)
        for (comment, partition, _, expected), out in zip(cases, outs):
            assert lua_result(out) == expected, (comment, partition, known)


def test_lua_same_cases(lua):
    outs = run_driver(lua, submit_args(CASES + [(None, None, None)]))
    assert len(outs) == len(CASES) + 1
    for (comment, account, expected), out in zip(CASES + [(None, None, None)], outs):
        assert lua_result(out) == expected, (comment, account)


JUNK_VALUES = ["", "1", "0", "2.5", ".5", "5.", "36", "36h", "1.5d", "90m", "0.4s", "0.5s",
               "-1", "1e3", "abc", "a=b", "x%sy", "é", "1.0000001", "365d", "366d",
               "1000000", "1000000.000001", "0.000001", "999999999999999999", "h", ".",
               "v100:1", "v100:4.2,p100:2.1", "v100", "v100:", ":1", ":", ",", "v100:1,",
               ",v100:1", "a:1,,b:2", "a:1,a:1", "A:1,a:2", "v100:0", "v100:1:2", "a+b:1",
               "é:1", "t" * 33 + ":1", SIXTEEN, SIXTEEN + ",z:1", SIXTEEN + ",",
               "v100,p100", "k80", "a,,b", "a,a", "v100,", SEVENTEEN, "t" * 33]
tokens = st.one_of(
    st.builds(lambda k, v: f"{k}={v}",
              st.sampled_from(["model", "weight", "entity", "slo", "steps", "speeds", "types",
                               "Model", "x", ""]),
              st.one_of(st.sampled_from(JUNK_VALUES),
                        st.text("0123456789.smhd", max_size=8),
                        st.text("0123456789.:,abAB_-", max_size=16),
                        st.text(st.characters(blacklist_categories=("Cs",),
                                              blacklist_characters="\x00"), max_size=12))),
    st.sampled_from(["gavel", "=", "model", "=x"]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
            min_size=1, max_size=80),
)
comments = st.builds(
    lambda head, seps, toks: head + "".join(s + t for s, t in zip(seps, toks)),
    st.sampled_from(["gavel", "gavel", "gavel", "gavelx", "Gavel", ""]),
    st.lists(st.sampled_from([" ", "  ", "\t", "\n", "\v", "\u00a0", ""]), min_size=6, max_size=6),
    st.lists(tokens, max_size=6))
accounts = st.none() | st.sampled_from(["acct", "bad acct", "a" * 65, "x.y-z"])


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(batch=st.lists(st.tuples(comments, accounts), min_size=40, max_size=40))
def test_lua_agrees_with_python_on_random_comments(luas, batch):
    for lua in luas:
        outs = run_driver(lua, submit_args(batch))
        for (comment, account), out in zip(batch, outs):
            assert lua_result(out) == python_result(comment, account), (comment, account)


partition_lists = st.one_of(
    st.lists(st.sampled_from(["v100", "p100", "k80", "gpu-a", "", "a b", "p" * 65, "é"]),
             max_size=5).map(",".join),
    st.text("abk018,_-. ", max_size=20),
    st.just(MANY_PARTS))


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(batch=st.lists(st.tuples(st.sampled_from(["gavel", "gavel types=k80", "gavel slo=1",
                                                 "gavel model=m"]), partition_lists),
                      min_size=20, max_size=20))
def test_lua_agrees_with_python_on_random_partition_lists(luas, batch):
    args = ["set:tres_per_node=gres:gpu:1", "unset:account"]
    for comment, partition in batch:
        args += [f"set:partition={partition}", f"submit:{comment}"]
    for lua in luas:
        for (comment, partition), out in zip(batch, run_driver(lua, args)):
            assert lua_result(out) == python_typed(comment, partition, False), (comment, partition)


def _comment_of(flags: GavelFlags, rnd) -> str:
    items = [f"weight={_spell(round(Decimal(repr(flags.weight)) * 10 ** 6))}"]
    for key, value in (("model", flags.model), ("entity", flags.entity),
                       ("slo", None if flags.slo_seconds is None else f"{flags.slo_seconds}s"),
                       ("steps", flags.steps)):
        if value is not None:
            items.append(f"{key}={value}")
    if flags.speeds is not None:
        entries = [f"{t}:{_spell(round(Decimal(repr(v)) * 10 ** 6))}" for t, v in flags.speeds]
        rnd.shuffle(entries)
        items.append("speeds=" + ",".join(entries))
    if flags.types is not None:
        items.append("types=" + ",".join(rnd.sample(flags.types, len(flags.types))))
    rnd.shuffle(items)
    return "gavel " + " ".join(items)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(batch=st.lists(flags_strategy, min_size=40, max_size=40), rnd=st.randoms())
def test_lua_writes_the_canonical_form_of_random_flags(luas, batch, rnd):
    """Valid flags (speeds in shuffled order, numbers with trailing zeros) give the
    same admin comment from the plugin as from to_admin_comment."""
    cases = [(_comment_of(flags, rnd), None) for flags in batch]
    for lua in luas:
        outs = run_driver(lua, submit_args(cases))
        for (comment, _), flags, out in zip(cases, batch, outs):
            assert lua_result(out) == to_admin_comment(flags), comment


# -- what only the plugin does: GPU request, hold, requeue, modify guard -------------------
GRES_CASES = [
    # (field, value, rewritten value or None when unchanged)
    ("tres_per_node", "gres:gpu:v100:2", "gres:gpu:2"),
    ("tres_per_node", "gres:gpu:2", None),
    ("tres_per_node", "gpu:v100:2", "gpu:2"),
    ("tres_per_node", "gpu:2", None),
    ("tres_per_node", "gres:gpu:k80", "gres:gpu:1"),
    ("tres_per_node", "gres:gpu", "gres:gpu:1"),
    ("tres_per_node", "gres/gpu:p100:4", "gres/gpu:4"),           # Slurm 23.02+ spelling
    ("tres_per_node", "gres:mps:100,gres:gpu:p100:1", "gres:mps:100,gres:gpu:1"),
    ("tres_per_job", "gres:gpu:v100:4", "gres:gpu:4"),             # --gpus=v100:4
    # (--gpus-per-task and --gpus-per-socket are refused: tests/test_submit_shapes.py)
    ("tres_per_node", "gres:gpu:v100:1,gres:gpu:p100:1", "gres:gpu:2"),   # merged
    ("tres_per_node", "gres:gpu:1,gres:mps:100,gres:gpu:k80:3", "gres:gpu:4,gres:mps:100"),
    ("tres_per_node", "gres:gpu:tesla_v100-sxm2:8", "gres:gpu:8"),
]


@pytest.mark.parametrize("field,value,rewritten", GRES_CASES)
def test_lua_untypes_gpu_request(lua, field, value, rewritten):
    args = ["unset:tres_per_node", f"set:{field}={value}", "set:account=acct",
            "submit:gavel model=resnet50", "submit:not gavel"]
    gavel, other = run_driver(lua, args)
    assert gavel["rc"] == "SUCCESS" and gavel["messages"] == []
    expected = {"admin_comment": "gavel:v1 model=resnet50 weight=1 entity=acct",
                "priority": 0, "requeue": 1}
    if rewritten is not None:
        expected[field] = rewritten
    assert gavel["writes"] == expected
    assert other == {"rc": "SUCCESS", "messages": [], "writes": {}}   # untouched, even typed


@pytest.mark.parametrize("field,value", [
    ("tres_per_task", "gres:gpu:1"),              # 22.05: -n 2 --gpus-per-task=1
    ("tres_per_task", "gres/gpu=1"),              # 24.11 spells it as TRES (seen in slurmctld)
    ("tres_per_task", "cpu=2,gres/gpu=1"),        # 24.11 with -c 2
    ("tres_per_task", "cpu=2,gres/gpu:v100=1"),
    ("tres_per_socket", "gres/gpu:1"),
])
def test_lua_refuses_gpus_per_task_or_socket_in_either_spelling(lua, field, value):
    (out,) = run_driver(lua, ["unset:tres_per_node", f"set:{field}={value}", "set:account=acct",
                              "submit:gavel model=resnet50"])
    assert out["rc"] == "ERROR" and out["messages"][0].startswith(
        "gavel flags: GPUs per task or per socket cannot be reshaped"), out


NO_GPU = ("gavel flags: no GPU requested: a gavel job needs GPUs, e.g. --gres=gpu:1 "
          "(the scheduler picks the GPU type)")


@pytest.mark.parametrize("setup", [
    ["unset:tres_per_node"], ["set:tres_per_node=gres:gpu:0"],
    ["set:tres_per_node=gres:mps:100"], ["set:tres_per_node=gres:gpu:v100:0"],
])
def test_lua_rejects_gavel_job_without_gpu(lua, setup):
    (out,) = run_driver(lua, setup + ["submit:gavel model=x"])
    assert out == {"rc": "ERROR", "messages": [NO_GPU], "writes": {}}
    (out,) = run_driver(lua, setup + ["submit:plain job"])
    assert out == {"rc": "SUCCESS", "messages": [], "writes": {}}


INTERACTIVE = ("gavel flags: interactive jobs (srun, salloc) cannot be preempted and resumed: "
               "submit a gavel job with sbatch")


@pytest.mark.parametrize("setup", [["unset:script"], ["set:script="]])
def test_lua_rejects_interactive_gavel_job(lua, setup):
    (out,) = run_driver(lua, ["set:tres_per_node=gres:gpu:1", *setup, "submit:gavel model=x"])
    assert out == {"rc": "ERROR", "messages": [INTERACTIVE], "writes": {}}
    (out,) = run_driver(lua, ["set:tres_per_node=gres:gpu:1", *setup, "submit:plain job"])
    assert out == {"rc": "SUCCESS", "messages": [], "writes": {}}


def test_lua_entity_falls_back_to_default_account(lua):
    outs = run_driver(lua, ["set:tres_per_node=gres:gpu:1", "unset:account",
                            "set:default_account=dflt", "submit:gavel",
                            "set:account=acct", "submit:gavel", "submit:gavel entity=own"])
    assert [o["writes"]["admin_comment"] for o in outs] == [
        "gavel:v1 weight=1 entity=dflt", "gavel:v1 weight=1 entity=acct",
        "gavel:v1 weight=1 entity=own"]


GUARD = ("gavel jobs are placed by the gavel scheduler: only an administrator can release "
         "or change them (scancel still works)")


def test_lua_modify_guard(lua):
    outs = run_driver(lua, ["modify:1000:gavel:v1 weight=1", "modify:0:gavel:v1 weight=1",
                            "modify:1000:", "modify:1000:something else",
                            "modify:64030:gavel:v1 model=x weight=1"])
    assert [(o["rc"], o["messages"]) for o in outs] == [
        ("ERROR", [GUARD]), ("SUCCESS", []), ("SUCCESS", []), ("SUCCESS", []),
        ("ERROR", [GUARD])]
    assert all(o["writes"] == {} for o in outs)


def _lua_code_without_comments(text: str) -> str:
    text = re.sub(r"--\[(=*)\[.*?\]\1\]", "", text, flags=re.S)
    return re.sub(r"--[^\n]*", "", text)


def test_plugin_does_no_io_and_stays_lua51():
    code = _lua_code_without_comments(PLUGIN.read_text())
    for word in ("io.", "os.", "require", "dofile", "loadfile", "loadstring", "print(",
                 "package.", "debug.", "goto ", "//", "table.unpack", "utf8."):
        assert word not in code, word
    # log_user formats its first argument: user text must never be the format.
    for call in re.findall(r"slurm\.log_\w+\(([^,)]*)", code):
        assert call.strip() == '"%s"', call
