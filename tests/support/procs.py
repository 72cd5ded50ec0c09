"""Finding a test job's processes wherever they ended up: every process whose environment
holds a marker variable the test gave the job (ranks, launchers, orphans reparented to init)."""
from __future__ import annotations

import os

MARKER = "GAVEL_LAUNCHER_TEST"


def marked(marker: str, name: str = MARKER) -> dict[int, int]:
    """pid -> parent pid of the live (not zombie) processes whose environment holds
    ``name=marker``."""
    needle = f"{name}={marker}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields[0] not in (b"Z", b"X"):
            found[int(entry)] = int(fields[1])
    return found
