"""What ``Services.open`` sets up for the process beside the store and the loader."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from app.services import Services
from tests.app.conftest import make_settings


def test_open_puts_arrow_on_the_c_heap(tmp_path: Path) -> None:
    """The startup read's Arrow buffers must come from ``malloc``, which the loader trims
    after the build; mimalloc (Arrow's default) kept about 85 MB of them for good."""
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    services = Services.open(make_settings(f"duckdb:///{tmp_path / 'store.duckdb'}"))
    try:
        assert pa.default_memory_pool().backend_name == "system"
        services.start_in_background().join()
        assert services.failure is None
    finally:
        services.close()
