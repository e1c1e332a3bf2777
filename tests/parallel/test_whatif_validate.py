"""The what-if against published measurements: every row within 15%, and the tables' trends kept."""

import pytest

from simulator.parallel.whatif.tables import KORTHIKANTI, NARAYANAN, published_rows
from simulator.parallel.whatif.validate import BAND, activation_checks, layer_checks, table, validate


@pytest.fixture(scope="module")
def checked():
    return validate()


def rows(checked, table_name):
    return [c for c in checked if c.row.table == table_name]


def test_every_published_row_is_within_15_percent(checked):
    assert len(checked) == len(published_rows()) == 18
    outside = {c.row.label: round(c.ratio, 3) for c in checked if not BAND[0] <= c.ratio <= BAND[1]}
    assert not outside, f"outside {BAND}: {outside}\n{table(checked)}"


def test_table_1_runs_the_microbatches_chunks_and_ddp_of_the_papers_scripts(checked):
    t1 = [c.row.layout for c in rows(checked, NARAYANAN)]
    assert [lay.microbatch for lay in t1] == [16, 16, 16, 8, 4, 2, 2, 1, 1, 1]
    assert [lay.virtual_stages for lay in t1] == [1, 1, 1, 1, 1, 3, 2, 2, 3, 1]
    assert [lay.dp_overlap for lay in t1] == [True] * 4 + [False] * 6  # PyTorch's DDP up to 18B, then "local"


def test_table_1_throughput_grows_with_the_model_as_published(checked):
    t1 = rows(checked, NARAYANAN)
    published = [c.row.published for c in t1]
    predicted = [c.predicted for c in t1]
    assert published[-1] > published[0] and predicted[-1] > predicted[0]  # 1T beats 1.7B in both
    deep = slice(4, 9)  # 39B .. 530B, pipelined and interleaved: both rise with the model
    assert published[deep] == sorted(published[deep]) and predicted[deep] == sorted(predicted[deep])
    # without a pipeline: 18B (tp 8) below all three smaller models
    assert published[3] < min(published[:3]) and predicted[3] < min(predicted[:3])


@pytest.mark.xfail(
    strict=True,
    reason="A100 products are read from measured shapes whose kernel-to-kernel spread (about 10%) is wider than "
    "the published 4% between 1.7B and 7.5B: 1.7B (width 2,304) reads Phi-2's fast profiles (width 2,560), and "
    "the two come out level (147.8 and 147.2 TFLOP/s); docs/whatif.md",
)
def test_table_1_7_5b_beats_1_7b_as_published(checked):
    t1 = rows(checked, NARAYANAN)
    published = [c.row.published for c in t1]
    predicted = [c.predicted for c in t1]
    assert published[2] > published[0] and predicted[2] > predicted[0]  # 7.5B (tp 4) above 1.7B (tp 1)


def test_table_5_times_grow_and_sequence_parallelism_saves_what_was_measured(checked):
    t5 = rows(checked, KORTHIKANTI)
    full, seqsel = t5[0::2], t5[1::2]
    for series in (full, seqsel):
        assert [c.predicted for c in series] == sorted(c.predicted for c in series)
    for f, s in zip(full, seqsel):
        measured, predicted = s.row.published / f.row.published, s.predicted / f.predicted
        assert abs(predicted - measured) < 0.05, (f.row.label, measured, predicted)


def test_table_5_utilisation_rises_with_the_model_as_published(checked):
    mfu = [c.report.mfu for c in rows(checked, KORTHIKANTI)[1::2]]  # 41.5, 51.4, 56.0, 56.3% (the README)
    assert mfu[0] < mfu[1] < mfu[2] and mfu[3] > mfu[1]


def test_figure_1_activation_memory_is_reproduced():
    for label, published, predicted in activation_checks():
        assert abs(predicted / published - 1) < 1e-3, label


def test_table_4_one_layers_forward_and_backward_are_within_15_percent():
    """The 22B model's layer, op by op: forward and backward times as measured, and what each technique does to
    them as measured: sequence parallelism shortens the forward, full recomputation lengthens the backward by far
    more than selective recomputation does."""
    got = {label: (published, predicted) for label, published, predicted in layer_checks()}
    assert len(got) == 10
    for label, (published, predicted) in got.items():
        assert BAND[0] <= predicted / published <= BAND[1], (label, published, predicted)
    for col in (0, 1):  # published, then predicted
        fwd = {k.rsplit(",", 1)[0]: v[col] for k, v in got.items() if k.endswith("forward")}
        back = {k.rsplit(",", 1)[0]: v[col] for k, v in got.items() if k.endswith("backward")}
        assert fwd["no recompute + seq. par."] < fwd["no recompute"]
        assert back["full recompute"] - back["no recompute"] > 4 * (back["selective"] - back["no recompute"]) > 0


def test_the_printed_table_names_every_row(checked):
    text = table(checked)
    for c in checked:
        assert c.row.label in text
    assert "28 of 28 rows of Tables 1, 4 and 5 within 0.85-1.15" in text
    assert "outside" not in text
