#!/usr/bin/env bash
# Disk-cache benchmark: hoard's disk zone vs. nginx proxy_cache (and Varnish
# file storage), three measurements in one run:
#
#   write    unique 1 MiB URLs, every request a miss stored to disk: MB/s and
#            proxy CPU per MB (hoard also with one zone over two directories)
#   hit      64 KiB and 1 MiB hits read from the disk cache (hoard with its
#            memory tier off, nginx with sendfile, Varnish -s file)
#   restart  many small objects on disk, proxy restarted: time to the first
#            hit and until the loader has indexed everything
#   durability  (hoard only, not in the default TESTS) the write path of
#            unique 1 MiB misses with [cache] durability = "process" (no
#            fsync) and "power" (file and directory fsynced before publish)
#
# Every proxy is pinned to one CPU, wrk and the origin (an nginx serving
# generated files with Cache-Control: max-age=3600) to another.  See
# bench/README.md for how to read the output.
#
# Environment knobs (all optional):
#   DURATION=10          seconds per wrk run (DURATION=3: quick run)
#   PROXIES="hoard nginx varnish"   proxies to run (hoard and nginx give the ratios)
#   TESTS="write hit restart"       which measurements to run (also: durability)
#   DURABILITY_ORDER="process power"  order of the durability rows
#   WRITE_CONNS=16       wrk connections for the write path
#   HIT_CONNS=64         wrk connections for disk hits
#   HIT_OBJECTS="64k 1m" objects for disk hits
#   DISK_MB=2048         size of each disk cache (hoard --disk-size, nginx
#                        max_size, Varnish -s file size), MiB
#   RESTART_OBJECTS=100000  1 KiB objects written before the restart
#                        (default 20000 when DURATION < 10)
#   RESTART_CONNS=16     wrk connections used to write them
#   NGINX_LOADER=1       wait for nginx's cache loader after its restart (it
#                        starts 60 s after nginx); 0 skips that wait
#   PROXY_CPU=0 WRK_CPU=1   CPUs for the proxy under test / for wrk and the origin
#   HOARD_BIN=path       use this binary instead of building target/release/hoard
#   SKIP_BUILD=1         do not run cargo build
#   KEEP=1               keep bench/out/disk.* (configs, logs, raw wrk output)
#   BASE_PORT=18280      first loopback port to try
set -euo pipefail

BENCH_NAME=disk
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION="${DURATION:-10}"
PROXIES="${PROXIES:-hoard nginx varnish}"
TESTS="${TESTS:-write hit restart}"
WRITE_CONNS="${WRITE_CONNS:-16}"
HIT_CONNS="${HIT_CONNS:-64}"
HIT_OBJECTS="${HIT_OBJECTS:-64k 1m}"
DISK_MB="${DISK_MB:-2048}"
if [ "$DURATION" -ge 10 ] 2>/dev/null; then
    RESTART_OBJECTS="${RESTART_OBJECTS:-100000}"
else
    RESTART_OBJECTS="${RESTART_OBJECTS:-20000}"
fi
RESTART_CONNS="${RESTART_CONNS:-16}"
NGINX_LOADER="${NGINX_LOADER:-1}"
PROXY_CPU="${PROXY_CPU:-0}"
WRK_CPU="${WRK_CPU:-1}"
KEEP="${KEEP:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
NEXT_PORT="${BASE_PORT:-18280}"
# Size of the 1 KiB objects of the restart test.
RESTART_OBJECT=1k

for v in DURATION WRITE_CONNS HIT_CONNS DISK_MB RESTART_OBJECTS RESTART_CONNS; do
    require_whole "$v"
    require_positive "$v"
done
for p in $PROXIES; do
    case "$p" in hoard|nginx|varnish) ;; *) die "unknown proxy '$p' in PROXIES" ;; esac
done
! has "$TESTS" durability || has "$PROXIES" hoard || die "TESTS=durability needs hoard in PROXIES"
DURABILITY_ORDER="${DURABILITY_ORDER:-process power}"
for d in $DURABILITY_ORDER; do
    case "$d" in process|power) ;; *) die "unknown durability '$d' in DURABILITY_ORDER" ;; esac
done
for t in $TESTS; do
    case "$t" in write|hit|restart|durability) ;; *) die "unknown test '$t' in TESTS" ;; esac
done
declare -A OBJ_SIZE=([1k]=1024 [64k]=65536 [1m]=1048576)
for o in $HIT_OBJECTS; do
    [ -n "${OBJ_SIZE[$o]:-}" ] || die "unknown object '$o' in HIT_OBJECTS (known: ${!OBJ_SIZE[*]})"
done

# ---------------------------------------------------------------- tools ----
wanted=(nginx:nginx-light wrk:wrk curl:curl taskset:util-linux)
! has "$PROXIES" varnish || wanted+=(varnishd:varnish varnishstat:varnish)
ensure_tools "${wanted[@]}"

check_cpus PROXY_CPU WRK_CPU "proxy and wrk"
raise_nofile

# ---------------------------------------------------------------- build ----
! has "$PROXIES" hoard || build_hoard

# ------------------------------------------------------------- work dir ----
start_run disk
NOTES=()
TAG="$(date +%s)"

# Is anything else running?  Throughput numbers need a quiet machine.
b0="$(sys_busy)"; sleep 1; b1="$(sys_busy)"
busy="$(awk -v a="$b0" -v b="$b1" -v hz="$CLK_TCK" 'BEGIN { printf "%.0f", (b - a) / hz * 100 }')"
if [ "$busy" -ge 10 ]; then
    log "warning: the machine is busy ($busy% of a core used by other processes)"
    NOTES+=("before the run, other processes used $busy% of a core: expect noise, rerun on a quiet machine")
fi

