"""The model against published measurements: cited datasets (`data/`), the fit of the free
constants on half of the points, the error on the other half, and the report
(`python -m dpsim validate`)."""
