"""Chapter 2 (notebooks/02_collectives.ipynb): collectives run on ranks; timed all-reduces
fitted to a Link.
"""