# --------------------------------------------------------------- origin ----
# /1k/<anything>, /64k/<anything>, /1m/<anything>: the same file of that size
# for every URL, so that each new path is a new cache key.
DOCROOT="$RUN/www"
mkdir -p "$DOCROOT"
for o in "${!OBJ_SIZE[@]}"; do
    head -c "${OBJ_SIZE[$o]}" /dev/urandom >"$DOCROOT/$o.bin"
done
free_port ORIGIN_PORT
{
    nginx_common origin
    cat <<EOF
http {
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 10000000;
$(nginx_temp_paths origin)
    server {
        listen 127.0.0.1:$ORIGIN_PORT backlog=4096;
        root $DOCROOT;
        location ~ ^/(1k|64k|1m)/ {
            expires 1h;
            try_files /\$1.bin =404;
        }
    }
}
EOF
} >"$RUN/origin.conf"
log "origin nginx on 127.0.0.1:$ORIGIN_PORT (CPU $WRK_CPU)"
start_nginx origin taskset -c "$WRK_CPU"
ORIGIN_PID="$STARTED_PID"
wait_port "$ORIGIN_PORT" origin "$ORIGIN_PID" "$RUN/origin/error.log"
hdr="$(curl -sS -o /dev/null -D - "http://127.0.0.1:$ORIGIN_PORT/1m/check")" || die "origin does not answer"
grep -qi '^cache-control: *max-age=3600' <<<"$hdr" || die "origin sends no Cache-Control: max-age=3600"
grep -qi '^content-length: *1048576' <<<"$hdr" || die "origin /1m/ is not 1 MiB"

# ------------------------------------------------------------- helpers ----
declare -A PORT PID

nginx_proxy_conf() { # name port cache-dir: an nginx proxy_cache instance
    local name="$1" port="$2" cache="$3"
    mkdir -p "$cache"
    nginx_common "$name"
    cat <<EOF
http {
    access_log off;
    default_type application/octet-stream;
    # sendfile for hits from the cache file (NGINX_SENDFILE=off for the
    # variant that reads and writes); no tcp_nopush (it stalls 64 KiB
    # sendfile responses ~40 ms on loopback, see hit.sh).
    sendfile ${NGINX_SENDFILE:-on};
    tcp_nodelay on;
    keepalive_timeout 75s;
    keepalive_requests 10000000;
    open_file_cache max=1024 inactive=60s;
$(nginx_temp_paths "$name")
    proxy_cache_path $cache levels=1:2 keys_zone=$name:64m
                     max_size=${DISK_MB}m inactive=1h use_temp_path=off;
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
            proxy_cache $name;
            add_header X-Cache \$upstream_cache_status always;
        }
    }
}
EOF
}

start_nginx_proxy() { # name port cache-dir [loglevel]: sets PORT[name], PID[name]
    local name="$1" port="$2" cache="$3" level="${4:-warn}"
    nginx_proxy_conf "$name" "$port" "$cache" | sed "s|error.log warn;|error.log $level;|" >"$RUN/$name.conf"
    log "$name: nginx proxy_cache on 127.0.0.1:$port (CPU $PROXY_CPU)"
    start_nginx "$name" taskset -c "$PROXY_CPU"
    wait_port "$port" "$name" "$STARTED_PID" "$RUN/$name/error.log"
    PORT[$name]="$port"
    PID[$name]="$STARTED_PID"
}

start_hoard() { # name port args...: sets PORT[name], PID[name]; NOWAIT=1: do not wait for the port
    local name="$1" port="$2"; shift 2
    mkdir -p "$RUN/$name"
    [ "${NOWAIT:-0}" = 1 ] || log "$name: hoard on 127.0.0.1:$port (CPU $PROXY_CPU)"
    spawn "$RUN/$name/stdout.log" env HOARD_LOG=info taskset -c "$PROXY_CPU" "$HOARD_BIN" "$@"
    [ "${NOWAIT:-0}" = 1 ] || wait_port "$port" "$name" "$STARTED_PID" "$RUN/$name/stdout.log"
    PORT[$name]="$port"
    PID[$name]="$STARTED_PID"
}

hoard_cli() { # name port cache-dir: hoard from the command line, memory tier off
    start_hoard "$1" "$2" --upstream "http://127.0.0.1:$ORIGIN_PORT" --listen "127.0.0.1:$2" \
        --cache-dir "$3" --disk-size "${DISK_MB}MiB" --cache-size 0 --max-object-size 8MiB --threads 1
}

is_hit() { # headers (any proxy)
    local l="${1,,}"
    case "$l" in *"cache-status: hoard; hit"*|*"x-cache: hit"*) return 0 ;; esac
    return 1
}

warm() { # name path size: GET twice, body must match, second must be a hit
    local name="$1" path="$2" o="$3" url n hdr
    url="http://127.0.0.1:${PORT[$name]}$path"
    for n in 1 2; do
        hdr="$(curl -sS --fail -o "$RUN/warm.body" -D - "$url")" || die "$name: GET $url failed"
        cmp -s "$RUN/warm.body" "$DOCROOT/$o.bin" || die "$name: body of $url differs from the origin's file"
    done
    if ! is_hit "$hdr"; then
        printf '%s\n' "$hdr" >&2
        die "$name: second GET $url was not a cache hit (headers above)"
    fi
}

proc_tree() { # pid: the pid and all its descendants
    local c
    echo "$1"
    for c in $(pgrep -P "$1" || true); do proc_tree "$c"; done
}

cpu_ticks() { # pid: utime+stime of the process and its descendants, in clock ticks
    local t=0 p s
    for p in $(proc_tree "$1"); do
        s="$(cat "/proc/$p/stat" 2>/dev/null)" || continue
        s="${s##*) }"
        t=$((t + $(awk '{ print $12 + $13 }' <<<"$s")))
    done
    echo "$t"
}

now_us() { echo "${EPOCHREALTIME/./}"; }

field() { # "line" key -> value
    local v
    v="$(tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | head -n1)"
    printf '%s' "${v:-}"
}

