"""The cost file: every field checked on loading, with the field's name and the fix; topologies round-trip."""

import json

import pytest

from simulator.calibration.costfile import load_cost, save_cost
from simulator.cost.model import CostModel, FullyConnected, Ring, TwoLevel

GOOD = {"latency": 1e-5, "bandwidth": 1e9, "flops": 1e9}


def write(tmp_path, data) -> str:
    path = tmp_path / "cost.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"latency": "1e-5"}, r'"latency" must be a number, got "1e-5"; write it without quotes'),
        ({"bandwidth": "fast"}, r'"bandwidth" must be a number, got "fast"'),
        ({"latency": True}, r'"latency" must be a number, got true'),
        ({"flops": None}, r'"flops" must be a number, got null'),
        ({"memory": "80e9"}, r'"memory" must be a number, got "80e9"'),
        ({"latency": -1}, r"latency must be a finite number >= 0"),
        ({"topology": "rign"}, r'"topology" "rign" is not one I know; write "fully-connected", "ring"'),
        ({"topology": {"two-level": {"node_size": 8}}}, r'"two-level" needs exactly the fields node_size'),
        (
            {"topology": {"two-level": {"node_size": "8", "inter_latency": 1e-6, "inter_bandwidth": 1e9}}},
            r'"node_size" must be a whole number, got "8"',
        ),
        ({"latncy": 1e-5}, r"unknown field\(s\) 'latncy'"),
        ({"name": 3}, r'"name" must be text, got 3'),
    ],
)
def test_a_bad_field_is_named_on_loading(tmp_path, change, words):
    with pytest.raises(ValueError, match=words):
        load_cost(write(tmp_path, {**GOOD, **change}))


def test_a_file_that_is_not_an_object_is_refused(tmp_path):
    with pytest.raises(ValueError, match="holds a JSON list; it must be an object"):
        load_cost(write(tmp_path, [1, 2]))
    with pytest.raises(ValueError, match="cannot read a cost model"):
        load_cost(write(tmp_path, "{not json"))


@pytest.mark.parametrize("topology", [FullyConnected(), Ring(), TwoLevel(4, 5e-6, 2.5e10)])
def test_topology_round_trips(tmp_path, topology):
    cost = CostModel(latency=2e-6, bandwidth=5e10, flops=1e12, memory=8e9, topology=topology, name="lab")
    loaded = load_cost(save_cost(tmp_path / "cost.json", cost))
    assert loaded == cost


def test_ring_by_name_loads_as_a_ring(tmp_path):
    assert load_cost(write(tmp_path, {**GOOD, "topology": "ring"})).topology == Ring()


def test_a_failed_save_leaves_the_old_file(tmp_path):
    path = tmp_path / "cost.json"
    save_cost(path, CostModel(**GOOD))
    before = path.read_text()
    with pytest.raises(TypeError):  # not JSON-serialisable, found half-way through writing
        save_cost(path, CostModel(latency=3e-5, bandwidth=2e9, flops=4e9), measured={"x": object()})
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["cost.json"]  # no temporary file left


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"latency": 1e-5, "bandwidth": 1' + "0" * 400 + ', "flops": 1e9}', r'"bandwidth" is a whole number of 401 digits'),
        ("[" * 100_000 + "]" * 100_000, "its JSON is nested too deeply"),
        ('{"latency": 1e-5, "bandwidth": 1e9, "flops": 1e9, "spread": {"sizes": [1' + "0" * 400 + '], "extra": [[1]]}}',
         r'"spread" holds lists of numbers'),
    ],
)  # fmt: skip
def test_numbers_past_a_float_and_deep_nesting_are_named(tmp_path, text, words):
    with pytest.raises(ValueError, match=words):
        load_cost(write(tmp_path, text))


def test_an_endless_file_is_read_only_so_far():
    with pytest.raises(ValueError, match="cannot read a cost model from /dev/zero: it is larger than 64 MiB"):
        load_cost("/dev/zero")


def test_calibrate_says_how_to_use_the_file_it_writes(tmp_path, monkeypatch, capsys):
    import simulator.calibration.calibrate as calibrate_module
    from simulator import World
    from simulator.cli.main import main

    class Measured:  # what calibrate() returns, without starting real ranks
        cost = CostModel(latency=2e-6, bandwidth=3e9)

        def summary(self):
            return "calibrated"

        def save(self, path):
            save_cost(path, self.cost)
            return path

    monkeypatch.setattr(calibrate_module, "calibrate", lambda *args, **kwargs: Measured())
    out = tmp_path / "cost.json"
    assert main(["calibrate", "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"World(n, cost=load_cost({str(out)!r}))" in said and "simulator.calibration.costfile" in said
    assert World(2, cost=load_cost(str(out))).cost.latency == 2e-6  # and what it says works
    with pytest.raises(SystemExit):
        main(["calibrate", "--help"])
    assert "World(n, cost=load_cost('cost.json'))" in " ".join(capsys.readouterr().out.split())
