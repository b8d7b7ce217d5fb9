from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _helpers_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``jobs_helpers`` importable by name (as jobs are)."""
    monkeypatch.syspath_prepend(str(HERE))
