"""macco/commands_model.py: ``macco eval`` without weights is refused; the world's settings apply unless a flag says
otherwise."""
from __future__ import annotations

import json

from macco.cli import main
from tests_support import one_line_error


def test_eval_without_weights_is_refused_and_the_worlds_settings_apply(world, tmp_path, capsys):
    """`macco eval` without --checkpoint scored a randomly initialised model and exited 0; outside the flow
    --vga-min-count defaulted to 25 (the flow: 5), so on a small world VG-Attribution vanished and the report said
    no case was scored although 8 were."""
    assert main(["eval", "--model", "macco-micro", "--benchmark", "aro-vga", "--world", str(world)]) == 2
    assert "no --checkpoint for macco-micro: that would evaluate a randomly initialised model" in \
        one_line_error(capsys, "eval")
    out = tmp_path / "r.json"
    assert main(["eval", "--model", "macco-micro", "--random-init", "--benchmark", "aro-vga", "--world", str(world),
                 "--out", str(out)]) == 0
    assert json.loads(out.read_text())["benchmarks"]["aro-vga"]["groups"]["min_count"] == 5  # the world's setting
    assert main(["eval", "--model", "macco-micro", "--random-init", "--benchmark", "aro-vga", "--world", str(world),
                 "--vga-min-count", "2", "--out", str(out)]) == 0  # an explicit flag wins
    assert json.loads(out.read_text())["benchmarks"]["aro-vga"]["groups"]["min_count"] == 2
