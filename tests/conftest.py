import os
import sys
from pathlib import Path

import pytest

for _k, _v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "DO_NOT_TRACK": "1", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}.items():
    os.environ[_k] = _v

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DATA = Path(__file__).parent / "data"


def pytest_collection_modifyitems(config, items):
    try:
        import torch
        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _prefect_console_on_a_live_stream():
    """Prefect (re)configures its logging when a flow runs: its console handler keeps the stream ``sys.stderr``
    was then — in a test using ``capsys``, that test's capture stream, closed when the test ends; every later
    in-process flow run then fails with "I/O operation on closed file". Before each test, such a handler is pointed
    back at the process's stderr."""
    import logging

    handlers_module = sys.modules.get("prefect.logging.handlers")
    if handlers_module is not None:
        loggers = [logging.getLogger(), *(v for v in logging.root.manager.loggerDict.values()
                                          if isinstance(v, logging.Logger))]
        for logger in loggers:
            for h in logger.handlers:
                if isinstance(h, handlers_module.PrefectConsoleHandler) and getattr(h.stream, "closed", False):
                    h.stream = sys.__stderr__  # (setStream would flush the closed one)
                    h.console.file = sys.__stderr__
    yield


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    """A small synthetic world shared by the session (read-only for tests)."""
    from model.benchmarks.registry import world_sets
    from pipeline.world import WorldConfig, generate_world

    root = tmp_path_factory.mktemp("world")
    generate_world(root, WorldConfig(seed=7, images=40, size=64), world_sets())
    return root


@pytest.fixture()
def python():
    return sys.executable


@pytest.fixture(scope="session")
def world_tables(world, tmp_path_factory):
    """The session world run through captions -> parse -> ground (annotations) -> patch masks."""
    from data_schemas import TABLES, read_table
    from pipeline.masks_stage import MasksConfig, masks_stage
    from tests_support import build_world_tables

    out = tmp_path_factory.mktemp("tables")
    caps = build_world_tables(world, out)
    regions = read_table(TABLES["regions"], out / "ground" / "regions").to_pylist()
    masks_stage(MasksConfig(["macco-micro"]), caps, regions, out / "ground")
    return {"captions": out / "captions", "token_masks": out / "token_masks", "scene_graphs": out / "scene_graphs",
            "regions": out / "ground" / "regions", "patch_masks": out / "ground" / "patch_masks", "root": out}


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """A Prefect test server per module (the end-to-end and fault tests that run the flow in-process)."""
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    storage = tmp_path_factory.mktemp("prefect-results")
    with temporary_settings({PREFECT_RESULTS_LOCAL_STORAGE_PATH: str(storage)}):
        with prefect_test_harness(server_startup_timeout=120):
            yield
