"""dpsim/labs/ch09_precision"""
