# Shared helpers for the .ci scripts. Sourced, not run.

# Runs "$@" as one named stage and prints how long it took.
stage() {
  local name=$1 t0=$SECONDS
  shift
  echo
  echo "== $name"
  "$@"
  echo "-- $name: $((SECONDS - t0)) s"
}

# Installs Debian packages whose commands are missing: need_apt COMMAND PACKAGE [...].
need_apt() {
  local missing=() cmd pkg
  while [ $# -gt 0 ]; do
    cmd=$1 pkg=$2
    shift 2
    command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "${missing[@]}" >/dev/null
}

# True when http://127.0.0.1:PORT/healthz answers 200 (bash's /dev/tcp: no curl needed).
healthz_ok() {
  (
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf 'GET /healthz HTTP/1.1\r\nHost: ci\r\nConnection: close\r\n\r\n' >&3
    # A peer that accepts and never answers must not hang CI.
    read -r -t 5 -u 3 status_line && [[ $status_line == *" 200 "* ]]
  ) 2>/dev/null
}

# Waits until /healthz on PORT answers, for at most SECONDS; fails loudly, and at once if
# the server PID (optional) exits first.
wait_healthz() {
  local port=$1 seconds=$2 pid=${3:-} deadline=$((SECONDS + $2))
  while [ $SECONDS -lt $deadline ]; do
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      echo "the server (pid $pid) exited before /healthz answered"
      return 1
    fi
    healthz_ok "$port" && return 0
    sleep 0.5
  done
  echo "/healthz on port $port did not answer within $seconds s"
  return 1
}

# Sends SIGTERM to PID and expects exit 0 within SECONDS.
stop_expect_0() {
  local pid=$1 seconds=$2 rc=0
  kill -TERM "$pid"
  for _ in $(seq $((seconds * 10))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "pid $pid still running $seconds s after SIGTERM"
    kill -KILL "$pid"
    return 1
  fi
  wait "$pid" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "pid $pid exited $rc after SIGTERM, expected 0"
    return 1
  fi
  echo "SIGTERM: exited 0"
}
