#!/usr/bin/env bash
# Source on the CUDA machine from the project's root, after
# `bash benchmarks/gpu_wheels.sh .gpu` here and carrying .gpu there:
#   source benchmarks/gpu_install.sh [.gpu]
# Installs the wheels (no dependencies, no network) into /tmp/site, puts a
# `rollsweep` command on PATH and sets the environment of every part.
# The project itself is not copied: it runs from this working tree
# (PYTHONPATH), and only its metadata is written to /tmp/site, so that
# importlib.metadata finds the studies' entry points (no setuptools needed,
# which that machine's venv may lack).
_wheels=$(cd "${1:-.gpu}" && pwd) || return 1
_site=${GPU_SITE:-/tmp/site}  # GPU_SITE: another folder, only to try this script elsewhere
if [ ! -f "$_site/.ok" ]; then
  export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1  # root there: no warning per wheel
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$_site" "$_wheels"/whl/*.whl || return 1
  # An extra only where the machine lacks it (no distribution of its name, nor a
  # module): never shadow its own versions (PYTHONPATH comes first in sys.path).
  mapfile -t _missing < <(python3 - "$_wheels"/extra/*.whl <<'PY'
import importlib.metadata, importlib.util, pathlib, sys
for wheel in sys.argv[1:]:
    name = pathlib.Path(wheel).name.split("-")[0]  # the distribution's, normalised
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        if importlib.util.find_spec(name.lower()) is None:
            print(wheel)
PY
  )
  if [ "${#_missing[@]}" -gt 0 ]; then
    echo "gpu_install: installing what this machine lacks: $(for _whl in "${_missing[@]}"; do
      basename "$_whl" | cut -d- -f1; done | tr '\n' ' ')"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target "$_site-extra" "${_missing[@]}" || return 1
  fi
  python3 - "$_site" <<'PY' || return 1
import pathlib, sys, tomllib
project = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
info = pathlib.Path(sys.argv[1]) / f"{project['name']}-{project['version']}.dist-info"
info.mkdir(parents=True, exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
groups = {"console_scripts": project.get("scripts", {}), **project.get("entry-points", {})}
(info / "entry_points.txt").write_text("".join(
    f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) + "\n" for group, entries in groups.items()))
PY
  mkdir -p "$_site/bin"
  # Never beside sys.executable: a wrapper on PATH that runs this tree's CLI.
  printf '#!/usr/bin/env bash\nexec python3 -c "import sys; from engine.cli.commands import entry; sys.exit(entry())" "$@"\n' \
    > "$_site/bin/rollsweep"
  chmod +x "$_site/bin/rollsweep"
  # Byte code written now, as pip does for an installed package: else every process
  # compiled ~350 modules from source there (0.6 s of a warm run, one H200, 2026-11-27;
  # the wheels are installed with --no-compile, and no __pycache__ was written beside
  # the sources in later processes either).
  python3 -m compileall -q -j 0 "$_site" "$PWD/engine" "$PWD/studies" "$PWD/benchmarks" >/dev/null 2>&1
  [ -d "$_site-extra" ] && python3 -m compileall -q -j 0 "$_site-extra" >/dev/null 2>&1
  # The machine's own packages (its image's venv, the system's library) carry no byte code
  # either, and PYTHONDONTWRITEBYTECODE is set there: a warm 1M-point run compiled 169 of
  # their modules from source (numpy, fsspec, filelock, asyncio, ...: 0.56 s by cProfile,
  # one H100, 2026-11-27). A user's installation has it (pip and the system's packages
  # write it): written here for every module the parts import.
  # (After .ok: the wheels are in place whether or not this finishes in its time.)
  touch "$_site/.ok"
  PYTHONPATH=$PWD:$_site:$_site-extra timeout 30 python3 benchmarks/gpu_byte_code.py || true
fi
# The working tree first (its code, not a copy), the pinned wheels, then the
# extras (that folder holds only what the machine lacked).
export PYTHONPATH=$PWD:$_site:$_site-extra PATH=$_site/bin:$PATH PYTHONUNBUFFERED=1
# JAX takes GPU memory as it needs it: the parts' processes (and pytest-xdist workers) share one GPU.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
unset _wheels _site _whl _missing
