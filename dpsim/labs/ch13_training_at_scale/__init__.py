"""Chapter 13 (notebooks/13_training_at_scale_correctly.ipynb): the data the chapter's runs
train on (a regression set, variable-length token sequences) and how a run's sample ids
compare with an uninterrupted run's (replayed and skipped samples).
"""
