"""The elastic restart, once (scripts/stress_elastic.py runs it 20 times in a row): rank 1 is
SIGKILLed under torchrun, the job restarts, resumes from its last checkpoint and ends with the
parameters of the same job without the failure, bit for bit; and no worker outlives it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dpsim.labs.ch10_failures.elastic import SCRIPT, Scenario, root_cause, run_elastic, same_params
from tests.support.bad_input import raises_naming


@pytest.mark.slow
def test_a_killed_rank_restarts_resumes_and_ends_like_the_clean_run(tmp_path: Path) -> None:
    runs = run_elastic(str(tmp_path), (Scenario("killed", 3, kill_at=5), Scenario("clean", 3),
                                       Scenario("raises", 0, raise_at=2)))
    killed, clean, raises = runs["killed"], runs["clean"], runs["raises"]
    assert (killed.exit_code, clean.exit_code) == (0, 0), killed.output[-3000:]
    assert killed.attempts >= 2
    assert any(e["event"] == "killed" and e["rank"] == 1 for e in killed.events)
    resume = [e for e in killed.events if e["event"] == "resume"]
    assert resume
    assert resume[0]["step"] == 4  # the checkpoint after step 3 (every 2 steps)
    assert same_params(killed.params, clean.params)
    assert raises.exit_code == 1
    cause = root_cause(raises.output)
    assert "rank      : 1" in cause
    assert "ValueError: rank 1 found a bad batch at step 2" in cause
    assert raises.error_file is not None
    assert "ValueError" in raises.error_file["message"]["message"]
    pids = {int(e["pid"]) for r in runs.values() for e in r.events if "pid" in e}
    alive = [p for p in pids if Path(f"/proc/{p}").exists()
             and SCRIPT.name in Path(f"/proc/{p}/cmdline").read_text(errors="replace")]
    assert alive == []


def test_bad_scenarios_name_the_field(tmp_path: Path) -> None:
    with raises_naming("kill_at"):
        Scenario("x", kill_at=8, steps=8)
    with raises_naming("max_restarts"):
        Scenario("x", max_restarts=-1)
    with raises_naming("name"):
        Scenario("not a name")
    with raises_naming("workdir"):
        run_elastic(os.path.join(str(tmp_path), "missing"), (Scenario("x"),))
    with raises_naming("scenarios"):
        run_elastic(str(tmp_path), (Scenario("x"), Scenario("x")))
