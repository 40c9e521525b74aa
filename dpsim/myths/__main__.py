"""python -m dpsim.myths: write docs/claims.md from a fresh run of the lab."""

from dpsim.myths.judge import main

main()
