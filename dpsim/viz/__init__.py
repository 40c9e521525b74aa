"""Pure figure builders: a Trace or a result in, a plotly Figure out (one topic per file)."""
