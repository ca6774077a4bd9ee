import os
import pathlib

import pytest

import ccc

# The repository's schedules/ (ctest passes CCC_SOURCE_DIR; run by hand, the tree this file is in).
SOURCE_DIR = pathlib.Path(os.environ.get("CCC_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
RANKS = 3  # odd, so no schedule's power-of-two shortcut hides a wrong block index


@pytest.fixture(scope="session")
def schedules() -> pathlib.Path:
    return SOURCE_DIR / "schedules"


@pytest.fixture(scope="session")
def comm():
    # One communicator for the whole session: each shape's kernel is compiled once (the tests
    # share it through the JIT cache), and ranks are threads on the host backend.
    with ccc.Communicator(RANKS, backend="host", timeout=60) as c:
        yield c
