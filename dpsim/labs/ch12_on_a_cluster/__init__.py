"""Chapter 12 (notebooks/12_on_a_cluster.ipynb): training scripts as Slurm jobs on the kit's
one-machine cluster (`dpsim.runtime.slurm`), and what the chapter says where Slurm is missing.
"""
