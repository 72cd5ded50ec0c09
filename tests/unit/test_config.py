"""The daemon's configuration file: defaults, the shipped example, and every kind of mistake."""
from __future__ import annotations

from pathlib import Path

import pytest

from slurm_gavel.daemon.config import Config, from_dict, load
from slurm_gavel.core.errors import InputError

EXAMPLE = Path(__file__).resolve().parents[2] / "slurm_conf" / "gavel.toml.example"


def test_the_shipped_example_is_the_defaults():
    example = load(EXAMPLE)
    assert {k: v for k, v in example.__dict__.items() if k != "source"} == \
           {k: v for k, v in Config().__dict__.items() if k != "source"}


def test_values_are_read(tmp_path):
    path = tmp_path / "gavel.toml"
    path.write_text('policy = "fifo"\nround_seconds = 60\n[partitions]\ngpu-a = "v100"\n'
                    '[prices]\nv100 = 2\n')
    c = load(path)
    assert (c.policy, c.round_seconds, c.partitions, c.prices) == ("fifo", 60.0, {"gpu-a": "v100"},
                                                                   {"v100": 2})


def test_the_lease_growth_is_read_and_defaults_to_the_measured_3_and_3(tmp_path):
    path = tmp_path / "gavel.toml"
    path.write_text("lease_load_exponent = 2\nmax_lease_scale = 4\n")
    c = load(path)
    assert (c.lease_load_exponent, c.max_lease_scale) == (2, 4)
    assert (Config().lease_load_exponent, Config().max_lease_scale) == (3.0, 3.0)


@pytest.mark.parametrize("text, field", [
    ('polcy = "fifo"', "polcy"),
    ('policy = "fastest_first"', "policy"),
    ("round_seconds = 0", "round_seconds"),
    ("round_seconds = 10\ntick_seconds = 20", "tick_seconds"),
    ("full_read_seconds = 0", "full_read_seconds"),
    ("full_read_seconds = -5", "full_read_seconds"),
    ('full_read_seconds = "often"', "full_read_seconds"),
    ("tick_seconds = 10\nfull_read_seconds = 5", "full_read_seconds"),
    ('preemption_signal = "KILL"', "preemption_signal"),
    ("requeue_exit_code = 300", "requeue_exit_code"),
    ('agnostic = "yes"', "agnostic"),
    ('partitions = "v100"', "partitions"),
    ("[prices]\nv100 = -1", "prices.v100"),
    ('throughputs = "/no/such/file.json"', "throughputs"),
    ("explore_rounds = -1", "explore_rounds"),
    ("explore_rounds = 2.5", "explore_rounds"),
    ("solver_wait_seconds = -1", "solver_wait_seconds"),
    ("lease_load_exponent = -1", "lease_load_exponent"),
    ("max_lease_scale = 0.5", "max_lease_scale"),
    ('max_lease_scale = "3"', "max_lease_scale"),
])
def test_mistakes_name_the_key(tmp_path, text, field):
    path = tmp_path / "gavel.toml"
    path.write_text(text + "\n")
    with pytest.raises(InputError) as err:
        load(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_unreadable_files(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        load(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("policy = \n")
    with pytest.raises(InputError, match="not valid TOML"):
        load(bad)
    assert from_dict({}).policy == "hierarchical"


# -- [entities]: the hierarchical policy's entity weights (issue 14) -----------------
def test_entity_weights_are_read(tmp_path):
    path = tmp_path / "gavel.toml"
    path.write_text('policy = "hierarchical"\n[entities]\nphysics = 3\n"chem.lab" = 0.5\n')
    c = load(path)
    assert c.entities == {"physics": 3.0, "chem.lab": 0.5} and c.entity_weights == "config"
    assert type(c.entities["physics"]) is float
    path.write_text('entity_weights = "fairshare"\n')
    assert load(path).entity_weights == "fairshare" and load(path).entities == {}


@pytest.mark.parametrize("text, message", [
    ("[entities]\nphysics = 0", "entities.physics: must be a weight > 0 and <= 1000000, got 0.0"),
    ("[entities]\nphysics = -2", "entities.physics: must be a weight > 0 and <= 1000000, got -2.0"),
    ('[entities]\nphysics = "2"', "entities.physics: must be a weight > 0 and <= 1000000, got '2'"),
    ("[entities]\nphysics = true", "entities.physics: must be a weight > 0 and <= 1000000, got True"),
    ("[entities]\nphysics = nan", "entities.physics: must be a weight > 0 and <= 1000000, got nan"),
    ("[entities]\nphysics = inf", "entities.physics: must be a weight > 0 and <= 1000000, got inf"),
    ("[entities]\nphysics = 1000001", "entities.physics: must be a weight > 0 and <= 1000000"),
    ("[entities]\nphysics = {weight = 2}", "entities.physics: must be a weight > 0"),
    ('[entities]\n"a b" = 1', "entities.a b: not an entity name: may use only letters, digits and . _ -"),
    ('[entities]\n"' + "e" * 65 + '" = 1', "not an entity name: longer than 64 characters"),
    ('entities = 3', "entities: must be a table"),
    ('entity_weights = "slurm"', "entity_weights: must be one of config, fairshare, got 'slurm'"),
])
def test_bad_entity_weights_are_one_clear_error(tmp_path, text, message):
    path = tmp_path / "gavel.toml"
    path.write_text(text + "\n")
    with pytest.raises(InputError) as err:
        load(path)
    text = str(err.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text
