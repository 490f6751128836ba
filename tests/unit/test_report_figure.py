"""pipeline/report_figure.py: the results figure (n under each group, a chance line per group, paired-test marks,
the spread)."""
from __future__ import annotations

from model.benchmarks.registry import REPORT_ROWS as ROWS
from pipeline.report import chance_of, collect, results_figure

CHANCE = chance_of(ROWS)
from tests_support import eval_json


def test_results_figure_marks_the_paired_test_and_the_spread():
    from pipeline.report import results_figure

    table = {"clip-ft": {"SugarCrepe relation": (0.55, 0.02, 3, 100)},
             "macco": {"SugarCrepe relation": (0.45, 0.03, 3, 100)}}
    fig = results_figure(table, ["SugarCrepe relation"], "t", {("macco", "SugarCrepe relation"): "▼"}, chance=CHANCE)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["▼"]
    from matplotlib.container import BarContainer, ErrorbarContainer

    assert sum(isinstance(c, BarContainer) for c in ax.containers) == 2
    assert sum(isinstance(c, ErrorbarContainer) for c in ax.containers) == 2  # the sd over seeds


def test_results_figure_puts_n_under_each_group_and_a_chance_line_per_group():
    results = {"clip-ft": [eval_json("clip-ft-s0", "0x01", "10")],
               "macco": [eval_json("macco-s0", "1x10", "11"), eval_json("macco-s1", "1x11", "01")]}
    table = collect(results, ROWS)
    names = ["ARO VG-Relation (macro)", "What's Up controlled"]
    fig = results_figure(table, names, "t", chance=CHANCE)
    ax = fig.axes[0]
    # n: the cases the group pools (What's Up: one case with a missing image left out)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["ARO VG-Relation (macro)\n(n=2)",
                                                            "What's Up controlled\n(n=3)"]
    chance = [c for c in ax.collections if c.get_label() == "chance"]
    assert len(chance) == 1
    segs = [tuple(map(tuple, s)) for s in chance[0].get_segments()]
    assert segs == [((i - 0.45, 100 * CHANCE[n]), (i + 0.45, 100 * CHANCE[n])) for i, n in enumerate(names)]
    assert [s[0][1] for s in segs] == [50, 25]
