"""dpsim/labs/ch05_ddp"""
