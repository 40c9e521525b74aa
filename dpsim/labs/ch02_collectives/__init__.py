"""dpsim/labs/ch02_collectives"""
