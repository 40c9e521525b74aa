"""Chapter 1 (notebooks/01_single_device.ipynb): one device measured; achieved FLOP/s and
bandwidth; per-operator cost.
"""
