"""The JSON input format: what `parse_policy_input` builds, and how it names bad fields."""
from __future__ import annotations

import copy
import io
import json
import math

import numpy as np
import pytest

from slurm_gavel.core.errors import InputError
from slurm_gavel.core.inputs import load_policy_input, parse_json, parse_policy_input

SEED = {
    "worker_types": {"v100": {"count": 1, "price_per_hour": 2.48}, "k80": {"count": 1}},
    "jobs": [
        {"id": "0", "throughputs": {"v100": 40.0, "k80": 10.0}},
        {"id": "1", "throughputs": {"v100": 12.0, "k80": 4.0}},
        {"id": "2", "throughputs": {"v100": 100.0, "k80": 50.0}},
    ],
}


def seed(**top):
    doc = copy.deepcopy(SEED)
    doc.update(top)
    return doc


def error_of(doc) -> InputError:
    with pytest.raises(InputError) as caught:
        parse_policy_input(doc)
    return caught.value


def test_seed_document_and_defaults():
    inp = parse_policy_input(seed())
    assert inp.worker_types == ("v100", "k80")
    assert inp.job_ids == ("0", "1", "2")
    np.testing.assert_array_equal(inp.counts, [1, 1])
    np.testing.assert_array_equal(inp.throughputs, [[40, 10], [12, 4], [100, 50]])
    assert inp.prices[0] == 2.48 and math.isnan(inp.prices[1])
    np.testing.assert_array_equal(inp.scale_factors, [1, 1, 1])
    np.testing.assert_array_equal(inp.weights, [1, 1, 1])
    assert inp.entities == ("default",) * 3
    assert np.isnan(inp.steps_remaining).all() and np.isnan(inp.slo).all()
    np.testing.assert_array_equal(inp.time_since_arrival, [0, 0, 0])
    assert inp.n_pairs == 0


def test_every_optional_field():
    doc = {
        "worker_types": {"v100": {"count": 4, "price_per_hour": 3, "gpus_per_node": 4},
                         "k80": {"count": 2, "price_per_hour": 0.5}},
        "jobs": [
            {"id": 7, "throughputs": {"v100": 40, "k80": None}, "scale_factor": 2, "weight": 2.5,
             "entity": "alice", "steps_remaining": 1000, "time_since_arrival": 60, "slo": 3600},
            {"id": "b", "throughputs": {"k80": 3}, "scale_factor": 2, "entity": "bob",
             "steps_remaining": 0, "slo": None},
        ],
        "pairs": [{"jobs": ["b", 7], "throughputs": {"v100": [1.0, 2.0], "k80": None}}],
        "entities": {"alice": {"weight": 3, "policy": "fifo"}, "bob": {}},
    }
    inp = parse_policy_input(doc)
    assert inp.job_ids == ("7", "b")                       # integer ids become strings
    assert np.isnan(inp.throughputs[0, 1]) and np.isnan(inp.throughputs[1, 0])
    np.testing.assert_array_equal(inp.feasible, [[True, False], [False, True]])
    np.testing.assert_array_equal(inp.scale_factors, [2, 2])
    np.testing.assert_array_equal(inp.weights, [2.5, 1.0])
    assert inp.entities == ("alice", "bob")
    np.testing.assert_array_equal(inp.steps_remaining, [1000, 0])
    np.testing.assert_array_equal(inp.time_since_arrival, [60, 0])
    assert inp.slo[0] == 3600 and np.isnan(inp.slo[1])
    np.testing.assert_array_equal(inp.pair_jobs, [[1, 0]])   # in the order the pair names them
    np.testing.assert_array_equal(inp.pair_throughputs[0], [[1.0, 2.0], [0.0, 0.0]])
    assert dict(inp.entity_weights) == {"alice": 3, "bob": 1.0}
    assert dict(inp.entity_policies) == {"alice": "fifo", "bob": "fairness"}
    assert inp.gpus_per_node[0] == 4 and np.isnan(inp.gpus_per_node[1])


def test_unconsolidated_throughputs_apply_where_a_job_spreads():
    doc = {"worker_types": {"v100": {"count": 8, "gpus_per_node": 4},
                            "p100": {"count": 8, "gpus_per_node": 8}},
           "jobs": [{"id": "wide", "scale_factor": 8, "throughputs": {"v100": 80, "p100": 50},
                     "throughputs_unconsolidated": {"v100": 30, "p100": 20}}]}
    inp = parse_policy_input(doc)
    np.testing.assert_array_equal(inp.unconsolidated_throughputs, [[30, 20]])
    # 8 GPUs do not fit one 4-GPU v100 server: the unconsolidated 30 applies there.
    np.testing.assert_array_equal(inp.solo_throughputs, [[30, 50]])


