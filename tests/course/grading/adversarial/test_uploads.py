"""python -m dpsim grade over what a class uploads (uploads.py): one student's odd text stops
no one's reports, a notebook cannot claim a classmate's row or hedge between answers, no
formula reaches the CSV, links are refused and leak nothing, a name forges no log line, and
a Gradescope assignment counts its own exercises only.

One batch (module fixture), each notebook in its own OS box, printed to a strict UTF-8
stream as a terminal's would be (so text that cannot be encoded fails as it would there)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
from pathlib import Path

import pytest

from dpsim.course.grading import box, grade
from tests.course.grading.adversarial import uploads

Batch = tuple[dict[str, dict[str, str]], str, Path, dict[str, object]]
NO_BOX = box.unavailable()
needs_box = pytest.mark.skipif(
    NO_BOX is not None and not os.environ.get("DPSIM_REQUIRE_SANDBOX"),
    reason=f"the OS sandbox is not available here: {NO_BOX}")
SOLUTION = Path(__file__).parents[4] / "solutions" / "01_single_device.ipynb"
ALL_RIGHT = {"1.3": "1", "3.1": "1", "4.2": "1"}


def _grade(notebooks: list[Path], **kwargs: object) -> tuple[int, str]:
    """grade.main with its output on a strict UTF-8 stream; (rc, what it printed)."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    with contextlib.redirect_stdout(stream):
        rc = grade.main([str(p) for p in notebooks], **kwargs)  # type: ignore[arg-type]
    stream.flush()
    return rc, raw.getvalue().decode("utf-8")


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Batch:
    folder = tmp_path_factory.mktemp("uploads")
    submissions = folder / "submissions"
    submissions.mkdir()
    secret_file = folder / "grader.env"
    secret_file.write_text(f"{grade.SECRET_VARIABLE}={uploads.SECRET}\n")
    paths = uploads.write(submissions, SOLUTION, secret_file)
    out_dir = folder / "out"
    os.environ[grade.SECRET_VARIABLE] = uploads.SECRET
    try:
        rc, out = _grade(paths, cell_timeout_s=15.0, out_dir=str(out_dir))
    finally:
        del os.environ[grade.SECRET_VARIABLE]
    csv_text = (out_dir / "grades.csv").read_text(encoding="utf-8")
    rows = {r["student"]: r for r in csv.DictReader(io.StringIO(csv_text))}
    return rows, out, out_dir, {"rc": rc, "csv_text": csv_text}


def _feedback(out_dir: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8")
                     for p in sorted((out_dir / "feedback").glob("*.txt")))


@needs_box
@pytest.mark.slow
def test_odd_text_stops_no_ones_reports(batch: Batch) -> None:
    """Lone surrogates (an error message, a metadata id) and a non-UTF-8 folder name: the
    batch completes, every student has a row and a feedback file, and josé his marks."""
    rows, out, out_dir, facts = batch
    assert "graded 12 notebook(s) of 9 student(s)" in out, out
    assert len(rows) == len(uploads.UPLOADS), sorted(rows)
    assert len(list((out_dir / "feedback").glob("*.txt"))) == len(uploads.UPLOADS)
    jose = rows["jos\\xe9"]
    assert {i: jose[i] for i in ALL_RIGHT} == ALL_RIGHT, out
    hedger = rows["'@SUM(1+1)"]
    assert hedger["4.2"] == "0", out
    assert "broken ? text" in out  # the learner's message, its surrogate replaced
    assert "broken \\ud800 text" in _feedback(out_dir) or "broken ? text" in _feedback(out_dir)
    assert facts["rc"] == 2  # eve's notebook is a grader error: the instructor looks


