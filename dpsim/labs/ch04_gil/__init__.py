"""Chapter 4 (notebooks/04_gil.ipynb): threads against processes, who holds the GIL.
"""
