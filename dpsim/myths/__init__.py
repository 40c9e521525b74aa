"""The myths lab: popular claims about DP, DDP and FSDP (`claims`), the numbers they are
judged on (`evidence`), and the verdicts (`judge`). `python -m dpsim.myths` writes
docs/claims.md.
"""
