"""What a chapter runs for real and is not itself the lesson, one package per chapter.

A lab function's docstring names the notebook that calls it. Labs use `dpsim.runtime` (the
launcher, recorders, models) and the simulator; nothing in `runtime` or `sim` imports a lab,
and no lab imports another chapter's lab: what two chapters share lives in `runtime`.
"""
