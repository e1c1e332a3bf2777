"""An answer's uncertainty: the band recorded from the out-of-sample rows, and the unpublished knobs re-asked."""

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.parallel.whatif import TrainingSetup, Transformer, named_model, whatif
from simulator.parallel.whatif.band import OUT_OF_SAMPLE, Knob, band, knobs
from simulator.parallel.whatif.validate import Summary, outside, outside_table, speed_ratio

SMALL = Transformer(layers=8, hidden=512, heads=8, seq=256, vocab=1024, name="small")


@pytest.fixture(scope="module")
def out_of_sample():
    """The out-of-sample rows predicted once for this module (about 10 s)."""
    return outside()


def test_the_recorded_band_is_what_validate_finds_out_of_sample(out_of_sample):
    summary = Summary.of([speed_ratio(c) for c in out_of_sample])
    low, median, high = OUT_OF_SAMPLE
    assert (summary.low, summary.median, summary.high) == pytest.approx((low, median, high), abs=0.005), (
        f"the what-if moved: set band.OUT_OF_SAMPLE to ({summary.low:.2f}, {summary.median:.2f}, {summary.high:.2f})"
    )


def test_the_guide_prints_the_out_of_sample_table_validate_prints(out_of_sample):
    guide = (Path(__file__).parents[2] / "docs" / "whatif.md").read_text()
    printed = outside_table(out_of_sample)
    assert f"```\n{printed}\n```" in guide, "docs/whatif.md's out-of-sample table is stale: paste validate's"


def test_the_band_divides_the_prediction_by_the_extreme_ratios():
    low, high = band(100.0)
    assert low == pytest.approx(100 / OUT_OF_SAMPLE[2]) and high == pytest.approx(100 / OUT_OF_SAMPLE[0])
    assert low < 100 / OUT_OF_SAMPLE[1] < high


def test_knobs_re_ask_the_depth_the_microbatch_and_the_recomputation():
    layout = TrainingSetup(tp=2, pp=2, global_batch=8, microbatch=2, recompute="selective", attention="unfused")
    base = whatif(SMALL, layout, "dgx-h100").tflops_per_gpu
    found = {k.name: k for k in knobs(SMALL, layout, "dgx-h100")}
    assert set(found) == {"interleaving depth", "microbatch", "recompute"}
    assert [v for v, _, _ in found["interleaving depth"].values] == ["v=1", "v=2", "v=4"]
    assert [v for v, _, _ in found["microbatch"].values] == ["1", "2", "4"]
    recompute = {v: t for v, t, _ in found["recompute"].values}
    assert recompute["full"] < recompute["selective"] <= recompute["none"]
    assert recompute["selective"] == pytest.approx(base)  # the layout's own value is among them
    low, high = found["recompute"].swing(base)
    assert low < 0 <= high and "recompute:" in found["recompute"].text(base)


def test_the_depth_knob_keeps_a_lighter_first_and_last_stage():
    model = named_model("llama3-8b")
    layout = TrainingSetup(tp=8, pp=4, global_batch=8, first_stage_layers=6, last_stage_layers=6)  # 6, 10, 10, 6
    (depth,) = [k for k in knobs(model, layout, "dgx-h100") if k.name == "interleaving depth"]
    # v=2: chunks of 5 with the ends 4 lighter (1, 5, ..., 5, 1); v=4 would need chunks of 2.5 layers
    assert [v for v, _, _ in depth.values] == ["v=1", "v=2"]


def test_a_knob_says_which_values_do_not_fit():
    knob = Knob("recompute", (("none", 120.0, False), ("full", 90.0, True)))
    assert knob.text(100.0) == "recompute: -10% to +20% (none 120 (does not fit), full 90)"
    assert knob.to_json()["values"][0] == {"value": "none", "tflops_per_gpu": 120.0, "fits": False}


def test_a_layout_without_a_pipeline_has_no_depth_knob():
    names = {k.name for k in knobs(SMALL, replace(TrainingSetup(tp=2, global_batch=4)), "dgx-h100")}
    assert "interleaving depth" not in names


def test_a_pipeline_with_sharded_gradients_re_asks_when_they_are_reduced():
    layout = TrainingSetup(tp=2, pp=2, dp=2, global_batch=8, zero=2)
    (when,) = [k for k in knobs(SMALL, layout, "dgx-h100") if k.name == "gradient reduction"]
    (once, every) = when.values
    assert (once[0], every[0]) == ("once", "every microbatch") and once[1] > every[1]  # 4 reduce-scatters, not 1
    assert "gradient reduction" not in {k.name for k in knobs(SMALL, replace(layout, zero=0), "dgx-h100")}
