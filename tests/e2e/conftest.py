"""The end-to-end tests' Prefect test harness (one per module)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    storage = tmp_path_factory.mktemp("prefect-results")
    with temporary_settings({PREFECT_RESULTS_LOCAL_STORAGE_PATH: str(storage)}):
        with prefect_test_harness(server_startup_timeout=120):
            yield
