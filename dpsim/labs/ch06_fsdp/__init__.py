"""dpsim/labs/ch06_fsdp"""