ratio() { # a b -> a/b
    awk -v a="$1" -v b="$2" 'BEGIN { if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b == 0) print "n/a"; else if (a / b < 0.1) printf "%.3fx", a / b; else printf "%.2fx", a / b }'
}

ms() { # microseconds -> "1.234 ms"
    case "$1" in ''|n/a) echo "n/a" ;; *) awk -v u="$1" 'BEGIN { printf "%.3f ms", u / 1000 }' ;; esac
}

secs() { # microseconds -> "12 ms" or "1.23 s"
    case "$1" in ''|n/a) echo "n/a" ;; *) awk -v u="$1" 'BEGIN { if (u < 1e6) printf "%.0f ms", u / 1000; else printf "%.2f s", u / 1e6 }' ;; esac
}

wrk_report_lua "$RUN/report.lua"

# measure key pid url conns lua: one wrk run pinned to WRK_CPU; sets R_*[key]
declare -A R_REQ R_DUR R_RPS R_P50 R_P99 R_PT R_PCPU R_WCPU R_OTH R_STORED R_MBS R_CPM R_CPR
measure() {
    local k="$1" pid="$2" url="$3" conns="$4" lua="$5"
    local f="$RUN/$k" t0 t1 o0 o1 s0 s1 line req dur errs v real user sys
    sync
    t0="$(cpu_ticks "$pid")"; o0="$(cpu_ticks "$ORIGIN_PID")"; s0="$(sys_busy)"
    TIMEFORMAT='%R %U %S'
    { time taskset -c "$WRK_CPU" wrk -t1 -c"$conns" -d"${DURATION}s" --latency --timeout 10s \
          -s "$lua" "$url" >"$f.wrk" 2>&1; } 2>"$f.time" \
        || { cat "$f.wrk" >&2; die "wrk failed for $url"; }
    t1="$(cpu_ticks "$pid")"; o1="$(cpu_ticks "$ORIGIN_PID")"; s1="$(sys_busy)"
    line="$(grep '^BENCH ' "$f.wrk" || true)"
    [ -n "$line" ] || { cat "$f.wrk" >&2; die "could not parse wrk output for $url"; }
    line=" ${line#BENCH }"
    req="$(field "$line" requests)"; dur="$(field "$line" duration_us)"
    [ "$req" -gt 0 ] || die "$k: no requests completed"
    R_REQ[$k]="$req"; R_DUR[$k]="$dur"
    R_RPS[$k]="$(awk -v r="$req" -v d="$dur" 'BEGIN { printf "%.0f", r / (d / 1e6) }')"
    R_P50[$k]="$(field "$line" p50_us)"; R_P99[$k]="$(field "$line" p99_us)"
    errs=""
    for v in connect read write status timeout; do
        [ "$(field "$line" "$v")" -eq 0 ] || errs+=" $v=$(field "$line" "$v")"
    done
    [ -z "$errs" ] || NOTES+=("$k: wrk reported errors:$errs")
    read -r real user sys <"$f.time"
    R_PT[$k]="$(awk -v a="$t0" -v b="$t1" -v hz="$CLK_TCK" 'BEGIN { printf "%.3f", (b - a) / hz }')"
    R_PCPU[$k]="$(awk -v a="$t0" -v b="$t1" -v hz="$CLK_TCK" -v w="$real" 'BEGIN { printf "%.0f", (b - a) / hz / w * 100 }')"
    R_WCPU[$k]="$(awk -v u="$user" -v s="$sys" -v a="$o0" -v b="$o1" -v hz="$CLK_TCK" -v w="$real" \
        'BEGIN { printf "%.0f", (u + s + (b - a) / hz) / w * 100 }')"
    R_OTH[$k]="$(awk -v a="$s0" -v b="$s1" -v p0="$t0" -v p1="$t1" -v o0="$o0" -v o1="$o1" -v hz="$CLK_TCK" \
        -v u="$user" -v s="$sys" -v w="$real" \
        'BEGIN { o = ((b - a) - (p1 - p0) - (o1 - o0)) / hz - (u + s); if (o < 0) o = 0; printf "%.0f", o / w * 100 }')"
    if [ "${R_OTH[$k]}" -ge 10 ]; then
        NOTES+=("$k: other processes used ${R_OTH[$k]}% of a core during the run (kernel writeback counts here too); on a busy machine expect noise")
    fi
    if [ "${R_WCPU[$k]}" -ge 95 ] && [ "${R_PCPU[$k]}" -lt 90 ]; then
        NOTES+=("$k: wrk and the origin used ${R_WCPU[$k]}% of their core but the proxy only ${R_PCPU[$k]}%: the client side, not the proxy, was the limit")
    fi
}

stored_mib() { # name: MiB held by its disk cache
    local name="$1" b
    case "$name" in
        varnish)
            b="$(varnishstat -n "$RUN/varnish/work" -1 -f 'SMF.*.g_bytes' 2>/dev/null | awk '{ s += $2 } END { print s + 0 }')" ;;
        *)
            b="$(du -sb "${CACHE[$name]}" 2>/dev/null | awk '{ print $1 }')" ;;
    esac
    awk -v b="${b:-0}" 'BEGIN { printf "%.0f", b / 1048576 }'
}

# ---------------------------------------------------------------- proxies ----
declare -A CACHE
if has "$TESTS" write || has "$TESTS" hit; then
    if has "$PROXIES" hoard; then
        free_port p
        CACHE[hoard]="$RUN/hoard/cache"
        mkdir -p "${CACHE[hoard]}"
        hoard_cli hoard "$p" "${CACHE[hoard]}"
    fi
    if has "$PROXIES" nginx; then
        free_port p
        CACHE[nginx]="$RUN/nginx/cache"
        start_nginx_proxy nginx "$p" "${CACHE[nginx]}"
    fi
    if has "$PROXIES" varnish; then
        free_port p
        d="$RUN/varnish"
        mkdir -p "$d"
        cat >"$RUN/varnish.vcl" <<EOF
