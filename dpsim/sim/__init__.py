"""dpsim/sim"""
