# shellcheck shell=bash disable=SC2034  # the variables set here are used by the scripts
# Helpers shared by the benchmark scripts in this directory.
#
# Source it near the top of a script, after `set -euo pipefail` and after
# setting BENCH_NAME (the prefix of log lines, e.g. BENCH_NAME=hit):
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# Sourcing only defines variables and functions; nothing is started.  It sets
# BENCH_DIR (this directory), ROOT (the repository), OUT_DIR (bench/out),
# CLK_TCK and NGINX_USER.  The scripts keep their own knobs; the helpers read
# KEEP, SKIP_BUILD, HOARD_BIN and NEXT_PORT where noted.

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$BENCH_DIR/.." && pwd)"
OUT_DIR="$BENCH_DIR/out"
CLK_TCK="$(getconf CLK_TCK)"

log() { printf '[%s] %s\n' "$BENCH_NAME" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "$BENCH_NAME" "$*" >&2; exit 1; }

has() { [[ " $1 " == *" $2 "* ]]; } # "word list" word

# ------------------------------------------------------------ checks ----
require_whole() { # VAR [what]: the value of VAR must be a whole number
    case "${!1}" in ''|*[!0-9]*) die "$1 must be ${2:-a whole number}" ;; esac
}
require_positive() { # VAR...: each value must be > 0
    local v
    for v in "$@"; do
        [ "${!v}" -gt 0 ] || die "$v must be > 0"
    done
}

# ensure_tools command:package...: apt-get install the package of each
# missing command (as root, or with sudo).
ensure_tools() {
    local missing=() need
    for need in "$@"; do
        command -v "${need%%:*}" >/dev/null 2>&1 || missing+=("${need#*:}")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    log "installing: ${missing[*]}"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || die "need root (or sudo) to install ${missing[*]}"
        sudo=(sudo)
    fi
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    for need in "$@"; do
        command -v "${need%%:*}" >/dev/null 2>&1 || die "${need%%:*} still missing after apt-get install"
    done
}

# check_cpus VAR1 VAR2 "who": both CPUs must exist, warn when they are the
# same one ("warning: <who> share CPU n").  Sets NCPU.
check_cpus() {
    local a="${!1}" b="${!2}"
    NCPU="$(nproc)"
    if ! { [ "$a" -lt "$NCPU" ] && [ "$b" -lt "$NCPU" ]; }; then
        die "need CPUs $a and $b, machine has $NCPU (set $1/$2)"
    fi
    [ "$a" -ne "$b" ] || log "warning: $3 share CPU $a"
}

raise_nofile() { # as many open files as allowed; sets NOFILE (for nginx)
    ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
    NOFILE="$(ulimit -n)"
    [ "$NOFILE" != unlimited ] || NOFILE=65536
}

# build_hoard: cargo build --release, unless SKIP_BUILD=1 or HOARD_BIN names
# another binary; then HOARD_BIN must be executable.
build_hoard() {
    if [ "${SKIP_BUILD:-0}" != 1 ] && [ "$HOARD_BIN" = "$ROOT/target/release/hoard" ]; then
        log "building hoard (cargo build --release -p hoard)"
        (cd "$ROOT" && cargo build --release -p hoard) || die "cargo build failed"
    fi
    [ -x "$HOARD_BIN" ] || die "hoard binary not found at $HOARD_BIN"
}

# build_h3bench: sets H3BENCH to the bench client (the h3bench example:
# HTTP/1.1, HTTP/2 and HTTP/3 load and idle connections), building it
# unless SKIP_BUILD=1 and it exists.
build_h3bench() {
    H3BENCH="$ROOT/target/release/examples/h3bench"
    if [ "${SKIP_BUILD:-0}" != 1 ] || [ ! -x "$H3BENCH" ]; then
        log "building the client (cargo build --release -p hoard-server --example h3bench)"
        (cd "$ROOT" && cargo build --release -p hoard-server --example h3bench) || die "client build failed"
    fi
}

# localhost_cert: a self-signed P-256 certificate for localhost and
# 127.0.0.1 in $RUN/cert.pem, its key in $RUN/key.pem.
localhost_cert() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$RUN/key.pem" -out "$RUN/cert.pem" -days 2 -subj /CN=localhost \
        -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
        -addext basicConstraints=critical,CA:FALSE 2>/dev/null || die "openssl: localhost certificate"
}

# ------------------------------------------------- work dir, processes ----
PIDS=()      # processes we started, stopped in reverse order on exit
CUR_PERF=""  # perf stat running right now, if any: stopped first, with SIGINT
STATUS=1     # set to 0 at the very end of a successful run

