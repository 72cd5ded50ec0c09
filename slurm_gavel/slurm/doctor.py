"""`slurm-gavel doctor`, the Slurm half: a live cluster's Slurm configuration against what the daemon needs.

Each check takes what Slurm says (`scontrol show config`, the nodes of `sinfo --json` /
`scontrol show nodes --json`) and the settings of gavel.toml it concerns, and gives
findings (`finding`): one line each, a level (`error`: the daemon cannot work as
documented; `warning`: it works, with a cost the line names; `info`), what was found and
the fix.  No finding: the configuration is what slurm_conf/README.md asks for.  The
daemon's own files (database, progress directory) are checked by `daemon.doctor`, which
runs these checks too (`diagnose`).  Nothing here changes anything.

What is checked, and why the daemon needs it:
* Slurm and munge answer (every command the daemon runs is an authenticated RPC);
* `JobSubmitPlugins=lua`, and the job_submit.lua next to slurm.conf is this package's
  version (its first lines say which): without it gavel jobs are neither checked nor
  held, and their flags never reach AdminComment;
* `RequeueExitHold` contains `requeue_exit_code`: else a checkpointed job ends instead
  of coming back held;
* `GresTypes=gpu`, every GPU node's GRES typed (`gpu:v100:4`), one GPU type per
  partition (or the partitions of `[partitions]` holding nodes of their type only);
* `PreemptMode`: Slurm's own preemption of gavel jobs fights the daemon's rounds;
* `SelectType=select/cons_tres` (GPUs as trackable resources; `--gpus` needs it);
* with `space_sharing = true`: no `SelectTypeParameters` flag that moves shards off the
  first GPU with room (`LL_SHARED_GRES` splits a pair's halves over two GPUs;
  `MULTIPLE_SHARING_GRES_PJ` lets a one-GPU job's shards spread over two half-used
  GPUs; both measured on 24.11.5, docs/space-sharing.md); and no node whose shards are
  bound to 2+ sockets (gres.conf `Cores=`, `(S:0-1)` in its gres): Slurm gives a shard job
  a GPU on its cores' socket first, so the daemon starts no pair there (measured on 22.05.8
  and 24.11.5);
* the daemon runs as root or SlurmUser (it holds, moves and releases others' jobs);
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from .. import __version__
from ..core.errors import GavelError
from .commands import SlurmCLI, parse_version
from .gputypes import discover, from_config, partition_types
from .records import parse_nodes, requeue_exit_codes, socket_bound

LEVELS = ("error", "warning", "info")
# `-- slurm-gavel job_submit.lua version X` among the first lines of the plugin file
LUA_VERSION = re.compile(r"^--\s*slurm-gavel job_submit\.lua version\s+(\S+)\s*$", re.MULTILINE)


def finding(level: str, check: str, found: str, fix: str = "") -> dict:
    return {"level": level, "check": check, "finding": found, "fix": fix}


def shipped_file(name: str) -> Path | None:
    """A file this package ships for the admin (job_submit.lua, slurm-gavel.service, the
    examples): under the install prefix's share/slurm-gavel (a wheel's data files), else
    the repository's slurm_conf/ (an editable install)."""
    for base in (Path(sys.prefix) / "share" / "slurm-gavel",
                 Path(__file__).resolve().parents[2] / "slurm_conf"):
        if (base / name).is_file():
            return base / name
    return None


def lua_version(text: str) -> str | None:
    m = LUA_VERSION.search(text[:4096])
    return m.group(1) if m else None


def _listed(value: str) -> list[str]:
    return [v.strip() for v in (value or "").replace("(null)", "").split(",") if v.strip()]


