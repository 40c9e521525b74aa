"""Chapter 1 (notebooks/01_single_device.ipynb): a real single-device training run and a sweep
over batch sizes. Calibrating a Device on this machine (achieved FLOP/s and bandwidth,
per-operator cost) is `runtime.device_calibration`, which chapter 5 uses too.
"""