vcl 4.1;
backend origin {
    .host = "127.0.0.1";
    .port = "$ORIGIN_PORT";
}
sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
EOF
        log "varnish: -s file on 127.0.0.1:$p (CPU $PROXY_CPU)"
        spawn "$d/stdout.log" taskset -c "$PROXY_CPU" varnishd -F -n "$d/work" -a "127.0.0.1:$p" \
            -f "$RUN/varnish.vcl" -s "file,$d/storage.bin,${DISK_MB}M"
        wait_port "$p" varnish "$STARTED_PID" "$d/stdout.log"
        PORT[varnish]="$p"; PID[varnish]="$STARTED_PID"
    fi
    for p in $PROXIES; do
        warm "$p" "/1k/sanity-$TAG" 1k
        log "$p: answers and caches"
    done
fi

# ------------------------------------------------------- 1. write path ----
WRITE_ROWS=""
if has "$TESTS" write; then
    WRITE_ROWS="$PROXIES"
    if has "$PROXIES" hoard; then
        WRITE_ROWS="hoard hoard2 ${PROXIES//hoard/}"
    fi
    # WRITE_ORDER: the order of the rows, e.g. "varnish hoard2 hoard nginx"
    # (each proxy's run pays for the writeback of the runs before it).
    WRITE_ROWS="${WRITE_ORDER:-$WRITE_ROWS}"
    for p in $WRITE_ROWS; do
        if [ "$p" = hoard2 ]; then
            # One zone over two directories on the same disk, from a config file.
            free_port hp
            mkdir -p "$RUN/hoard2/a" "$RUN/hoard2/b"
            CACHE[hoard2]="$RUN/hoard2"
            cat >"$RUN/hoard2.toml" <<EOF
[cache]
memory_size = 0
max_object_size = "8MiB"
[[cache.zone]]
name = "disk"
dirs = ["$RUN/hoard2/a", "$RUN/hoard2/b"]
max_size = "${DISK_MB}MiB"
[upstream.o]
servers = ["http://127.0.0.1:$ORIGIN_PORT"]
[[listener]]
address = "127.0.0.1:$hp"
[server]
threads = 1
EOF
            "$HOARD_BIN" check --config "$RUN/hoard2.toml" >/dev/null || die "hoard check failed for $RUN/hoard2.toml"
            start_hoard hoard2 "$hp" run --config "$RUN/hoard2.toml"
            warm hoard2 "/1k/sanity-$TAG" 1k
        fi
        cat >"$RUN/write-$p.lua" <<EOF
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/1m/w-$p-$TAG-" .. n)
end
EOF
        cat "$RUN/report.lua" >>"$RUN/write-$p.lua"
        # Start every run with no dirty pages left by the previous one and
        # an empty page cache, so that no proxy pays for another's writeback
        # or for reclaiming the pages another one filled.
        sync
        if [ -w /proc/sys/vm/drop_caches ]; then
            echo 3 >/proc/sys/vm/drop_caches
        else
            NOTES+=("write-$p: could not drop the page cache before the run (not root): rows that run later pay for reclaiming what earlier ones cached")
        fi
        log "write: $p, unique 1 MiB URLs, wrk -t1 -c$WRITE_CONNS -d${DURATION}s"
        measure "write-$p" "${PID[$p]}" "http://127.0.0.1:${PORT[$p]}/" "$WRITE_CONNS" "$RUN/write-$p.lua"
        R_STORED[$p]="$(stored_mib "$p")"
        if [ "$p" = hoard2 ]; then
            R_STORED[$p]="$(du -sb "$RUN/hoard2/a" | awk '{ printf "%.0f", $1 / 1048576 }')+$(du -sb "$RUN/hoard2/b" | awk '{ printf "%.0f", $1 / 1048576 }')"
            stop_pid "${PID[hoard2]}"
        fi
    done
fi

# --------------------------------------------------------- 2. disk hits ----
# nginx's hits also with sendfile off: on loopback it can beat sendfile on,
# and hoard is compared with the better of the two.
HIT_PROXIES="$PROXIES"
if has "$TESTS" hit && has "$PROXIES" nginx; then
    free_port p
    CACHE[nginx-nosf]="$RUN/nginx-nosf/cache"
    NGINX_SENDFILE=off start_nginx_proxy nginx-nosf "$p" "${CACHE[nginx-nosf]}"
    HIT_PROXIES="$PROXIES nginx-nosf"
fi
if has "$TESTS" hit; then
    for o in $HIT_OBJECTS; do
        for p in $HIT_PROXIES; do
            warm "$p" "/$o/hot-$TAG" "$o"
            log "hit: $p /$o/ warm, second request was a hit"
        done
    done
    for o in $HIT_OBJECTS; do
        for p in $HIT_PROXIES; do
            log "hit: $p /$o/, wrk -t1 -c$HIT_CONNS -d${DURATION}s"
            measure "hit-$p-$o" "${PID[$p]}" "http://127.0.0.1:${PORT[$p]}/$o/hot-$TAG" "$HIT_CONNS" "$RUN/report.lua"
        done
    done
fi

# The main instances are not needed any more: stop them, so that the restart
# test runs on a quiet CPU.
for p in hoard nginx nginx-nosf varnish; do
    [ -z "${PID[$p]:-}" ] || stop_pid "${PID[$p]}"
done

# ------------------------------------------------------ 3. warm restart ----
declare -A X_FILL X_FILES X_OK X_HIT X_LDONE X_LTOOK X_LSTART X_LOBJ X_SAMPLE
if has "$TESTS" restart; then
    cat >"$RUN/fill.lua" <<EOF
-- GET prefix1 .. prefixN once each (then prefix1 again until they have all completed).
local n = 0
local limit = $RESTART_OBJECTS
local conns = $RESTART_CONNS
local prefix = PREFIX
local threads = {}
local finished = false
got, bad, hits = 0, 0, 0
function setup(thread) table.insert(threads, thread) end
function request()
  n = n + 1
  local i = n
  if i > limit then i = 1 end
  return wrk.format("GET", prefix .. i)
