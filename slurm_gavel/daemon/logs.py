"""Where the daemon's log goes: stderr (the journal under systemd), and `log_file` and `syslog`
as gavel.toml says.

Every handler escapes users' text (job comments, names, paths) with `core.display.PrintableLog`,
so a log line never carries a user's control characters to an admin's terminal.
"""
from __future__ import annotations

import logging
import logging.handlers
import sys

from ..core.display import PrintableLog
from .config import Config

FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def log_to_stderr(level: str = "INFO") -> None:
    """The root logger at `level` on stderr, users' text escaped."""
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), format=FORMAT)
    for handler in logging.getLogger().handlers:
        handler.addFilter(PrintableLog())     # users' text (comments, paths) is quoted in logs


class SysLog(logging.handlers.SysLogHandler):
    """Syslog that never blocks the daemon: a receiver that stops reading (a stuck journald;
    a unix datagram socket queues only a few messages) costs log lines, counted in
    `dropped`, not rounds.  (The standard handler's blocking send hung the daemon.)"""

    dropped = 0

    def _connect_unixsocket(self, address):
        super()._connect_unixsocket(address)
        self.socket.setblocking(False)

    def handleError(self, record):
        if isinstance(sys.exc_info()[1], BlockingIOError):
            self.dropped += 1
            return
        super().handleError(record)


def log_to(config: Config) -> None:
    """Besides stderr (the journal under systemd): `log_file` (reopened when logrotate moves
    it) and `syslog` (the local socket, as slurm-gavel[pid], facility `syslog_facility`).
    Users' text is escaped on every handler (PrintableLog)."""
    root = logging.getLogger()
    added = []
    if config.log_file:
        handler = logging.handlers.WatchedFileHandler(config.log_file)
        handler.setFormatter(logging.Formatter(FORMAT))
        added.append(handler)
    if config.syslog:
        handler = SysLog(
            config.syslog_address, facility=logging.handlers.SysLogHandler.facility_names[config.syslog_facility])
        handler.setFormatter(logging.Formatter("slurm-gavel[%(process)d]: %(name)s %(levelname)s %(message)s"))
        added.append(handler)
    for handler in added:
        handler.addFilter(PrintableLog())
        root.addHandler(handler)


__all__ = ["SysLog", "log_to", "log_to_stderr"]
