"""Build the course's static site: pages from the notebooks, then Sphinx.

    python -m dpsim site build [--executed FOLDER] [--out build/site]

The Sphinx source folder is assembled in build/site-src: the skeleton in website/ (conf.py,
the landing page, the style sheet), the site's own plotly.min.js, one page per chapter
(dpsim.course.website.pages) and per exercise notebook, and the source notebooks to
download. Then `sphinx-build -b html` writes the site. Nothing is fetched from a network.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import plotly

from dpsim.course.chapters import CHAPTERS
from dpsim.course.website.execute import copies_from, run_all
from dpsim.course.website.pages import chapter_page, exercise_page
from dpsim.course.website.provenance import Provenance, this_machine

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


@dataclass(frozen=True)
class SiteReport:
    """What a build made: where, how long it took and how big it is."""

    out: Path  # the site's folder; index.html is its entry page
    seconds: float  # the whole build's wall time, notebooks' runs included (s)
    run_seconds: float  # of which running notebooks (0 when copies were given or cached) (s)
    total_bytes: int  # every file of the site
    largest_page: tuple[str, int]  # the largest .html page: its path in the site and bytes

    def describe(self) -> str:
        """One line for the terminal."""
        page, size = self.largest_page
        return (f"dpsim site: {self.out / 'index.html'} built in {self.seconds:.0f} s "
                f"({self.run_seconds:.0f} s running notebooks); {self.total_bytes / 1e6:.1f} MB "
                f"in all, largest page {page} ({size / 1e6:.2f} MB)")


def build_site(root: Path, out: Path, executed: Path | None = None, jobs: int = 2,
               say: bool = True) -> SiteReport:
    """Build the site of the repository at `root` into `out`.

    `executed`: a folder of executed copies of every notebook (the test suite's); without
    it the notebooks run here (cached in build/site-executed).
    """
    start = time.monotonic()
    notebooks = sorted((root / "notebooks").glob("*.ipynb"))
    if executed is not None:
        copies, run_s = copies_from(executed, notebooks), 0.0
    else:
        copies = run_all(notebooks, root / "build" / "site-executed", root / "dpsim", jobs, say)
        run_s = time.monotonic() - start
    src = out.parent / f"{out.name}-src"
    assemble(root, src, copies, this_machine(root / "benchmarks" / "results"))
    sphinx(src, out, say)
    return report(out, time.monotonic() - start, run_s)


def assemble(root: Path, src: Path, copies: dict[str, Path], provenance: Provenance) -> None:
    """Write the Sphinx source folder `src` (emptied first)."""
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(root / "website", src)
    shutil.copy2(PLOTLY_JS, src / "_static" / "plotly.min.js")
    raw = src / "_raw"
    for folder in ("notebooks", "exercises"):
        shutil.copytree(root / folder, raw / folder,
                        ignore=shutil.ignore_patterns("*.py", ".ipynb_checkpoints"))
    (src / "chapters").mkdir()
    for name, copy in sorted(copies.items()):
        stem = Path(name).stem
        banner = provenance.banner(f"../_raw/notebooks/{name}")
        page = chapter_page(nbformat.read(copy, as_version=4), stem, banner)
        nbformat.write(page, src / "chapters" / name)
    exercises = sorted((root / "exercises").glob("*.ipynb"))
    (src / "exercises").mkdir()
    for path in exercises:
        page = exercise_page(nbformat.read(path, as_version=4), path.name)
        nbformat.write(page, src / "exercises" / path.name)
    (src / "exercises" / "index.md").write_text(_exercise_index(exercises))
    landing = (src / "index.md").read_text()
    landing = (landing.replace("{{provenance}}", _provenance_sentence(provenance))
               .replace("{{chapters}}", _chapter_table(copies))
               .replace("{{toctrees}}", _toctrees(copies, exercises)))
    (src / "index.md").write_text(landing)


def sphinx(src: Path, out: Path, say: bool = True) -> None:
    """`sphinx-build -b html src out` in a process of its own; its warnings are errors."""
    if out.exists():
        shutil.rmtree(out)
    argv = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going",
            "-d", str(src / "_doctrees"), str(src), str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if say and done.stdout.strip():
        print(done.stdout, file=sys.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"sphinx-build failed (exit {done.returncode}):\n{done.stderr}")
    for source_map in (out / "_static").rglob("*.map"):  # the theme's, for its own debugging
        source_map.unlink()


def report(out: Path, seconds: float, run_seconds: float) -> SiteReport:
    """Sizes of the built site `out`."""
    files = [p for p in out.rglob("*") if p.is_file()]
    pages = [p for p in files if p.suffix == ".html"]
    largest = max(pages, key=lambda p: p.stat().st_size)
    return SiteReport(out, seconds, run_seconds, sum(p.stat().st_size for p in files),
                      (largest.relative_to(out).as_posix(), largest.stat().st_size))


def _provenance_sentence(p: Provenance) -> str:
    return (f"on {p.cpu} ({p.cores} CPU cores, {p.system}, torch {p.torch}), on {p.date}, "
            "with no GPU. Each chapter says which of its numbers are measured, re-enacted, "
            "simulated or published.")


def _chapter_table(copies: dict[str, Path]) -> str:
    rows = ["| # | chapter | runs for real on a CPU | simulated |", "|---|---|---|---|"]
    for ch in CHAPTERS:
        if ch.notebook in copies:
            rows.append(f"| {ch.number} | [{ch.title}](chapters/{ch.notebook}) | "
                        f"{ch.real_cpu} | {ch.simulated} |")
    return "\n".join(rows)


def _toctrees(copies: dict[str, Path], exercises: list[Path]) -> str:
    chapters = [n for n in sorted(copies) if not n.startswith("11_")]
    appendix = [n for n in sorted(copies) if n.startswith("11_")]

    def tree(caption: str, entries: list[str]) -> str:
        return "\n".join(["```{toctree}", ":hidden:", f":caption: {caption}", "", *entries,
                          "```", ""])

    return "\n".join([
        tree("Chapters", [f"chapters/{Path(n).stem}" for n in chapters]),
        tree("Appendix", [f"chapters/{Path(n).stem}" for n in appendix]),
        tree("Exercises", ["exercises/index"]),
    ])


def _exercise_index(exercises: list[Path]) -> str:
    titles = {ch.notebook: ch.title for ch in CHAPTERS}
    lines = ["# Exercises", "",
             "Each chapter's graded exercises, as notebooks to run in JupyterLab: "
             "`make lab`, then open `exercises/NN_topic.ipynb`. Replace each "
             "`raise NotImplementedError` with your code and run the graded cell under it. "
             "Answers are not on this site.", "",
             "```{toctree}", ":maxdepth: 1", "",
             *[f"{titles.get(p.name, p.stem)} <{p.stem}>" for p in exercises], "```", ""]
    return "\n".join(lines)


def main(argv_out: str, executed: str | None, jobs: int, root: Path) -> int:
    """`python -m dpsim site build`: build, print the report; 0 on success."""
    if jobs < 1:
        raise ValueError(f"jobs={jobs} is not allowed; give 1 or more")
    folder = Path(executed) if executed else None
    if folder is not None and not folder.is_dir():
        raise ValueError(f"executed={executed!r} is not a folder; give the folder of "
                         "executed notebook copies")
    site = build_site(root, Path(argv_out).resolve(), folder, jobs)
    print(site.describe())
    return 0
