# Sourced by gpu_lease.sh and gpu_profile.sh: the rolling-ball sweep they run,
# N spin ratios in 0.2..3.0 at the tolerances of bench_gpu.py, no shard_size or
# batch_size (the engine's own), its cube at OUT.
#   rolling_toml N OUT >FILE
rolling_toml() {
    cat <<EOF2
study = "pingpong"
[axes]
spin_ratio = { linspace = [0.2, 3.0, $1] }
[solver]
rtol = 1e-10
atol = 1e-12
[run]
out = "$2"
EOF2
}
