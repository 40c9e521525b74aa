"""The chapter list is written once, in dpsim/course/chapters.py; every other list of the
chapters agrees with it: the notebooks in notebooks/, the README's chapter table and the
table in notebooks/00_start_here.ipynb (the site's landing page is generated from CHAPTERS).

The tables' prose is written for their readers; what must not drift is which chapters there
are, their order, their notebooks, and where the README says a chapter has no GPU path, no
CPU run or nothing simulated.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dpsim.course.chapters import CHAPTERS, Chapter

ROOT = Path(__file__).resolve().parents[2]
NONE = "—"


def table_rows(markdown: str, header: str) -> list[list[str]]:
    """The cells of each body row of the markdown table whose header row starts `header`."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:  # the header, then the |---| rule
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def listed(cell: str) -> str:
    """The notebook a table names ("`01_single_device` (appendix)" -> "01_single_device")."""
    found = re.match(r"`([^`]+)`", cell)
    assert found, f"{cell!r} names no notebook in backticks"
    return found.group(1)


def readme_rows() -> list[list[str]]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return table_rows(readme, "| # | notebook |")


def test_every_notebook_is_a_chapter_in_order() -> None:
    on_disk = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert [ch.notebook for ch in CHAPTERS] == on_disk
    assert [ch.number for ch in CHAPTERS] == list(range(len(CHAPTERS)))


def test_the_readme_table_lists_the_chapters() -> None:
    rows = readme_rows()
    assert [(int(r[0]), listed(r[1])) for r in rows] == [
        (ch.number, Path(ch.notebook).stem) for ch in CHAPTERS]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.notebook)
def test_the_readme_row_says_what_chapters_py_says(chapter: Chapter) -> None:
    _number, _notebook, cpu, gpu, simulated = readme_rows()[chapter.number]
    assert (gpu.startswith(NONE) or gpu == "same") == (chapter.gpus_for_real == 0), (
        f"README: chapter {chapter.number}'s GPU column is {gpu!r}; chapters.py: "
        f"gpus_for_real={chapter.gpus_for_real}")
    assert (cpu == NONE) == chapter.real_cpu.startswith("nothing"), (chapter.number, cpu)
    assert (simulated == NONE) == (chapter.simulated == "nothing"), (chapter.number, simulated)


def test_the_start_notebooks_table_lists_the_chapters() -> None:
    cells = json.loads((ROOT / "notebooks" / "00_start_here.ipynb").read_text(encoding="utf-8"))
    intro = "".join(cells["cells"][0]["source"])
    rows = table_rows(intro, "| chapter | notebook |")
    assert [(int(r[0]), listed(r[1])) for r in rows] == [
        (ch.number, Path(ch.notebook).stem) for ch in CHAPTERS[1:]]
