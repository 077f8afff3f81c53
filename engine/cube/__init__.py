"""The cube layer: the zarr store a sweep writes (its structure, regions,
markers, lock, provenance), its verification and repair, its status, the
xarray accessor and the figures. It reads sweeps and studies, never solves."""
