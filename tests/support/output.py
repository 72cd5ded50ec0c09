"""Readers of what commands print."""
from __future__ import annotations

import json


def strict_json(text: str):
    """json.loads, refusing what is not JSON but Python reads (Infinity, NaN)."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)
