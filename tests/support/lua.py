"""The job_submit.lua plugin run by a Lua interpreter (tests/lua/driver.lua), and the flag cases
both sides must agree on."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess

import pytest

from slurm_gavel.slurm.flags import MAX_SLO_SECONDS, MAX_SPEEDS, MAX_STEPS


ROOT = pathlib.Path(__file__).resolve().parents[2]


def err(item, problem):
    return f"gavel flags: {item}: {problem}"


def short(text):
    """What messages show of a long ASCII item: its first 64 bytes and "..."."""
    return text if len(text) <= 72 else text[:64] + "..."


PLUGIN = ROOT / "slurm_conf" / "job_submit.lua"
DRIVER = ROOT / "tests" / "lua" / "driver.lua"
UNIT = "(s, m, h or d)"
KNOWN = "(known keys: model, weight, entity, slo, steps, speeds, types)"
SPEEDS_EG = "e.g. speeds=v100:4.2,p100:2.1"
LONG_E = "model=x" + "é" * 40          # 87 bytes: shortened in messages, on a char boundary
LONG_E_SHOWN = ("model=x" + "é" * 40).encode()[:63].decode() + "..."   # 7 + 28*2 = 63 bytes
SIXTEEN = ",".join(f"g{i:02d}:{i + 1}" for i in range(16))             # g00:1,...,g15:16
LONG_TYPE = "x" * 80


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


def no_lua():
    if os.environ.get("CI"):
        pytest.fail("no Lua interpreter (install lua5.1: Slurm's job_submit/lua embeds it)")
    pytest.skip("no Lua interpreter found (apt-get install lua5.1)")


def run_driver(lua, args, plugin=PLUGIN):
    """Run tests/lua/driver.lua with the plugin and ARGs; one dict per submit/modify."""
    proc = subprocess.run([lua, str(DRIVER), str(plugin), *args], capture_output=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    lines = proc.stdout.decode("utf-8", "surrogateescape").split("\n")
    assert lines[-1] == ""
    return [json.loads(line) for line in lines[:-1]]


NO_GPU = ("gavel flags: no GPU requested: a gavel job needs GPUs, e.g. --gres=gpu:1 "
          "(the scheduler picks the GPU type)")


INTERACTIVE = ("gavel flags: interactive jobs (srun, salloc) cannot be preempted and resumed: "
               "submit a gavel job with sbatch")


HETEROGENEOUS = ("gavel flags: heterogeneous jobs (components joined with ':') are not scheduled "
                 "by gavel: submit the components as separate jobs, or drop the gavel comment")
