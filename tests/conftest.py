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


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    """A small synthetic world shared by the session (read-only for tests)."""
    from pipeline.world import WorldConfig, generate_world

    root = tmp_path_factory.mktemp("world")
    generate_world(root, WorldConfig(seed=7, images=40, size=64))
    return root


@pytest.fixture()
def python():
    return sys.executable
