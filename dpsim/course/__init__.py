"""The course machinery: the chapter catalogue (`chapters`), what this machine can run
(`doctor`), JupyterLab (`lab`), notebook start-up (`session`), exercises built from
solutions (`exercises`), graded checks (`grading/`), the instructor's grader (`grader`)
and the outputs kept in committed notebooks (`notebook_outputs`).

Nothing in the simulator, `runtime`, `viz` or `widgets` imports this package.
"""
