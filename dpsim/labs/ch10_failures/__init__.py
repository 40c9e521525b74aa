"""dpsim/labs/ch10_failures"""