# start_run PREFIX: RUN=bench/out/PREFIX.XXXXXX.  From here on, every process
# in PIDS is stopped on exit (also on error or Ctrl-C), and RUN is removed if
# the run succeeded (STATUS=0) unless KEEP=1.
start_run() {
    mkdir -p "$OUT_DIR"
    RUN="$(mktemp -d "$OUT_DIR/$1.XXXXXX")"
    chmod 755 "$RUN"
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

cleanup() {
    local rc=$? i pid
    trap - EXIT INT TERM
    if [ -n "$CUR_PERF" ]; then kill -INT "$CUR_PERF" 2>/dev/null || true; wait "$CUR_PERF" 2>/dev/null || true; fi
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        pid="${PIDS[i]}"
        kill -0 "$pid" 2>/dev/null || continue
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
        wait "$pid" 2>/dev/null || true
    done
    if [ "$STATUS" -eq 0 ] && [ "$KEEP" != 1 ]; then
        rm -rf "$RUN"
    else
        log "logs and configs kept in $RUN"
    fi
    exit "$rc"
}

spawn() { # logfile command...: start in the background; sets STARTED_PID
    local out="$1"; shift
    "$@" >"$out" 2>&1 &
    STARTED_PID=$!
    PIDS+=("$STARTED_PID")
}

stop_pid() { # pid: stop a process from spawn before the end of the run
    local p rest=()
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || rest+=("$p"); done
    PIDS=("${rest[@]}")
}

# ------------------------------------------------------------- ports ----
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port VAR: set VAR to the next loopback port nobody listens on, counting
# up from NEXT_PORT (which the script sets, usually from BASE_PORT).
free_port() {
    while port_in_use "$NEXT_PORT"; do NEXT_PORT=$((NEXT_PORT + 1)); done
    printf -v "$1" %s "$NEXT_PORT"
    NEXT_PORT=$((NEXT_PORT + 1))
}

wait_port() { # port name pid [log]: wait until it listens, at most 10 s
    local i
    for i in $(seq 100); do
        port_in_use "$1" && return 0
        kill -0 "$3" 2>/dev/null || { [ -z "${4:-}" ] || tail -n 20 "$4" >&2; die "$2 exited during startup (see $RUN)"; }
        sleep 0.1
    done
    die "$2 did not listen on 127.0.0.1:$1 within 10s (see $RUN)"
}

# --------------------------------------------------------------- CPU ----
sys_busy() { # busy ticks summed over all CPUs (excluding idle and iowait)
    awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat
}

# ------------------------------------------------------------- nginx ----
# nginx as root would switch workers to "nobody"; keep the invoking user.
NGINX_USER=""
[ "$(id -u)" -ne 0 ] || NGINX_USER="user $(id -un) $(id -gn);"

nginx_common() { # name: main context of $RUN/name.conf, files in $RUN/name
    # (worker_connections: NGINX_WORKER_CONNECTIONS if set, else 4096)
    local d="$RUN/$1"
    mkdir -p "$d/tmp"
    cat <<EOF
$NGINX_USER
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile $NOFILE;
pid $d/nginx.pid;
error_log $d/error.log warn;
events {
    worker_connections ${NGINX_WORKER_CONNECTIONS:-4096};
    use epoll;
}
EOF
}

nginx_temp_paths() { # name: temp paths for the http block
    local d="$RUN/$1/tmp"
    cat <<EOF
    client_body_temp_path $d/client_body;
    proxy_temp_path $d/proxy;
    fastcgi_temp_path $d/fastcgi;
    uwsgi_temp_path $d/uwsgi;
    scgi_temp_path $d/scgi;
EOF
}

start_nginx() { # name [cpu-prefix...]: check and start $RUN/name.conf; sets STARTED_PID
    local name="$1"; shift
    nginx -t -q -e "$RUN/$name/error.log" -c "$RUN/$name.conf" \
        || die "nginx config $RUN/$name.conf is invalid"
    spawn "$RUN/$name/stdout.log" "$@" nginx -e "$RUN/$name/error.log" -c "$RUN/$name.conf"
}

write_static_origin() { # write $RUN/origin.conf: nginx serving $RUN/www on
    # $ORIGIN_PORT with Cache-Control max-age=3600 (the origin of the TLS benches)
    {
        nginx_common origin
        cat <<EOF
http {
    access_log off;
$(nginx_temp_paths origin)
    server {
        listen 127.0.0.1:$ORIGIN_PORT;
        root $RUN/www;
        location / { add_header Cache-Control "max-age=3600"; }
    }
}
EOF
    } >"$RUN/origin.conf"
}

start_nginx_proxy_cache() { # name port access_log-directive [cpu]: the nginx
    # proxy_cache in front of $ORIGIN_PORT that hit.sh and ops.sh measure;
    # sets NGINX_MASTER and NGINX_WORKER (its one worker process).
    local name="$1" port="$2" alog="$3" cpu="${4:-$PROXY_CPU}" c
    mkdir -p "$RUN/$name/cache"
    {
        nginx_common "$name"
        cat <<EOF
http {
    $alog
    default_type application/octet-stream;
    # No tcp_nopush: with it, a 64 KiB hit served by sendfile from the cache
    # file stalls ~40 ms per response on loopback (TCP_CORK + delayed ACK),
    # which would cut nginx to ~25 req/s per connection.
    sendfile on;
    tcp_nodelay on;
    keepalive_timeout 75s;
    keepalive_requests 10000000;
    open_file_cache max=1024 inactive=60s;
$(nginx_temp_paths "$name")
    proxy_cache_path $RUN/$name/cache levels=1:2 keys_zone=bench:16m
                     max_size=256m inactive=1h use_temp_path=off;
    upstream origin {
        server 127.0.0.1:$ORIGIN_PORT;
        keepalive 32;
    }
    server {
        listen 127.0.0.1:$port backlog=4096;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache bench;
            add_header X-Cache \$upstream_cache_status always;
        }
    }
}
EOF
    } >"$RUN/$name.conf"
    start_nginx "$name" taskset -c "$cpu"
    NGINX_MASTER="$STARTED_PID"
    wait_port "$port" "$name" "$NGINX_MASTER"
    nginx_worker "$NGINX_MASTER" "$name"
}

