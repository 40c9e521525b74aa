"""`python -m dpsim grade`: grade student notebooks without trusting anything they print,
patch or leave behind.

Per notebook, on Linux with bubblewrap (`grading.box`), everything of the notebook runs in
OS boxes of its own, as an unprivileged user with no network, seeing only a read-only copy
of dpsim, Python and an empty working folder:

1. the notebook box: a fresh kernel runs the code cells under time and memory limits
   (`grading.kernel`, driven from inside by `grading.notebook_job`), then prints the
   learner's functions as dill bytes (base64 in JSON) (`collect`);
2. the check box, started at the same time: a sandbox server (`grading.sandbox`) that runs
   those functions on each exercise's case inputs and sends back plain data.

This process never unpickles the learner's bytes, builds each exercise's cases itself,
with the student's own seed, and compares the answers here (`grading.compare`); the
expected values never enter a box. Both boxes are killed, with every process in them,
before the next notebook starts, and the reports are written once, after the last one.
Without bubblewrap (macOS, no namespaces) the same processes run unboxed, as this user;
the grader then grades one student's notebooks only, unless `--no-isolation` is given.

A notebook's exercises are the assignment's when `--exercises` names one (only those
count; `--format gradescope` needs it), else its chapter's (file name `NN_...`) plus every
`check("N.M", name)` in its code. Each exercise is judged on one function: the last one
passed to check() for it, else the one its stub names. Every check's time counts against
the notebook's limit. Points are all-or-nothing per exercise. The student id (whose seed
picks the cases) is `--student`, else the folder holding the notebook below the batch's
common folder (`submissions/alice/*.ipynb` are alice's: one row), else, for a notebook in
that folder itself, its folder and file name (`submissions/alice.ipynb`); the notebook
metadata `dpsim.student` is the learner's claim and never trusted. A symbolic link is
refused, never followed. `DPSIM_GRADING_SECRET` in the grader's environment is mixed in and
never passed on. See README "For instructors" for what is and is not covered.

The parts, one concept each: `submission` (a notebook read: whose it is, which exercises it
answers by what names), `collect` (its cells run in a kernel, its functions dumped),
`grader` (`Grader`: one grading run, a notebook's exercises judged), `batch` (every
submission once), `report` (what is printed for the instructor) and `cli` (`main`: the
command itself).
"""

from dpsim.course.grading.grade.cli import main
from dpsim.course.grading.grade.grader import SECRET_VARIABLE, Grader
from dpsim.course.grading.grade.submission import Submission, read_submission

__all__ = ["SECRET_VARIABLE", "Grader", "Submission", "main", "read_submission"]
