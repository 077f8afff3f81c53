"""The fused solver: one point's whole hybrid solve per lane or GPU thread.

- fused.py: the BatchSolver, which checks that a study can be fused and
  wraps the kernel call;
- system.py: the hybrid solve of a block of lanes, written elementwise;
- jaxpr.py, columns.py: the study's traced functions replayed on lane
  vectors, and the kernel's inputs and outputs as columns;
- backends.py: which backend runs the kernel body: pallas.py (Pallas on
  Triton; interpret mode on CPU), cuda.py (the body generated as CUDA C by
  c_source.py, compiled by NVRTC) or host.py (the same C for the host).
"""