# nginx_worker MASTER NAME: sets NGINX_WORKER to the worker process of the
# nginx whose master is MASTER (waiting up to 5 s for it to start).
nginx_worker() {
    local master=$1 name=$2 c
    NGINX_WORKER=""
    for _ in $(seq 50); do
        for c in $(pgrep -P "$master" || true); do
            if tr '\0' ' ' <"/proc/$c/cmdline" 2>/dev/null | grep -q 'worker process'; then
                NGINX_WORKER="$c"
            fi
        done
        [ -n "$NGINX_WORKER" ] && break
        sleep 0.1
    done
    [ -n "$NGINX_WORKER" ] || die "could not find the worker process of $name"
}


# --------------------------------------------------------------- wrk ----
# wrk_report_lua file: a wrk script printing one parseable summary line,
# "BENCH requests=.. duration_us=.. p50_us=.. p99_us=.. max_us=.. <errors>".
wrk_report_lua() {
    cat >"$1" <<'EOF'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d p50_us=%d p99_us=%d max_us=%d connect=%d read=%d write=%d status=%d timeout=%d p999_us=%d\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.status, e.timeout, latency:percentile(99.9)))
end
EOF
}

# ---------------------------------------------------------- priority ----
# set_priority: from NICE (0: nothing), sets PRIO, the prefix that runs a
# command at that nice level, and gives this session's autogroup the same
# level (with sched_autogroup_enabled, nice only ranks threads within one
# session: a build in another session would otherwise get an equal share).
set_priority() {
    PRIO=(env)
    [ "${NICE:-0}" != 0 ] || return 0
    PRIO=(nice -n "$NICE")
    [ ! -w /proc/self/autogroup ] || echo "$NICE" >/proc/self/autogroup 2>/dev/null || true
}

# warm_cpu CPU: with WARM_CPU=1, a busy loop at SCHED_IDLE priority on CPU
# (it runs only when nothing else wants the CPU), so that the CPU never goes
# idle: on a virtual machine an idle CPU halts and waking it again takes a
# trip through the host.
warm_cpu() {
    [ "${WARM_CPU:-0}" = 1 ] || return 0
    log "warm CPU: a SCHED_IDLE busy loop on CPU $1"
    spawn "$RUN/warm-cpu$1.log" chrt -i 0 taskset -c "$1" sh -c 'while :; do :; done'
}

# ------------------------------------------------------------ report ----
report_start() { # name: sets STAMP, REPORT (bench/out/name-STAMP.md), cpu_model, git_rev
    STAMP="$(date +%Y%m%d-%H%M%S)"
    REPORT="$OUT_DIR/$1-$STAMP.md"
    cpu_model="$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    git_rev="$(cd "$ROOT" && git describe --always --dirty 2>/dev/null || echo none)"
}

