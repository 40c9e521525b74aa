"""dpsim/sim/cost"""
