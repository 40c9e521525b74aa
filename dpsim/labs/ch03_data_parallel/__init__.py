"""dpsim/labs/ch03_data_parallel"""
