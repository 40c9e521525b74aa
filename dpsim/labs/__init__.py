"""dpsim/labs"""
