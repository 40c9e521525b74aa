"""Chapter 8 (notebooks/08_myths_lab.ipynb): the real runs and torch-source facts the myths lab
judges on.
"""
