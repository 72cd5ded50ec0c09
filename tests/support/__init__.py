"""What the tests share that is not a fixture: builders, cluster and daemon helpers, paths.

Test modules import from here, never from one another (tests/unit/test_test_layout.py checks
that); fixtures live in the conftest.py files (tests/conftest.py, tests/cluster/conftest.py).
"""
