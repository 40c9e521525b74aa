"""A Slurm cluster for the tests in this folder: started once per test process in a
temporary folder, stopped at the end. Where Slurm is not installed these tests skip, except
under DPSIM_REQUIRE_SLURM=1 (CI, .ci/run), where they fail."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from dpsim.runtime import slurm

NO_SLURM = slurm.available()
needs_slurm = pytest.mark.skipif(
    NO_SLURM is not None and not os.environ.get("DPSIM_REQUIRE_SLURM"),
    reason=f"Slurm is not installed here: {NO_SLURM}")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm.Cluster]:
    """A 2-node cluster of this test process."""
    root = tmp_path_factory.mktemp("slurm")
    cluster = slurm.up(root, nodes=2)
    yield cluster
    slurm.down(root)
