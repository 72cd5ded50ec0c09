"""Import torch for the tests that train: skip without it, fail under CI (CI must run them)."""
from __future__ import annotations

import pytest

from tests.support.slurm import in_ci

INSTALL = "tools/setup-env.sh installs it: pip install torch==2.13.0"


def import_torch():
    try:
        import torch
    except ImportError as e:
        if in_ci():
            pytest.fail(f"CI must run the torch tests, but torch cannot be imported ({e}); {INSTALL}",
                        pytrace=False)
        pytest.skip(f"needs torch ({INSTALL})", allow_module_level=True)
    return torch
