"""dpsim/labs/ch04_gil"""
