"""The gavel flag grammar: slurm_gavel/flags.py, and the same cases through job_submit.lua.

Both implementations must accept and reject the same comments with the same
messages and write the same admin comment. The Lua side runs the real plugin
file under a standalone interpreter with a fake `slurm` table
(tests/lua/driver.lua); without an interpreter those tests skip, except under
CI (env CI set) where they fail.
"""
from __future__ import annotations

import os
import pathlib
import re
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_gavel.core.errors import InputError
from slurm_gavel.slurm.flags import (MAX_SLO_SECONDS, MAX_SPEEDS, MAX_STEPS, UNIT_SECONDS,
                                     FlagError, GavelFlags, from_admin_comment, is_admin_comment,
                                     is_gavel_comment, parse_comment, to_admin_comment, with_entity)
from tests.support.lua import (CASES, HETEROGENEOUS, INTERACTIVE, LUAS, NO_GPU, PLUGIN, SIXTEEN, UNIT, no_lua,
                               run_driver, err, short)

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


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


@pytest.fixture
def luas():
    """All Lua interpreters found, at least one."""
    if not LUAS:
        no_lua()
    return LUAS


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
    # (--gpus-per-task and --gpus-per-socket are refused: tests/cluster/test_submit_shapes.py)
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


@pytest.mark.parametrize("setup", [
    ["unset:tres_per_node"], ["set:tres_per_node=gres:gpu:0"],
    ["set:tres_per_node=gres:mps:100"], ["set:tres_per_node=gres:gpu:v100:0"],
])
def test_lua_rejects_gavel_job_without_gpu(lua, setup):
    (out,) = run_driver(lua, setup + ["submit:gavel model=x"])
    assert out == {"rc": "ERROR", "messages": [NO_GPU], "writes": {}}
    (out,) = run_driver(lua, setup + ["submit:plain job"])
    assert out == {"rc": "SUCCESS", "messages": [], "writes": {}}


@pytest.mark.parametrize("setup", [["unset:script"], ["set:script="]])
def test_lua_rejects_interactive_gavel_job(lua, setup):
    (out,) = run_driver(lua, ["set:tres_per_node=gres:gpu:1", *setup, "submit:gavel model=x"])
    assert out == {"rc": "ERROR", "messages": [INTERACTIVE], "writes": {}}
    (out,) = run_driver(lua, ["set:tres_per_node=gres:gpu:1", *setup, "submit:plain job"])
    assert out == {"rc": "SUCCESS", "messages": [], "writes": {}}


@pytest.mark.parametrize("setup", [
    ["set:het_job_offset=0"],                          # the first component: it has the script
    ["set:het_job_offset=1", "unset:script"],          # a later one: no script of its own
])
def test_lua_rejects_heterogeneous_gavel_job(lua, setup):
    # a component of `sbatch A : B` is no job the daemon can place, preempt or requeue alone;
    # the message must say so, not talk about srun or salloc
    (out,) = run_driver(lua, ["set:tres_per_node=gres:gpu:1", *setup, "submit:gavel model=x"])
    assert out == {"rc": "ERROR", "messages": [HETEROGENEOUS], "writes": {}}
    (out,) = run_driver(lua, ["set:tres_per_node=gres:gpu:1", *setup, "submit:plain job"])
    assert out == {"rc": "SUCCESS", "messages": [], "writes": {}}


def test_lua_takes_unset_het_offset_as_an_ordinary_job(lua):
    # Slurm hands a job that is not heterogeneous NO_VAL as its offset
    (out,) = run_driver(lua, ["set:tres_per_node=gres:gpu:1", "set:het_job_offset=4294967294",
                              "submit:gavel model=x"])
    assert out["rc"] == "SUCCESS", out


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
