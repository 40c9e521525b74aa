"""dpsim/labs/ch08_myths"""
