"""The command line: python -m dpsim {doctor,lab,exercises,grade,notebooks,validate,site,
plan,cluster}."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence


def command_line() -> argparse.ArgumentParser:
    """Every subcommand and its options."""
    parser = argparse.ArgumentParser(prog="python -m dpsim", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="what this machine has and what will run for real here")
    lab = sub.add_parser("lab", help="start JupyterLab on 127.0.0.1 with a token; Ctrl-C, "
                         "SIGTERM or SIGHUP stops it and its kernels")
    lab.add_argument("--port", type=int, default=0, help="0 picks a free port")
    lab.add_argument("--no-browser", action="store_true")
    ex = sub.add_parser("exercises", help="generate exercises/ from solutions/, or check it")
    ex.add_argument("action", choices=["build", "check"])
    ex.add_argument("--root", default=".", help="repository root")
    grade = sub.add_parser("grade", help="grade student notebooks (or `grade gradescope-autograder "
                           "OUT.zip --exercises ...`: Gradescope's autograder zip)")
    grade.add_argument("notebooks", nargs="+")
    grade.add_argument("--csv", default=None, help="write the score table to this CSV file")
    grade.add_argument("--cell-timeout", type=float, default=60.0, help="seconds per cell")
    grade.add_argument("--notebook-timeout", type=float, default=None,
                       help="seconds per notebook (default: 10 cell timeouts)")
    grade.add_argument("--memory-gib", type=float, default=8.0,
                       help="address-space limit of the kernel and the checks (GiB)")
    grade.add_argument("--out", default=None,
                       help="folder for grades.csv, feedback/ (one file per notebook) and, "
                       "with --format gradescope, results.json")
    grade.add_argument("--format", default="csv", choices=["csv", "gradescope"])
    grade.add_argument("--student", default=None,
                       help="student id for every notebook (default: the folder holding it "
                       "below the notebooks' common folder, else folder/file name)")
    grade.add_argument("--exercises", default=None,
                       help="the assignment: only these exercises count (a chapter such as "
                       "1, ids such as 1.1,1.3); needed with --format gradescope")
    grade.add_argument("--no-isolation", action="store_true",
                       help="grade without the OS sandbox (bubblewrap) even for several "
                       "students: a notebook can then change another's grade")
    grade.add_argument("--visibility", default="visible",
                       choices=["visible", "hidden", "after_due_date", "after_published"],
                       help="Gradescope visibility of the tests and score")
    grade.add_argument("--slurm", action="store_const", const="", default=None,
                       help="grade as a Slurm job array on the kit's cluster (python -m dpsim "
                       "cluster), one task per student, into the same files as a local batch")
    grade.add_argument("--slurm-sbatch", dest="slurm", default=None, metavar="OPTIONS",
                       help="--slurm, with these sbatch options for every task: "
                       "--slurm-sbatch='--partition=p --time=30'")
    course = sub.add_parser("course", help="release: write the student's kit (the notebooks, "
                            "dpsim without the answer key, the public cases as data) into OUT")
    course.add_argument("action", choices=["release"])
    course.add_argument("out", help="a new folder for the student's kit")
    course.add_argument("--root", default=".", help="the instructor's kit (repository root)")
    nb = sub.add_parser("notebooks", help="execute notebooks and keep only checked outputs")
    nb.add_argument("action", choices=["refresh", "check"])
    nb.add_argument("paths", nargs="*")
    val = sub.add_parser("validate", help="the model against published measurements: "
                         "every point, held-out errors; writes results and docs/validation.md")
    val.add_argument("--root", default=".", help="repository root to write the files under")
    val.add_argument("--no-write", action="store_true", help="print only")
    val.add_argument("--write-constants", action="store_true",
                     help="also write the collective fit's constants into "
                          "dpsim/sim/collectives/link_constants.py (after adding a published run)")
    site = sub.add_parser("site", help="build the course's static site (every chapter with "
                          "its outputs) or serve it on 127.0.0.1")
    site.add_argument("action", choices=["build", "serve"])
    site.add_argument("--out", default="build/site", help="the site's folder")
    site.add_argument("--executed", default=None,
                      help="build: a folder of executed copies of every notebook (default: "
                           "run them here, cached in build/site-executed)")
    site.add_argument("--jobs", type=int, default=2, help="build: notebooks run at a time")
    site.add_argument("--port", type=int, default=8000, help="serve: port (0 picks one)")
    site.add_argument("--root", default=".", help="repository root")
    from dpsim.course.plan_command import add_arguments as add_plan_arguments

    add_plan_arguments(sub.add_parser("plan", help="the planner's prediction for a model on "
                                      "a cluster preset; --sbatch FILE writes the Slurm job"))
    from dpsim.runtime.slurm.cli import add_arguments as add_cluster_arguments

    add_cluster_arguments(sub.add_parser("cluster", help="a real Slurm cluster on this machine "
                                         "(127.0.0.1 only): start it, show it, stop it"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a subcommand; return the process exit code."""
    parser = command_line()
    args = parser.parse_args(argv)

    if args.command == "doctor":
        from dpsim.course.doctor import main as doctor_main

        return doctor_main()
    if args.command == "lab":
        from dpsim.course.lab import main as lab_main

        return lab_main(port=args.port, open_browser=not args.no_browser)
    if args.command == "exercises":
        from dpsim.course.grading.build import main as exercises_main

        return exercises_main(args.action, root=args.root)
    if args.command == "grade":
        # nothing the notebooks' folders hold is imported: the current folder leaves sys.path
        sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]
        if importlib.util.find_spec("dpsim.course.exercises") is None:
            print("grade: this is the student's kit, which holds no answer key: grade with "
                  "the instructor's kit (the repository)")
            return 2
        if args.notebooks[0] == "gradescope-autograder":
            from dpsim.course.grading.gradescope_autograder import main as zip_main

            return zip_main(args.notebooks[1:], exercises=args.exercises,
                            visibility=args.visibility, cell_timeout_s=args.cell_timeout,
                            memory_gib=args.memory_gib)
        from dpsim.course.grading.grade import main as grade_main

        return grade_main(args.notebooks, csv_path=args.csv, cell_timeout_s=args.cell_timeout,
                          out_dir=args.out, output_format=args.format,
                          notebook_timeout_s=args.notebook_timeout,
                          memory_gib=args.memory_gib, student=args.student,
                          isolation=not args.no_isolation, visibility=args.visibility,
                          exercises=args.exercises, slurm=args.slurm)
    if args.command == "course":
        from dpsim.course.grading.release import main as release_main

        return release_main(args.out, root=args.root)
    if args.command == "notebooks":
        from dpsim.course.notebook_outputs import main as notebooks_main

        return notebooks_main(args.action, args.paths)
    if args.command == "validate":
        from dpsim.reports.validation import main as validate_main

        return validate_main(args.root, write=not args.no_write,
                             write_constants=args.write_constants)
    if args.command == "plan":
        from dpsim.course.plan_command import main as plan_main

        return plan_main(args, argv)
    if args.command == "site":
        from pathlib import Path

        if args.action == "build":
            from dpsim.course.website.build import main as site_main

            return site_main(args.out, args.executed, args.jobs, Path(args.root).resolve())
        from dpsim.course.website.serve import main as serve_main

        return serve_main(Path(args.out), args.port)
    if args.command == "cluster":
        from dpsim.runtime.slurm.cli import main as cluster_main

        return cluster_main(args.action, args.root, args.nodes, args.cpus_per_node)
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
