#!/usr/bin/env bash
# Downloads, here (with package access), the wheels that the CUDA machine lacks
# to run rollsweep offline (Python 3.12, x86-64; it has jax, diffrax, equinox,
# optimistix, numpy, scipy, matplotlib, numba, numba-cuda, pytest, xarray).
#   usage: bash benchmarks/gpu_wheels.sh DEST    (e.g. .gpu: ignored by git; carry it)
# PINS: versions seen working together on such a machine (2026-11-22); always installed.
# EXTRAS: small packages rollsweep or dask import that such a machine usually
# has; benchmarks/gpu_install.sh installs one only where the machine lacks it (so
# the machine's own versions are never shadowed). Their pins: this project's venv.
# TESTS: the test extra (pyproject.toml) and what it needs, for the whole suite
# there (gpu_lease.sh's tests part), installed as the extras are: hypothesis,
# pytest-xdist, the notebooks' nbclient, nbformat and ipykernel (their Jupyter and
# IPython packages; not debugpy or jedi, 10 MB that a kernel runs without),
# setuptools (tests/test_wheel.py builds the wheel). Pins: this project's venv.
set -euo pipefail
dest=${1:?usage: gpu_wheels.sh DEST}
mkdir -p "$dest/whl" "$dest/extra"
pins="zarr==3.1.6 numcodecs==0.16.5 donfig==0.8.1.post1 google-crc32c==1.7.1
  dask==2026.8.0 distributed==2026.8.0 partd==1.4.2 locket==1.0.0 tblib==3.2.2
  zict==3.0.0 tornado==6.5.2 xarray==2026.9.0 dask-jobqueue==0.9.0 tomli-w==1.2.0"
extras="tqdm==4.70.1 psutil==7.2.2 msgpack==1.2.4 cloudpickle==3.1.3 toolz==1.2.0
  sortedcontainers==2.4.0 click==8.5.1 fsspec==2026.9.0 PyYAML==6.0.4 Jinja2==3.1.6
  MarkupSafe==3.0.4 flatbuffers==25.12.19 packaging==26.4 typing_extensions==4.16.0"
tests="hypothesis==6.170.17 attrs==26.1.0 pytest-xdist==3.8.0 execnet==2.1.2 setuptools==84.2.1
  nbclient==0.11.0 nbformat==5.11.1 fastjsonschema==2.22.3 jsonschema==4.26.0
  jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
  jupyter_client==8.10.0 jupyter_core==5.9.1 traitlets==5.16.1 pyzmq==27.3.0 platformdirs==4.14.8
  python-dateutil==4.0.0 ipykernel==7.4.0 comm==0.2.3 nest-asyncio2==1.7.4 matplotlib-inline==0.2.2
  ipython==9.18.1 ipython-pygments-lexers==1.1.1 pygments==2.21.0 prompt_toolkit==3.0.53 wcwidth==0.9.4
  pexpect==4.9.0 ptyprocess==0.7.0 stack-data==0.6.3 asttokens==3.0.2 executing==2.3.0 pure-eval==0.2.4"
download() {  # download SUBFOLDER SPEC: a CPython 3.12 manylinux wheel, else a pure-Python one
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d "$dest/$1" "$2" || python3 -m pip download -q --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform any -d "$dest/$1" "$2"
}
for p in $pins; do download whl "$p"; done
for p in $extras $tests; do download extra "$p"; done
du -sh "$dest"
