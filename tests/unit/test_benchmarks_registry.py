"""model/benchmarks/registry.py: the registry is the one list of benchmarks."""
import pytest

from model.benchmarks import EvalConfig, aro
from model.benchmarks.scoring import Case


def test_the_registry_is_the_one_list_of_benchmarks():
    """One record per name, each either a case benchmark (load + groups) or a direct one (run); every module under
    model/benchmarks/ keys the evaluate stage; the CLI's --benchmark choices are the registry's names, read
    without torch."""
    import subprocess
    import sys
    from pathlib import Path

    from macco.cli import build_parser
    from model.benchmarks import BENCHMARKS, REGISTRY, case_groups
    from data_schemas.provenance import module_closure
    from model.benchmarks.registry import code_roots, get

    assert tuple(REGISTRY) == BENCHMARKS and len(set(BENCHMARKS)) == 15
    for b in REGISTRY.values():
        assert (b.run is None) == (b.load is not None and b.groups is not None and b.report_groups is not None), b
        assert b.code().__name__ == f"model.benchmarks.{b.module}"
    pkg = Path(aro.__file__).parent
    assert {f"model.benchmarks.{p.stem}" for p in pkg.glob("*.py") if p.stem != "__init__"} | {
        "model.benchmarks"} <= set(module_closure(*code_roots()))
    with pytest.raises(ValueError, match="unknown benchmark 'nope'"):
        get("nope")
    assert case_groups("zeroshot", Case("x.png", ["a"], 0, "s"), EvalConfig()) == []
    ev = build_parser()._subparsers._group_actions[0].choices["eval"]
    assert list(next(a for a in ev._actions if a.dest == "benchmark").choices) == [*BENCHMARKS, "all"]
    code = ("import sys\nfrom macco.cli import build_parser\nbuild_parser()\n"
            "assert 'torch' not in sys.modules and 'model.benchmarks.scoring' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_benchmark_checks_its_inputs_before_the_model(tmp_path):
    """Each record's check refuses an empty root (naming what it looked for) and a missing one, with no model."""
    from model.benchmarks import BENCHMARKS
    from model.benchmarks.registry import input_problems

    cfg = EvalConfig()
    for name in BENCHMARKS:
        problems = input_problems(name, tmp_path, cfg)
        assert problems and all(str(tmp_path) in str(e) and "\n" not in str(e) for e in problems), (name, problems)
        assert [str(e) for e in input_problems(name, tmp_path / "x", cfg)] == [f"{tmp_path / 'x'}: {name} root "
                                                                              "not found"]