# -- the checks: each takes what it needs and returns findings ---------------------------
def check_slurm_conf(conf: dict[str, str], requeue_exit_code: int) -> list[dict]:
    out = []
    plugins = [p.removeprefix("job_submit/") for p in _listed(conf.get("JobSubmitPlugins", ""))]
    if "lua" not in plugins:
        out.append(finding("error", "job_submit", f"JobSubmitPlugins={conf.get('JobSubmitPlugins') or '(unset)'}: "
                           "gavel jobs are not checked, held or marked",
                           "set JobSubmitPlugins=lua in slurm.conf, job_submit.lua next to it, then "
                           "scontrol reconfigure"))
    codes = requeue_exit_codes(conf.get("RequeueExitHold", ""))
    if requeue_exit_code not in codes:
        out.append(finding("error", "requeue_exit_hold",
                           f"RequeueExitHold={conf.get('RequeueExitHold') or '(unset)'} lacks "
                           f"requeue_exit_code {requeue_exit_code}: preempted jobs end instead of "
                           "being requeued held",
                           f"add RequeueExitHold={requeue_exit_code} to slurm.conf (or set "
                           "requeue_exit_code in gavel.toml to one it lists)"))
    if "gpu" not in _listed(conf.get("GresTypes", "")):
        out.append(finding("error", "gres_types", f"GresTypes={conf.get('GresTypes') or '(unset)'}: "
                           "Slurm tracks no GPUs", "set GresTypes=gpu in slurm.conf"))
    select = conf.get("SelectType", "")
    if select and "cons_tres" not in select:
        out.append(finding("warning", "select_type", f"SelectType={select}: GPUs are not trackable "
                           "resources (--gpus and distributed jobs are refused)",
                           "set SelectType=select/cons_tres"))
    preempt_type = conf.get("PreemptType", "preempt/none")
    modes = {m.upper() for m in _listed(conf.get("PreemptMode", "OFF"))}
    if "none" not in preempt_type and preempt_type not in ("", "(null)") and not modes <= {"OFF", "GANG", "WITHIN"}:
        out.append(finding("warning", "preempt_mode",
                           f"PreemptType={preempt_type} PreemptMode={conf.get('PreemptMode')}: Slurm "
                           "also preempts gavel jobs, behind the daemon's rounds (a suspended or "
                           "requeued job keeps or loses GPUs the plan counts on)",
                           "PreemptType=preempt/none, or PreemptMode=OFF on the gavel partitions"))
    elif "GANG" in modes:
        out.append(finding("warning", "preempt_mode", "PreemptMode includes GANG: Slurm time-slices "
                           "jobs, the daemon's rounds do that for gavel jobs",
                           "remove GANG, or OverSubscribe=NO on the gavel partitions"))
    return out


def check_pair_gpus(conf: dict[str, str], space_sharing: bool, wanted: int) -> list[dict]:
    """What max_pair_gpus > 1 gives on this Slurm (backend.pairs.multi.allowed_pair_gpus, as the
    daemon decides at start): pairs of multi-GPU jobs, or one-GPU pairs only and why."""
    from .backend.pairs.multi import allowed_pair_gpus
    if wanted <= 1:
        return []
    if not space_sharing:
        return [finding("warning", "space_sharing", f"max_pair_gpus = {wanted} has no effect: "
                        "space_sharing is off", "space_sharing = true, or drop max_pair_gpus")]
    got, why = allowed_pair_gpus(wanted, parse_version(conf.get("SLURM_VERSION", "")), conf)
    if got > 1:
        return [finding("info", "space_sharing", f"max_pair_gpus = {wanted}: {why}; a paired job runs "
                        f"as one task per GPU (SLURM_NTASKS = its GPUs): docs/space-sharing.md")]
    return [finding("warning", "space_sharing", f"max_pair_gpus = {wanted} is not used: {why}",
                    "Slurm 23.11+ and SelectTypeParameters=...,MULTIPLE_SHARING_GRES_PJ,"
                    "ONE_TASK_PER_SHARING_GRES (restart slurmctld), or max_pair_gpus = 1")]


