"""The course machinery: the chapter catalogue (`chapters`), what this machine can run
(`doctor`), JupyterLab (`lab`), notebook start-up (`session`), the exercises' content
(`exercises/`), grading in one home (`grading/`: the checks, exercises/ built from
solutions/, the instructor's grader) and the outputs kept in committed notebooks
(`notebook_outputs`).

Nothing in the simulator, `runtime`, `viz` or `widgets` imports this package.
"""