@pytest.mark.parametrize("mutate, field, words", [
    # required fields
    (lambda d: d.pop("jobs"), "jobs", "is required"),
    (lambda d: d.pop("worker_types"), "worker_types", "is required"),
    (lambda d: d["worker_types"]["k80"].pop("count"), "worker_types.k80.count", "is required"),
    (lambda d: d["jobs"][1].pop("id"), "jobs[1].id", "is required"),
    (lambda d: d["jobs"][1].pop("throughputs"), "jobs[1].throughputs", "is required"),
    # numbers and their bounds
    (lambda d: d["worker_types"]["k80"].update(count=-1), "worker_types.k80.count",
     "must be an integer >= 0, got -1"),
    (lambda d: d["worker_types"]["k80"].update(count=1.5), "worker_types.k80.count", "integer"),
    (lambda d: d["worker_types"]["v100"].update(price_per_hour=-2), "worker_types.v100.price_per_hour",
     "must be a number >= 0, got -2"),
    (lambda d: d["worker_types"]["v100"].update(gpus_per_node=0), "worker_types.v100.gpus_per_node",
     ">= 1"),
    (lambda d: d["jobs"][2]["throughputs"].update(v100=-1), "jobs[2].throughputs.v100",
     "must be a number >= 0, got -1"),
    (lambda d: d["jobs"][0].update(throughputs_unconsolidated={"v100": -2}),
     "jobs[0].throughputs_unconsolidated.v100", "must be a number >= 0, got -2"),
    (lambda d: d["jobs"][0].update(throughputs_unconsolidated={"a100": 2}),
     "jobs[0].throughputs_unconsolidated", "unknown worker type 'a100'"),
    (lambda d: d["jobs"][0].update(scale_factor=0), "jobs[0].scale_factor", "integer >= 1, got 0"),
    (lambda d: d["jobs"][0].update(scale_factor=1.5), "jobs[0].scale_factor", "integer >= 1"),
    (lambda d: d["jobs"][0].update(weight=0), "jobs[0].weight", "must be a number > 0, got 0"),
    (lambda d: d["jobs"][0].update(steps_remaining=-5), "jobs[0].steps_remaining", ">= 0, got -5"),
    (lambda d: d["jobs"][0].update(time_since_arrival=-1), "jobs[0].time_since_arrival", ">= 0"),
    (lambda d: d["jobs"][0].update(slo=0), "jobs[0].slo", "must be a number > 0, got 0"),
    (lambda d: d["jobs"][0]["throughputs"].update(k80=float("inf")), "jobs[0].throughputs.k80",
     "got Infinity"),
    # booleans are not numbers, strings are not numbers
    (lambda d: d["jobs"][0]["throughputs"].update(v100=True), "jobs[0].throughputs.v100", "got true"),
    (lambda d: d["worker_types"]["v100"].update(count=True), "worker_types.v100.count", "got true"),
    (lambda d: d["jobs"][0].update(weight="2"), "jobs[0].weight", 'got "2"'),
    (lambda d: d["jobs"][0].update(id=True), "jobs[0].id", "string or an integer"),
    (lambda d: d["jobs"][0].update(entity=3), "jobs[0].entity", "non-empty string"),
    # unknown keys, anywhere
    (lambda d: d.update(foo=1), "input", "unknown key 'foo'"),
    (lambda d: d["worker_types"]["v100"].update(memory=16), "worker_types.v100", "unknown key 'memory'"),
    (lambda d: d["jobs"][1].update(priority=1), "jobs[1]", "unknown key 'priority'"),
    (lambda d: d["jobs"][1]["throughputs"].update(a100=9), "jobs[1].throughputs",
     "unknown worker type 'a100'"),
    # shapes
    (lambda d: d.update(jobs={}), "jobs", "must be a list"),
    (lambda d: d["jobs"].append(3), "jobs[3]", "must be an object"),
    (lambda d: d.update(worker_types={}), "worker_types", "at least one"),
    (lambda d: d["jobs"][1].update(id="0"), "jobs[0].id", "duplicate job id"),
    # PolicyInput's own checks come through unchanged
    (lambda d: d["jobs"][1].update(scale_factor=2), "jobs[1]", "fits no worker type"),
    (lambda d: d["jobs"][1].update(throughputs={"v100": 0, "k80": None}), "jobs[1]",
     "fits no worker type"),
])
def test_bad_fields_are_named(mutate, field, words):
    doc = seed()
    mutate(doc)
    err = error_of(doc)
    assert err.field == field, str(err)
    assert words in err.problem, str(err)
    assert "\n" not in str(err)


