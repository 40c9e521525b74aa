"""dpsim/labs/ch01_single_device"""
