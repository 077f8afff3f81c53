# Shared by start-local-slurm.sh and stop-local-slurm.sh (sourced, not run).

# pid_of PIDFILE EXE_SUBSTRING -> prints the pid if the pid file names a live process
# whose executable matches (guards against stale pid files / recycled pids).
pid_of() {
  local f=$1 name=$2 pid exe
  [ -s "$f" ] || return 1
  pid=$(tr -dc '0-9' <"$f" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  case "$exe" in */"$name"*) echo "$pid" ;; *) return 1 ;; esac
}