def check_sharing_select(conf: dict[str, str], space_sharing: bool, max_pair_gpus: int = 1) -> list[dict]:
    """SelectTypeParameters flags that break the daemon's pairs (first fit on one GPU).
    MULTIPLE_SHARING_GRES_PJ is what multi-GPU pairs need (`max_pair_gpus` > 1): then said
    as a risk the per-poll check watches, not as a mistake."""
    if not space_sharing:
        return []
    flags = {f.upper() for f in _listed(conf.get("SelectTypeParameters", ""))}
    out = []
    if "LL_SHARED_GRES" in flags:
        out.append(finding("warning", "space_sharing", "SelectTypeParameters has LL_SHARED_GRES: each "
                           "half of a pair goes to the least loaded GPU, so the two halves land on "
                           "different GPUs (the daemon logs each split pair)",
                           "remove LL_SHARED_GRES from SelectTypeParameters, or space_sharing = false"))
    if "MULTIPLE_SHARING_GRES_PJ" in flags and max_pair_gpus > 1:
        out.append(finding("info", "space_sharing", "SelectTypeParameters has MULTIPLE_SHARING_GRES_PJ "
                           "(multi-GPU pairs need it): a one-GPU gavel job that finds no GPU with all "
                           "its shards free may run on two half-used GPUs; the daemon logs any job "
                           "on a GPU the plan did not give it"))
    elif "MULTIPLE_SHARING_GRES_PJ" in flags:
        out.append(finding("warning", "space_sharing", "SelectTypeParameters has MULTIPLE_SHARING_GRES_PJ: "
                           "a one-GPU gavel job (a GPU's shards) may run on two half-used GPUs, beside "
                           "two other jobs; slurm-gavel pairs one-GPU jobs only and does not use it",
                           "remove MULTIPLE_SHARING_GRES_PJ from SelectTypeParameters"))
    return out


def check_shard_sockets(nodes_data: dict, space_sharing: bool) -> list[dict]:
    """Nodes whose shards are bound to 2+ sockets (gres.conf Cores=, `(S:0-1)` in their gres):
    Slurm gives a shard job a GPU on its cores' socket first, which the daemon's first fit
    cannot know, so it starts no pair there (docs/space-sharing.md, "Sockets")."""
    if not space_sharing:
        return []
    bound = socket_bound(parse_nodes(nodes_data), "GPUs (shards)")
    if not bound:
        return []
    return [finding("warning", "space_sharing", f"{bound}: Slurm gives a shard job a GPU on its cores' socket "
                    "first, so the two halves of a pair can land on two GPUs (measured: GPUs 0 and 2 "
                    "of an empty node); the daemon starts no pair there, its jobs run alone",
                    "jobs alone need nothing; pairs need nodes whose gres.conf GPU lines have no "
                    "Cores= (a shard line takes its GPU's), or set space_sharing = false")]


def check_plugin_file(conf: dict[str, str], shipped: Path | None) -> list[dict]:
    """The job_submit.lua slurmctld loads (next to slurm.conf) against this package's."""
    slurm_conf = conf.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    path = Path(slurm_conf).parent / "job_submit.lua"
    want = lua_version(shipped.read_text()) if shipped else __version__
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return [finding("error", "job_submit_lua", f"{path}: no such file",
                        f"cp {shipped or 'slurm_conf/job_submit.lua'} {path}; scontrol reconfigure")]
    except OSError as e:
        return [finding("error", "job_submit_lua", f"{path}: cannot read ({e.strerror})",
                        "make it readable by root and SlurmUser")]
    have = lua_version(text)
    if have != want:
        what = f"version {have}" if have else "no slurm-gavel version line (an older or another plugin)"
        return [finding("error", "job_submit_lua", f"{path}: {what}, this slurm-gavel ships {want}",
                        f"cp {shipped or 'slurm_conf/job_submit.lua'} {path} (keep your "
                        "GAVEL_ADMIN_UIDS), then scontrol reconfigure")]
    return []