def test_jobs_without_an_id_are_named_by_index():
    doc = seed()
    doc["jobs"][2] = {"throughputs": {"v100": 1}}
    assert error_of(doc).field == "jobs[2].id"


@pytest.mark.parametrize("pairs, field, words", [
    ([{"jobs": ["0", "9"], "throughputs": {}}], "pairs[0].jobs[1]", "unknown job '9'"),
    ([{"jobs": ["0"], "throughputs": {}}], "pairs[0].jobs", "two job ids"),
    ([{"jobs": ["0", "0"], "throughputs": {}}], "pairs[0].jobs", "itself"),
    ([{"jobs": ["0", "1"], "throughputs": {}}, {"jobs": [1, 0], "throughputs": {}}],
     "pairs[1].jobs", "same two jobs as pairs[0]"),
    ([{"jobs": ["0", "1"]}], "pairs[0].throughputs", "is required"),
    ([{"jobs": ["0", "1"], "throughputs": {"tpu": [1, 1]}}], "pairs[0].throughputs",
     "unknown worker type 'tpu'"),
    ([{"jobs": ["0", "1"], "throughputs": {"v100": [1]}}], "pairs[0].throughputs.v100",
     "two numbers"),
    ([{"jobs": ["0", "1"], "throughputs": {"v100": [1, -3]}}], "pairs[0].throughputs.v100[1]",
     ">= 0, got -3"),
    ([{"jobs": ["0", "1"], "throughputs": {}, "note": "x"}], "pairs[0]", "unknown key 'note'"),
    ({"jobs": ["0", "1"]}, "pairs", "must be a list"),
])
def test_bad_pairs(pairs, field, words):
    err = error_of(seed(pairs=pairs))
    assert err.field == field, str(err)
    assert words in err.problem, str(err)


def test_pairs_of_different_scale_factors_rejected_by_model():
    doc = seed(pairs=[{"jobs": ["0", "1"], "throughputs": {"v100": [1, 1]}}])
    doc["worker_types"]["v100"]["count"] = 2
    doc["jobs"][1]["scale_factor"] = 2
    err = error_of(doc)
    assert err.field == "pairs[0]" and "same scale factor" in err.problem


@pytest.mark.parametrize("entities, field, words", [
    ({"a": {"weight": 0}}, "entities.a.weight", "> 0, got 0"),
    ({"a": {"policy": "lottery"}}, "entities.a.policy", "must be one of"),
    ({"a": {"share": 1}}, "entities.a", "unknown key 'share'"),
    ([], "entities", "must be an object"),
])
def test_bad_entities(entities, field, words):
    err = error_of(seed(entities=entities))
    assert err.field == field and words in err.problem, str(err)


def test_top_level_must_be_an_object():
    err = error_of([1, 2])
    assert err.field == "input" and "must be" in err.problem


def test_malformed_json_names_line_and_column():
    with pytest.raises(InputError) as caught:
        parse_json('{\n  "jobs": [\n    {"id": 1,,}\n  ]\n}', "in.json")
    assert caught.value.field == "in.json"
    assert caught.value.problem.startswith("malformed JSON at line 3 column 14:")


def test_duplicate_keys_are_malformed():
    with pytest.raises(InputError, match="'v100' given twice"):
        parse_json('{"v100": 1, "v100": 2}', "in.json")


def test_load_from_file_and_stdin(tmp_path, monkeypatch):
    path = tmp_path / "in.json"
    path.write_text(json.dumps(SEED))
    assert load_policy_input(str(path)).job_ids == ("0", "1", "2")
    assert load_policy_input(path).n_jobs == 3
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(SEED)))
    assert load_policy_input("-").n_jobs == 3


def test_load_missing_file(tmp_path):
    with pytest.raises(InputError) as caught:
        load_policy_input(tmp_path / "nope.json")
    assert caught.value.field == "--input" and "cannot read" in caught.value.problem


def test_example_file_parses():
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2]
    inp = load_policy_input(root / "examples" / "three_jobs.json")
    assert inp.job_ids == ("0", "1", "2")
    np.testing.assert_array_equal(inp.steps_remaining, [100000, 20000, 500000])