@needs_box
@pytest.mark.slow
def test_a_claimed_id_takes_no_classmates_row(batch: Batch) -> None:
    """mallory's notebook claims carol's id: it is graded as mallory's, carol keeps her
    3.1 failure; alice's two files make one row."""
    rows, out, _, _ = batch
    assert {i: rows["carol"][i] for i in ALL_RIGHT} == {"1.3": "1", "3.1": "0", "4.2": "1"}
    assert {i: rows["mallory"][i] for i in ALL_RIGHT} == ALL_RIGHT
    assert "metadata names the student 'carol'" in out
    alice = rows["alice"]
    assert {i: alice[i] for i in ALL_RIGHT} == ALL_RIGHT, out
    assert alice["notebooks"].count(".ipynb") == 2
    assert not [s for s in rows if s.startswith(("alice/", "mallory\\"))]


@needs_box
@pytest.mark.slow
def test_a_hedge_earns_nothing(batch: Batch) -> None:
    """The right 1.3 passed to check(), then a wrong one: the last one passed is judged."""
    rows, out, _, _ = batch
    assert rows["'@SUM(1+1)"]["1.3"] == "0", out


@needs_box
@pytest.mark.slow
def test_no_formula_reaches_the_csv(batch: Batch) -> None:
    _, _, _, facts = batch
    cells = [c for row in csv.reader(io.StringIO(str(facts["csv_text"]))) for c in row]
    assert not [c for c in cells if c.startswith(("=", "+", "-", "@", "\t", "\r"))], cells
    assert "'@SUM(1+1)" in cells
    assert "'=HYPERLINK(\"x\")" in cells


@needs_box
@pytest.mark.slow
def test_links_are_refused_and_leak_nothing(batch: Batch) -> None:
    """A link to the solutions (the file or its folder), to a file holding the secret and
    to /proc/self/environ grades nothing, and nothing of their targets is shown."""
    rows, out, out_dir, facts = batch
    for who in ("linker", "linkdir", "'=HYPERLINK(\"x\")"):
        assert rows[who]["total"] == "0", (who, out)
        assert rows[who]["1.3"] == "0", (who, out)
    assert "links in a submission are not followed" in out
    everything = out + str(facts["csv_text"]) + _feedback(out_dir)
    assert uploads.SECRET not in everything
    assert "PATH=" not in everything
    assert "BEGIN SOLUTION" not in everything


@needs_box
@pytest.mark.slow
def test_a_name_forges_no_line(batch: Batch) -> None:
    """A folder name holding a newline and escape codes reaches the log and the CSV
    escaped; a cell whose source is an int is a grader error, not `0 of 0`."""
    rows, out, _, facts = batch
    assert "\x1b" not in out
    assert "\x1b" not in str(facts["csv_text"])
    assert not [line for line in out.splitlines() if line.startswith("graded 9")], out
    assert len(str(facts["csv_text"]).splitlines()) == len(rows) + 1
    eve = rows["eve\\x0agraded 9 notebook(s) FORGED\\x1b[2J"]
    assert eve["grader_errors"] == "1", out


@needs_box
@pytest.mark.slow
def test_gradescope_counts_the_assignments_exercises(tmp_path: Path) -> None:
    """A chapter-1 assignment: chapter-4 answers with check("4.2", ...) count nothing;
    the results.json is written although the id and a message hold lone surrogates."""
    where = tmp_path / "submission"
    where.mkdir()
    path = where / "01_answers.ipynb"
    broken = ('def mlp_activation_bytes(batch_size, widths):\n'
              '    raise RuntimeError("broken \\ud800 text")\n')
    path.write_bytes(uploads.notebook([uploads.RIGHT, broken, 'check("4.2", gil_share)\n'
                                       'check("4.1", gil_share)\n'],
                                      student="mallory\ud800"))
    rc, out = _grade([path], out_dir=str(tmp_path / "out"), output_format="gradescope",
                     student="s\udce9\ud800", exercises="1")
    got = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [t["number"] for t in got["tests"]] == ["1.1", "1.2", "1.3", "1.4", "1.5"], out
    assert got["score"] == 1, out  # 1.3 only: 4.2 is right but not this assignment's
    assert "broken ? text" in json.dumps(got), out
    assert rc == 0, out