def check_nodes(nodes_data: dict, partitions: dict[str, str], gpu_types: dict | None = None) -> list[dict]:
    """GPU types per partition, typed GRES, the configured [partitions] and [gpu_types]."""
    nodes = parse_nodes(nodes_data)
    out = []
    gpu_nodes = [n for n in nodes if n.gpus]
    untyped = sorted(n.name for n in gpu_nodes if n.gpu_type is None)
    if untyped:
        out.append(finding("error", "gres_type", f"nodes {','.join(untyped)} have GPUs without a type "
                           "(gpu:N): the daemon cannot tell their GPU type",
                           "give each GPU a type: Gres=gpu:TYPE:N in slurm.conf and Type=TYPE in gres.conf"))
    types = partition_types(nodes)
    if gpu_types:
        try:
            where = from_config(partitions, gpu_types).where
        except GavelError as e:
            return out + [finding("error", "gpu_types", str(e), "fix [gpu_types] in gavel.toml")]
        for wt, w in sorted(where.items()):
            if not any(w.holds(n) for n in gpu_nodes):
                out.append(finding("error", "gpu_types", f"GPU type {wt} (partition {w.partition}"
                                   + (f", GRES type {w.gres}" if w.gres else "")
                                   + (f", {len(w.nodes)} named nodes" if w.nodes else "") + ") matches no GPU node",
                                   f"fix gpu_types.{wt} in gavel.toml, or the nodes' partitions and GRES"))
        return out
    if partitions:
        for p, wt in sorted(partitions.items()):
            have = types.get(p)
            if have is None:
                out.append(finding("error", "partitions", f"[partitions] names {p}, which Slurm does not have",
                                   f"remove {p} from gavel.toml or create it in slurm.conf"))
            elif have != {wt}:
                seen = ",".join(sorted(str(t) for t in have))
                out.append(finding("error", "partitions", f"partition {p} is {wt} in gavel.toml, but its "
                                   f"nodes hold {seen}", f"put only {wt} nodes in {p}, or fix [partitions]"))
        return out
    where = discover(nodes).where
    for p, t in sorted(types.items()):
        if len(t) == 1 or all(x is None for x in t):
            continue
        seen = ",".join(sorted(str(x) if x else "no GPU" for x in t))
        mine = sorted(wt for wt, w in where.items() if w.partition == p)
        if None in t:
            out.append(finding("warning", "partitions", f"partition {p} mixes {seen}: not scheduled by gavel",
                               "type every node's GPUs, keep nodes without GPUs out of it, or name the "
                               "types in [gpu_types] of gavel.toml"))
        elif not mine:
            out.append(finding("warning", "partitions", f"partition {p} mixes {seen}, types that have "
                               "partitions of their own: not scheduled by gavel",
                               "leave it out of gavel's use, or name the types in [gpu_types] of gavel.toml"))
        else:
            out.append(finding("info", "partitions", f"partition {p} mixes {seen}: gavel runs "
                               f"{','.join(mine)} there on the nodes of that GRES type", ""))
    if not where:
        out.append(finding("error", "partitions", "no partition holds GPUs of a typed GRES",
                           "one partition per GPU type, or typed GRES (slurm_conf/slurm.conf.example)"))
    return out


def check_user(conf: dict[str, str], euid: int | None = None) -> list[dict]:
    euid = os.geteuid() if euid is None else euid
    slurm_user = conf.get("SlurmUser", "root(0)")
    m = re.search(r"\((\d+)\)", slurm_user)
    if euid == 0 or (m and int(m.group(1)) == euid):
        return []
    return [finding("error", "daemon_user", f"running as uid {euid}, neither root nor "
                    f"SlurmUser {slurm_user}: the daemon could not hold or release others' jobs",
                    "run the daemon (and this check) as root, as the unit file does")]


def check_munge(conf: dict[str, str], cli: SlurmCLI) -> list[dict]:
    """A credential made and decoded by the munged slurmctld uses (AuthInfo socket=)."""
    if "munge" not in conf.get("AuthType", "auth/munge"):
        return []
    m = re.search(r"socket=([^,\s]+)", conf.get("AuthInfo", ""))
    sock = [f"--socket={m.group(1)}"] if m else []
    try:
        made = subprocess.run(["munge", "-n", *sock], capture_output=True, timeout=10, check=False)
        back = (subprocess.run(["unmunge", *sock], input=made.stdout, capture_output=True,
                               timeout=10, check=False) if made.returncode == 0 else made)
    except FileNotFoundError:
        return [finding("warning", "munge", "munge is not installed here: cannot check it",
                        "apt-get install munge")]
    except subprocess.TimeoutExpired:
        return [finding("error", "munge", "munge did not answer in 10 s", "systemctl restart munge")]
    if back.returncode != 0:
        said = (back.stderr or b"").decode(errors="replace").strip().splitlines()
        return [finding("error", "munge", f"munge does not answer: {said[-1] if said else 'no message'}",
                        "systemctl enable --now munge (the same /etc/munge/munge.key on every host)")]
    return []


__all__ = ["LEVELS", "check_munge", "check_nodes", "check_pair_gpus", "check_plugin_file",
           "check_shard_sockets", "check_sharing_select", "check_slurm_conf", "check_user", "finding",
           "lua_version", "shipped_file"]
