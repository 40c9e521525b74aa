"""The course as a static website: every chapter with its outputs, built with Sphinx and
myst-nb (`make site`, `python -m dpsim site build`; the Sphinx skeleton is website/)."""
