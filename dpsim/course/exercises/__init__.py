"""dpsim/course/exercises"""