machine_line() { echo "- machine: $NCPU CPUs, ${cpu_model:-unknown CPU}, kernel $(uname -r)"; }

hoard_built() { date -r "$HOARD_BIN" +"%Y-%m-%d %H:%M:%S"; }

report_done() { # print the report, mark the run successful
    echo
    cat "$REPORT"
    echo
    log "report written to ${REPORT#"$ROOT"/}"
    STATUS=0
}

# start_micro_proxies: the proxies of PROXIES (nginx, varnish, hoard) as
# fill.sh's and tail.sh's microcaching runs configure them, in front of the
# origin at $ORIGIN ($ORIGIN_PORT): a 1 s TTL for the micro app, ${SWR}s of
# stale serving with a background refresh, upstream keep-alive; pinned to
# PROXY_CPU under PRIO. Sets PORT[proxy] (declare -A PORT first) and
# HOARD_ARGS; HOARD_LOG, when set, is hoard's log filter.
start_micro_proxies() {
    local d
    if has "$PROXIES" nginx; then
        free_port NGINX_PORT
        d="$RUN/nginx"
        mkdir -p "$d/cache"
        {
            nginx_common nginx
            cat <<EOF
http {
    access_log off;
    tcp_nodelay on;
    keepalive_timeout 75s;
    keepalive_requests 10000000;
$(nginx_temp_paths nginx)
    proxy_cache_path $d/cache levels=1:2 keys_zone=micro:16m
                     max_size=256m inactive=1h use_temp_path=off;
    upstream origin {
        server $ORIGIN;
        keepalive 32;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT backlog=4096;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache micro;
            # One request fills a key, the others wait (lock_timeout 5s default).
            proxy_cache_lock on;
            # Serve stale while one request refreshes, in a background subrequest.
            proxy_cache_use_stale updating;
            proxy_cache_background_update on;
            # TTL for responses without Cache-Control/Expires (the micro app).
            proxy_cache_valid 200 1s;
            add_header X-Cache \$upstream_cache_status always;
        }
    }
}
EOF
        } >"$RUN/nginx.conf"
        log "nginx proxy_cache on 127.0.0.1:$NGINX_PORT (CPU $PROXY_CPU)"
        start_nginx nginx "${PRIO[@]}" taskset -c "$PROXY_CPU"
        wait_port "$NGINX_PORT" nginx "$STARTED_PID" "$d/error.log"
        PORT[nginx]="$NGINX_PORT"
    fi

    if has "$PROXIES" varnish; then
        free_port VARNISH_PORT
        d="$RUN/varnish"
        mkdir -p "$d"
        cat >"$RUN/varnish.vcl" <<EOF
vcl 4.1;
backend origin {
    .host = "127.0.0.1";
    .port = "$ORIGIN_PORT";
    .first_byte_timeout = 60s;
}
sub vcl_backend_response {
    # The micro app sends no Cache-Control: 1 s TTL, then grace.
    if (bereq.url ~ "^/micro/") {
        set beresp.ttl = 1s;
    }
    set beresp.grace = ${SWR}s;
}
sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
EOF
        log "varnish on 127.0.0.1:$VARNISH_PORT (CPU $PROXY_CPU)"
        spawn "$d/stdout.log" "${PRIO[@]}" taskset -c "$PROXY_CPU" varnishd -F -n "$d/work" -a "127.0.0.1:$VARNISH_PORT" \
            -f "$RUN/varnish.vcl" -s malloc,256m
        wait_port "$VARNISH_PORT" varnish "$STARTED_PID" "$d/stdout.log"
        PORT[varnish]="$VARNISH_PORT"
    fi

    if has "$PROXIES" hoard; then
        free_port HOARD_PORT
        mkdir -p "$RUN/hoard"
        HOARD_ARGS=(--default-ttl 1s --stale-while-revalidate "${SWR}s" --threads "$HOARD_THREADS" --cache-size 256MiB)
        log "hoard on 127.0.0.1:$HOARD_PORT (CPU $PROXY_CPU, ${HOARD_ARGS[*]})"
        spawn "$RUN/hoard/stdout.log" env ${HOARD_LOG:+HOARD_LOG="$HOARD_LOG"} "${PRIO[@]}" taskset -c "$PROXY_CPU" "$HOARD_BIN" --upstream "http://$ORIGIN" --listen "127.0.0.1:$HOARD_PORT" \
            "${HOARD_ARGS[@]}"
        wait_port "$HOARD_PORT" hoard "$STARTED_PID" "$RUN/hoard/stdout.log"
        PORT[hoard]="$HOARD_PORT"
    fi
}
