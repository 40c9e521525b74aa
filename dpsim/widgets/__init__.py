"""ipywidgets dashboards: sliders wired to a simulation and a figure builder."""