end
function response(status, headers, body)
  got = got + 1
  if status ~= 200 then bad = bad + 1 end
  for k, v in pairs(headers) do
    local l = string.lower(k)
    if (l == "cache-status" or l == "x-cache") and string.find(string.lower(v), "hit") then hits = hits + 1 end
  end
  -- Every one of 1..N has completed once got >= N + conns (one request in
  -- flight per connection): tell the script, which stops wrk with SIGINT.
  if got >= limit + conns and not finished then
    finished = true
    local f = io.open(MARK, "w")
    f:write("done\n")
    f:close()
    wrk.thread:stop()
  end
end
function done(summary, latency, requests)
  local g, b, h = 0, 0, 0
  for _, t in ipairs(threads) do g = g + t:get("got"); b = b + t:get("bad"); h = h + t:get("hits") end
  local e = summary.errors
  io.write(string.format("FILL got=%d bad=%d hits=%d errors=%d\n",
    g, b, h, e.connect + e.read + e.write + e.timeout))
end
EOF
    fill() { # name prefix: write RESTART_OBJECTS objects through it
        local name="$1" prefix="$2" f="$RUN/fill-$1" line t0 t1 pid
        sed -e "s|^local prefix = PREFIX|local prefix = \"$prefix\"|" \
            -e "s|MARK|\"$f.done\"|" "$RUN/fill.lua" >"$f.lua"
        rm -f "$f.done"
        log "restart: $name, writing $RESTART_OBJECTS $RESTART_OBJECT objects (wrk -c$RESTART_CONNS)"
        # wrk runs for its whole -d even when its thread has stopped; SIGINT
        # ends it early (and it still prints the summary).
        t0="$(now_us)"
        spawn "$f.wrk" taskset -c "$WRK_CPU" wrk -t1 -c"$RESTART_CONNS" -d600s --timeout 10s -s "$f.lua" \
            "http://127.0.0.1:${PORT[$name]}/"
        pid="$STARTED_PID"
        while [ ! -e "$f.done" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
        t1="$(now_us)"
        kill -INT "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        stop_pid "$pid"
        [ -e "$f.done" ] || { cat "$f.wrk" >&2; die "wrk ended before filling $name"; }
        line="$(grep '^FILL ' "$f.wrk" || true)"
        [ -n "$line" ] || { cat "$f.wrk" >&2; die "could not parse the fill output for $name"; }
        [ "$(field "$line" bad)" = 0 ] && [ "$(field "$line" errors)" = 0 ] \
            || die "$name: errors while filling: $line"
        [ "$(field "$line" got)" -ge "$RESTART_OBJECTS" ] || die "$name: fill stopped early: $line"
        X_FILL[$name]="$(awk -v n="$RESTART_OBJECTS" -v d="$((t1 - t0))" 'BEGIN { printf "%.0f", n / (d / 1e6) }')"
    }
    files_settle() { # dir: wait until the file count stops growing; prints it
        local dir="$1" a=-1 b
        for _ in $(seq 60); do
            b="$(find "$dir" -type f | wc -l)"
            [ "$b" != "$a" ] || break
            a="$b"; sleep 1
        done
        echo "$b"
    }
    # poll name url pid t0: curl the URL until it is a hit; sets POLL_OK/POLL_HIT (µs after t0)
    poll() {
        local name="$1" url="$2" pid="$3" t0="$4" hdr now
        POLL_OK=""; POLL_HIT=""
        while :; do
            hdr="$(curl -s -m 5 -o /dev/null -D - "$url" 2>/dev/null || true)"
            now="$(now_us)"
            if [[ "$hdr" == HTTP/*\ 200* ]]; then
                [ -n "$POLL_OK" ] || POLL_OK=$((now - t0))
                if is_hit "$hdr"; then POLL_HIT=$((now - t0)); return 0; fi
            fi
            [ $((now - t0)) -lt 300000000 ] || { NOTES+=("restart, $name: no hit for $url within 300 s"); return 0; }
            kill -0 "$pid" 2>/dev/null || die "$name exited during the restart (see $RUN)"
        done
    }
    sample_hits() { # name prefix: hits among 20 URLs spread over 1..N (after loading)
        local name="$1" prefix="$2" i n=0 u
        for i in $(seq 0 19); do
            u=$((1 + i * (RESTART_OBJECTS - 1) / 19))
            is_hit "$(curl -s -o /dev/null -D - "http://127.0.0.1:${PORT[$name]}$prefix$u")" && n=$((n + 1))
        done
        echo "$n/20"
    }

    if has "$PROXIES" hoard; then
        free_port hp
        c="$RUN/hoard-r/cache"; mkdir -p "$c"
        prefix="/$RESTART_OBJECT/r-$TAG-"
        hoard_cli hoard-r "$hp" "$c"
        fill hoard-r "$prefix"
        X_FILES[hoard]="$(files_settle "$c")"
        stop_pid "${PID[hoard-r]}"
        mv "$RUN/hoard-r/stdout.log" "$RUN/hoard-r/first.log"
        log "restart: hoard, ${X_FILES[hoard]} files on disk, starting again"
        t0="$(now_us)"
        NOWAIT=1 hoard_cli hoard-r "$hp" "$c"
        poll hoard "http://127.0.0.1:$hp${prefix}1" "${PID[hoard-r]}" "$t0"
        X_OK[hoard]="$POLL_OK"; X_HIT[hoard]="$POLL_HIT"
        line=""
        for _ in $(seq 3000); do
            line="$(grep -m1 'disk: zone loaded' "$RUN/hoard-r/stdout.log" || true)"
            [ -z "$line" ] || break
            sleep 0.1
        done
        if [ -n "$line" ]; then
            line="$(sed 's/\x1b\[[0-9;]*m//g' <<<"$line")"
            X_LTOOK[hoard]="$(sed -nE 's/.*[^a-z_]ms=([0-9]+).*/\1/p' <<<"$line")"
            X_LOBJ[hoard]="$(sed -nE 's/.*objects=([0-9]+).*/\1/p' <<<"$line")"
            ts="$(grep -oE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z?' <<<"$line" || true)"
            if [ -n "$ts" ]; then
                X_LDONE[hoard]=$(( $(date -d "$ts" +%s%6N) - t0 ))
            fi
            X_LSTART[hoard]=0
            [ -n "${X_LTOOK[hoard]}" ] && X_LTOOK[hoard]=$((X_LTOOK[hoard] * 1000))
        else
            NOTES+=("restart, hoard: no 'disk: zone loaded' line within 300 s")
        fi
        X_SAMPLE[hoard]="$(sample_hits hoard-r "$prefix")"
        stop_pid "${PID[hoard-r]}"
    fi

    if has "$PROXIES" nginx; then
        free_port np
        c="$RUN/nginx-r/cache"
        prefix="/$RESTART_OBJECT/r-$TAG-"
        start_nginx_proxy nginx-r "$np" "$c" notice
        fill nginx-r "$prefix"
        X_FILES[nginx]="$(files_settle "$c")"
        stop_pid "${PID[nginx-r]}"
        log "restart: nginx, ${X_FILES[nginx]} files on disk, starting again"
        t0="$(now_us)"
        spawn "$RUN/nginx-r/stdout.log" taskset -c "$PROXY_CPU" nginx -e "$RUN/nginx-r/error.log" -c "$RUN/nginx-r.conf"
        PID[nginx-r]="$STARTED_PID"
        poll nginx "http://127.0.0.1:$np${prefix}1" "${PID[nginx-r]}" "$t0"
        X_OK[nginx]="$POLL_OK"; X_HIT[nginx]="$POLL_HIT"
        if [ "$NGINX_LOADER" = 1 ]; then
            # The cache loader process starts 60 s after nginx and exits when done.
            log "restart: nginx, waiting for its cache loader (starts 60 s after nginx)"
            lp=""
            for _ in $(seq 6000); do
                lp="$(pgrep -P "${PID[nginx-r]}" -f 'cache loader' || true)"
                [ -z "$lp" ] || break
                sleep 0.02
            done
            if [ -n "$lp" ]; then
                # The process exists from the start; it begins loading after a
                # fixed 60 s timer (ngx_cache_loader_ctx in ngx_cache_manager_module).
                ls=$(( $(now_us) + 60000000 ))
                while kill -0 "$lp" 2>/dev/null && [ $(( $(now_us) - ls )) -lt 600000000 ]; do sleep 0.02; done
                le="$(now_us)"
                X_LSTART[nginx]=$((ls - t0)); X_LDONE[nginx]=$((le - t0)); X_LTOOK[nginx]=$((le - ls))
                grep -q 'http file cache:' "$RUN/nginx-r/error.log" \
                    || NOTES+=("restart, nginx: the loader exited without its 'http file cache' notice")
            else
                NOTES+=("restart, nginx: no cache loader process seen within 120 s")
            fi
            X_SAMPLE[nginx]="$(sample_hits nginx-r "$prefix")"
        fi
        stop_pid "${PID[nginx-r]}"
    fi
fi

# ------------------------------------------------ 1b. durability cost ----
# The write path again, hoard alone, with and without fsync before publish.
if has "$TESTS" durability; then
    for d in $DURABILITY_ORDER; do
        p="hoard-$d"
        free_port hp
        CACHE[$p]="$RUN/$p/cache"
        mkdir -p "${CACHE[$p]}"
        cat >"$RUN/$p.toml" <<EOF
[cache]
memory_size = 0
max_object_size = "8MiB"
durability = "$d"
[[cache.zone]]
name = "disk"
dirs = ["${CACHE[$p]}"]
max_size = "${DISK_MB}MiB"
[upstream.o]
servers = ["http://127.0.0.1:$ORIGIN_PORT"]
[[listener]]
address = "127.0.0.1:$hp"
[server]
threads = 1
EOF
        "$HOARD_BIN" check --config "$RUN/$p.toml" >/dev/null || die "hoard check failed for $RUN/$p.toml"
        start_hoard "$p" "$hp" run --config "$RUN/$p.toml"
        warm "$p" "/1k/sanity-$TAG" 1k
        cat >"$RUN/write-$p.lua" <<EOF
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/1m/d-$p-$TAG-" .. n)
end
EOF
        cat "$RUN/report.lua" >>"$RUN/write-$p.lua"
        sync
        if [ -w /proc/sys/vm/drop_caches ]; then
            echo 3 >/proc/sys/vm/drop_caches
        fi
        log "durability: $d, unique 1 MiB URLs, wrk -t1 -c$WRITE_CONNS -d${DURATION}s"
        measure "write-$p" "${PID[$p]}" "http://127.0.0.1:$hp/" "$WRITE_CONNS" "$RUN/write-$p.lua"
        R_STORED[$p]="$(stored_mib "$p")"
        stop_pid "${PID[$p]}"
    done
fi

# ----------------------------------------------------------------- report ----
report_start disk
both=0; has "$PROXIES" hoard && has "$PROXIES" nginx && both=1
hv=0; has "$PROXIES" hoard && has "$PROXIES" varnish && hv=1
label() { case "$1" in hoard2) echo "hoard, 2 dirs" ;; *) echo "$1" ;; esac; }
mbs() { awk -v r="$1" -v s="$2" 'BEGIN { printf "%.0f", r * s / 1048576 }'; }
{
    echo "# hoard disk-cache benchmark ($STAMP)"
    echo
    machine_line
    if has "$PROXIES" hoard; then
        echo "- hoard: git $git_rev (binary built $(hoard_built)), --threads 1 --cache-size 0 (memory tier off) --disk-size ${DISK_MB}MiB --max-object-size 8MiB"
    fi
    has "$PROXIES" nginx && echo "- nginx: $(nginx -v 2>&1 | sed 's/^nginx version: //'), 1 worker, proxy_cache_path levels=1:2 keys_zone=64m max_size=${DISK_MB}m, sendfile on, open_file_cache"
    has "$PROXIES" varnish && echo "- varnish: $(varnishd -V 2>&1 | head -n1 | sed -E 's/^varnishd \(([^ ]+) .*/\1/'), -s file,${DISK_MB}M, default thread pools"
    echo "- proxy pinned to CPU $PROXY_CPU; wrk and the origin (nginx, sendfile) pinned to CPU $WRK_CPU"
    echo "- cache directories in $(df -P "$RUN" | awk 'NR == 2 { print $1 }') ($(stat -f -c %T "$RUN")); the page cache holds everything, so reads and most writes never wait for the device"
    echo "- other processes before the run: $busy% of one core"
    echo "- proxy cpu: user+sys CPU time of the proxy's whole process tree (nginx master, worker and cache processes; Varnish manager and child); wrk+origin cpu: both on CPU $WRK_CPU; other cpu: the rest of the machine (includes kernel writeback)"

    if has "$TESTS" write; then
        echo
        echo "## 1. Write path: unique 1 MiB URLs"
        echo
        echo "Every request a miss that is stored to disk. wrk -t1 -c$WRITE_CONNS -d${DURATION}s. cpu ms/MiB = proxy CPU seconds per MiB"
        echo "delivered × 1000 (lower is better). stored = MiB in the cache afterwards (limit $DISK_MB; \"hoard, 2 dirs\" is a zone over two"
        echo "directories on the same disk, from a config file)."
        echo
        echo "| proxy | requests | MiB/s | p50 | p99 | cpu ms/MiB | proxy cpu | wrk+origin cpu | other cpu | stored MiB |"
        echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        for p in $WRITE_ROWS; do
            k="write-$p"
            R_MBS[$k]="$(awk -v r="${R_REQ[$k]}" -v d="${R_DUR[$k]}" 'BEGIN { printf "%.0f", r / (d / 1e6) }')"
            R_CPM[$k]="$(awk -v c="${R_PT[$k]}" -v r="${R_REQ[$k]}" 'BEGIN { printf "%.2f", c / r * 1000 }')"
            echo "| $(label "$p") | ${R_REQ[$k]} | ${R_MBS[$k]} | $(ms "${R_P50[$k]}") | $(ms "${R_P99[$k]}") | ${R_CPM[$k]} | ${R_PCPU[$k]}% | ${R_WCPU[$k]}% | ${R_OTH[$k]}% | ${R_STORED[$p]} |"
        done
        if [ "$both" = 1 ]; then
            echo "| **hoard/nginx** | | **$(ratio "${R_MBS[write-hoard]}" "${R_MBS[write-nginx]}")** | $(ratio "${R_P50[write-hoard]}" "${R_P50[write-nginx]}") | $(ratio "${R_P99[write-hoard]}" "${R_P99[write-nginx]}") | **$(ratio "${R_CPM[write-hoard]}" "${R_CPM[write-nginx]}")** | | | | |"
        fi
        if [ "$hv" = 1 ]; then
            echo "| hoard/varnish | | $(ratio "${R_MBS[write-hoard]}" "${R_MBS[write-varnish]}") | $(ratio "${R_P50[write-hoard]}" "${R_P50[write-varnish]}") | $(ratio "${R_P99[write-hoard]}" "${R_P99[write-varnish]}") | $(ratio "${R_CPM[write-hoard]}" "${R_CPM[write-varnish]}") | | | | |"
        fi
        if has "$PROXIES" hoard; then
            echo "| hoard 2 dirs / 1 dir | | $(ratio "${R_MBS[write-hoard2]}" "${R_MBS[write-hoard]}") | $(ratio "${R_P50[write-hoard2]}" "${R_P50[write-hoard]}") | $(ratio "${R_P99[write-hoard2]}" "${R_P99[write-hoard]}") | $(ratio "${R_CPM[write-hoard2]}" "${R_CPM[write-hoard]}") | | | | |"
        fi
    fi

    if has "$TESTS" hit; then
        echo
        echo "## 2. Disk hits"
        echo
        echo "One URL per object, warmed (second request checked to be a hit), then wrk -t1 -c$HIT_CONNS -d${DURATION}s. hoard reads"
        echo "every hit from its disk zone (memory tier off), nginx sends the cache file with sendfile (nginx-nosf: sendfile off), Varnish"
        echo "serves from its mmap'ed storage file. cpu µs/req = proxy CPU time per request (lower is better)."
        echo
        echo "| proxy | object | requests | req/s | MiB/s | p50 | p99 | cpu µs/req | proxy cpu | wrk+origin cpu | other cpu |"
        echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        for o in $HIT_OBJECTS; do
            for p in $HIT_PROXIES; do
                k="hit-$p-$o"
                R_CPR[$k]="$(awk -v c="${R_PT[$k]}" -v r="${R_REQ[$k]}" 'BEGIN { printf "%.1f", c / r * 1e6 }')"
                echo "| $p | $o | ${R_REQ[$k]} | ${R_RPS[$k]} | $(mbs "${R_RPS[$k]}" "${OBJ_SIZE[$o]}") | $(ms "${R_P50[$k]}") | $(ms "${R_P99[$k]}") | ${R_CPR[$k]} | ${R_PCPU[$k]}% | ${R_WCPU[$k]}% | ${R_OTH[$k]}% |"
            done
            if [ "$both" = 1 ]; then
                h="hit-hoard-$o"; n="hit-nginx-$o"
                echo "| **hoard/nginx** | $o | | **$(ratio "${R_RPS[$h]}" "${R_RPS[$n]}")** | | $(ratio "${R_P50[$h]}" "${R_P50[$n]}") | $(ratio "${R_P99[$h]}" "${R_P99[$n]}") | **$(ratio "${R_CPR[$h]}" "${R_CPR[$n]}")** | | | |"
                n="hit-nginx-nosf-$o"
                echo "| **hoard/nginx-nosf** | $o | | **$(ratio "${R_RPS[$h]}" "${R_RPS[$n]}")** | | $(ratio "${R_P50[$h]}" "${R_P50[$n]}") | $(ratio "${R_P99[$h]}" "${R_P99[$n]}") | **$(ratio "${R_CPR[$h]}" "${R_CPR[$n]}")** | | | |"
            fi
            if [ "$hv" = 1 ]; then
                h="hit-hoard-$o"; n="hit-varnish-$o"
                echo "| hoard/varnish | $o | | $(ratio "${R_RPS[$h]}" "${R_RPS[$n]}") | | $(ratio "${R_P50[$h]}" "${R_P50[$n]}") | $(ratio "${R_P99[$h]}" "${R_P99[$n]}") | $(ratio "${R_CPR[$h]}" "${R_CPR[$n]}") | | | |"
            fi
        done
    fi

    if has "$TESTS" restart; then
        echo
        echo "## 3. Warm restart: $RESTART_OBJECTS $RESTART_OBJECT objects on disk"
        echo
        echo "Objects written with wrk (unique URLs, -c$RESTART_CONNS), proxy stopped and started again (page cache still warm)."
        echo "Times count from the start of the process: first response and first hit of one known URL (curl in a loop), loader"
        echo "start and end (hoard: its \"disk: zone loaded\" log line, ms field = loader duration; nginx: the cache loader process,"
        echo "whose work starts 60 s after nginx, then runs with the default loader_files=100 loader_sleep=50ms loader_threshold=200ms)."
        echo "sample hits: 20 of the URLs, spread over all of them, requested after loading."
        echo
        echo "| proxy | fill req/s | files on disk | first response | first hit | loader start | loader took | loader done | objects indexed | sample hits |"
        echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        for p in hoard nginx; do
            has "$PROXIES" "$p" || continue
            echo "| $p | ${X_FILL[$p-r]:-n/a} | ${X_FILES[$p]:-n/a} | $(secs "${X_OK[$p]:-}") | $(secs "${X_HIT[$p]:-}") | $(secs "${X_LSTART[$p]:-}") | $(secs "${X_LTOOK[$p]:-}") | $(secs "${X_LDONE[$p]:-}") | ${X_LOBJ[$p]:-n/a} | ${X_SAMPLE[$p]:-n/a} |"
        done
        has "$PROXIES" varnish && echo "| varnish | n/a | | | | | | | | |"
        if [ "$both" = 1 ]; then
            echo "| **hoard/nginx** | $(ratio "${X_FILL[hoard-r]:-}" "${X_FILL[nginx-r]:-}") | | $(ratio "${X_OK[hoard]:-}" "${X_OK[nginx]:-}") | **$(ratio "${X_HIT[hoard]:-}" "${X_HIT[nginx]:-}")** | | $(ratio "${X_LTOOK[hoard]:-}" "${X_LTOOK[nginx]:-}") | **$(ratio "${X_LDONE[hoard]:-}" "${X_LDONE[nginx]:-}")** | | |"
        fi
        echo
        has "$PROXIES" varnish && echo "Varnish is not in the restart test: its file storage is not persistent, a restarted varnishd starts empty."
        [ "$NGINX_LOADER" = 1 ] || echo "nginx's cache loader was not waited for (NGINX_LOADER=0)."
    fi

    if has "$TESTS" durability; then
        echo
        echo "## 4. Durability: the write path without and with fsync"
        echo
        echo "hoard alone, from a config file (one zone, memory tier off), unique 1 MiB misses, wrk -t1 -c$WRITE_CONNS -d${DURATION}s."
        echo "process: rename without fsync (survives a crash of hoard); power: fsync of the file, rename, fsync of its"
        echo "directory, then publish (survives a power loss). cpu ms/MiB as in section 1."
        echo
        echo "| durability | requests | MiB/s | p50 | p99 | cpu ms/MiB | proxy cpu | other cpu | stored MiB |"
        echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        for d in $DURABILITY_ORDER; do
            k="write-hoard-$d"
            R_MBS[$k]="$(awk -v r="${R_REQ[$k]}" -v d="${R_DUR[$k]}" 'BEGIN { printf "%.0f", r / (d / 1e6) }')"
            R_CPM[$k]="$(awk -v c="${R_PT[$k]}" -v r="${R_REQ[$k]}" 'BEGIN { printf "%.2f", c / r * 1000 }')"
            echo "| $d | ${R_REQ[$k]} | ${R_MBS[$k]} | $(ms "${R_P50[$k]}") | $(ms "${R_P99[$k]}") | ${R_CPM[$k]} | ${R_PCPU[$k]}% | ${R_OTH[$k]}% | ${R_STORED[hoard-$d]} |"
        done
        w=write-hoard-power; o=write-hoard-process
        if [ -n "${R_MBS[$w]:-}" ] && [ -n "${R_MBS[$o]:-}" ]; then
            echo "| **power/process** | | **$(ratio "${R_MBS[$w]}" "${R_MBS[$o]}")** | $(ratio "${R_P50[$w]}" "${R_P50[$o]}") | $(ratio "${R_P99[$w]}" "${R_P99[$o]}") | $(ratio "${R_CPM[$w]}" "${R_CPM[$o]}") | | | |"
        fi
    fi

    if [ "${#NOTES[@]}" -gt 0 ]; then
        echo
        echo "Notes:"
        for n in "${NOTES[@]}"; do echo "- $n"; done
    fi
} >"$REPORT"

report_done
