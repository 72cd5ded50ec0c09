"""A real local Slurm cluster for the tests, CI and the demo (`slurm-gavel cluster up|down`).

Owns `render` (the slurm.conf/gres.conf/slurmdbd.conf text and the `--types` grammar),
`host` (what this machine needs: Slurm's binaries and version, MUNGE, root, free
ports), `procs` (the cluster's processes, found and stopped by pid) and `cluster`
(`DevCluster`, which puts them together).  The command's argparse and printing are
in `cli.cluster`.

May import: `core` (errors) and `slurm.commands` (the Slurm version parser).
The daemon never imports it; only `cli` and the tests do.
"""
from .cluster import DevCluster, default_directory, default_job_submit_lua
from .host import (MIN_VERSION, DevClusterError, SlurmUnavailable, accounting_unavailable_reason,
                   check_accounting, check_machine, free_port, parse_version, pick_ports, port_free,
                   slurm_version, unavailable_reason)
from .render import (ACCOUNTS, CLUSTER_NAME, DEFAULT_CTLD_PORT, DEFAULT_SLURMD_PORT, DEFAULT_TYPES,
                     format_types, node_list, parse_types, render_cgroup_conf, render_gres_conf,
                     render_slurm_conf, render_slurmdbd_conf, socket_layout)

__all__ = ["ACCOUNTS", "CLUSTER_NAME", "DEFAULT_CTLD_PORT", "DEFAULT_SLURMD_PORT", "DEFAULT_TYPES",
           "MIN_VERSION", "DevCluster", "DevClusterError", "SlurmUnavailable",
           "accounting_unavailable_reason", "check_accounting", "check_machine", "default_directory",
           "default_job_submit_lua", "format_types", "free_port", "node_list", "parse_types",
           "parse_version", "pick_ports", "port_free", "render_cgroup_conf", "render_gres_conf",
           "render_slurm_conf", "render_slurmdbd_conf", "slurm_version", "socket_layout",
           "unavailable_reason"]
