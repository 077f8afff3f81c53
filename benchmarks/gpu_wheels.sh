#!/usr/bin/env bash
# Downloads, here (with package access), the wheels that the CUDA machine lacks
# to run rollsweep offline (Python 3.12, x86-64; it has jax, diffrax, equinox,
# optimistix, numpy, scipy, matplotlib, numba, numba-cuda, pytest, xarray).
#   usage: bash benchmarks/gpu_wheels.sh DEST    (e.g. .gpu: ignored by git; carry it)
# PINS: versions seen working together on such a machine (2026-11-22); always installed.
# EXTRAS: small packages rollsweep or dask import that such a machine usually
# has; benchmarks/gpu_install.sh installs one only where its import fails (so
# the machine's own versions are never shadowed). Their pins: this project's venv.
set -euo pipefail
dest=${1:?usage: gpu_wheels.sh DEST}
mkdir -p "$dest/whl" "$dest/extra"
pins="zarr==3.1.6 numcodecs==0.16.5 donfig==0.8.1.post1 google-crc32c==1.7.1
  dask==2026.8.0 distributed==2026.8.0 partd==1.4.2 locket==1.0.0 tblib==3.2.2
  zict==3.0.0 tornado==6.5.2 xarray==2026.9.0 dask-jobqueue==0.9.0 tomli-w==1.2.0"
extras="tqdm==4.70.1 psutil==7.2.2 msgpack==1.2.4 cloudpickle==3.1.3 toolz==1.2.0
  sortedcontainers==2.4.0 click==8.5.1 fsspec==2026.9.0 PyYAML==6.0.4 Jinja2==3.1.6
  MarkupSafe==3.0.4 flatbuffers==25.12.19 packaging==26.4 typing_extensions==4.16.0"
download() {  # download SUBFOLDER SPEC: a CPython 3.12 manylinux wheel, else a pure-Python one
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d "$dest/$1" "$2" || python3 -m pip download -q --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform any -d "$dest/$1" "$2"
}
for p in $pins; do download whl "$p"; done
for p in $extras; do download extra "$p"; done
du -sh "$dest"
