#!/usr/bin/env bash
# Instructions and system calls per 1 KiB cache hit: hoard vs nginx proxy_cache.
#
# Hardware counters are not available on every machine (perf stat says
# "<not supported>" in many VMs), so this counts user-space instructions with
# valgrind's callgrind, which is exact and repeatable whatever else the machine
# does, and system calls with strace -c. Both proxies get the same load: a
# warm-up, counters zeroed, then wrk with keep-alive for a fixed time; the
# totals are divided by the requests wrk completed. hoard is measured four
# times: plain; with its admin listener and a JSON access log to a file (every
# thread counted, the log writer's included), for the cost of observability;
# and from a configuration file whose one route has edge rules that pass
# every request (a per-client rate limit far above the load, an allow list,
# a response header set and one removed), for the cost of those checks;
# and with one Proxy-Wasm filter that adds a response field, for the cost
# of a filter; and with a route as a VCL port writes it (`when` conditions
# and a `rewrite_query` that rewrites the query of every request), whose
# difference to plain is reported in instructions; and with a route whose
# links are signed (`signed_urls`, nginx-md5), loaded with a valid link,
# against plain with that same URL, reported the same way. Last, both
# proxies over TLS (the same P-256 certificate; HTTP/1.1, wrk's OpenSSL
# client, nginx with its session cache on), for the TLS rows.
set -euo pipefail
BENCH_NAME=instr
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
DURATION=${DURATION:-10}
CONNS=${CONNS:-16}
KEEP=1  # the callgrind and strace output stays in bench/out/instr.*
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"  # another binary: HOARD_BIN=path SKIP_BUILD=1

ensure_tools nginx:nginx wrk:wrk valgrind:valgrind strace:strace callgrind_control:valgrind

start_run instr
OUT=$RUN
NEXT_PORT=${BASE_PORT:-18280}  # first loopback port to try
free_port ORIGIN; free_port HOARD; free_port NGINX; free_port ADMIN
free_port HOARD_TLS; free_port NGINX_TLS
localhost_cert

build_hoard
head -c 1024 /dev/urandom > "$OUT/1k.bin"
spawn "$OUT/origin.log" python3 "$BENCH_DIR/file_origin.py" --port "$ORIGIN" --dir "$OUT"
ORIGIN_PID=$STARTED_PID

mkdir -p "$OUT/ngx/cache"
cat > "$OUT/nginx.conf" <<NGX
daemon off; master_process off; worker_processes 1; user $(id -un);
error_log $OUT/ngx/error.log; pid $OUT/ngx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $OUT/ngx/t1; proxy_temp_path $OUT/ngx/t2; fastcgi_temp_path $OUT/ngx/t3; uwsgi_temp_path $OUT/ngx/t4; scgi_temp_path $OUT/ngx/t5;
  proxy_cache_path $OUT/ngx/cache keys_zone=z:10m max_size=256m;
  upstream o { server 127.0.0.1:$ORIGIN; keepalive 16; }
  server {
    listen 127.0.0.1:$NGINX; keepalive_requests 1000000;
    location / { proxy_pass http://o; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_cache z; }
  }
  server {
    listen 127.0.0.1:$NGINX_TLS ssl; keepalive_requests 1000000;
    ssl_certificate $OUT/cert.pem; ssl_certificate_key $OUT/key.pem; ssl_session_cache shared:SSL:10m;
    location / { proxy_pass http://o; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_cache z; }
  }
}
NGX

# hoard over TLS: the plain run's route on a TLS listener.
cat > "$OUT/tls.toml" <<TOML
[server]
threads = 1

[[listener]]
address = "127.0.0.1:$HOARD_TLS"
tls = { cert = "$OUT/cert.pem", key = "$OUT/key.pem" }

[upstream.origin]
servers = ["http://127.0.0.1:$ORIGIN"]

[[site]]
[[site.route]]
prefix = "/"
upstream = "origin"
TOML
"$HOARD_BIN" check --config "$OUT/tls.toml" >/dev/null \
    || die "hoard rejects $OUT/tls.toml"

# The same origin and listener as the plain run, one worker thread, and a
# route whose edge rules let every request of the load through.
cat > "$OUT/edge.toml" <<TOML
[server]
threads = 1

[[listener]]
address = "127.0.0.1:$HOARD"

[upstream.origin]
servers = ["http://127.0.0.1:$ORIGIN"]

[[site]]
[[site.route]]
prefix = "/"
upstream = "origin"
limit = { rate = "1000000r/s", burst = 1000000 }
allow = ["127.0.0.0/8"]
response_headers = { set = { "Strict-Transport-Security" = "max-age=63072000" }, remove = ["X-Powered-By"] }
TOML
"$HOARD_BIN" check --config "$OUT/edge.toml" >/dev/null \
    || die "hoard rejects $OUT/edge.toml"

# The same again with one Proxy-Wasm filter that adds a response field
# (examples/filters/stamp.wat), for the cost of a filter on a hit.
cat > "$OUT/filter.toml" <<TOML
[server]
threads = 1

[[listener]]
address = "127.0.0.1:$HOARD"

[upstream.origin]
servers = ["http://127.0.0.1:$ORIGIN"]

[filter.stamp]
wasm = "$ROOT/examples/filters/stamp.wat"
config = "edge-7"

[[site]]
[[site.route]]
prefix = "/"
upstream = "origin"
filters = ["stamp"]
TOML
"$HOARD_BIN" check --config "$OUT/filter.toml" >/dev/null \
    || die "hoard rejects $OUT/filter.toml"

# A route as a VCL port writes it: conditions on the request (`when`) and
# the query normalised (`rewrite_query`), loaded with a query that it
# rewrites (tracking tag removed, the rest sorted).
cat > "$OUT/vcl.toml" <<TOML
[server]
threads = 1

[[listener]]
address = "127.0.0.1:$HOARD"

[upstream.origin]
servers = ["http://127.0.0.1:$ORIGIN"]

[[site]]
[[site.route]]
prefix = "/"
upstream = "origin"
when = { method = ["GET", "HEAD"], header = "Host" }
rewrite_query = { sort = true, remove = ["utm_*", "gclid"] }
TOML
"$HOARD_BIN" check --config "$OUT/vcl.toml" >/dev/null \
    || die "hoard rejects $OUT/vcl.toml"

# A route whose links are signed (nginx's secure_link): every request of
# the load carries a valid link, checked and its two parameters removed.
cat > "$OUT/signed.toml" <<TOML
[server]
threads = 1

[[listener]]
address = "127.0.0.1:$HOARD"

[upstream.origin]
servers = ["http://127.0.0.1:$ORIGIN"]

[[site]]
[[site.route]]
prefix = "/"
upstream = "origin"
signed_urls = { secret = "bench-secret" }
TOML
"$HOARD_BIN" check --config "$OUT/signed.toml" >/dev/null \
    || die "hoard rejects $OUT/signed.toml"
SIGNED_PATH=$("$HOARD_BIN" sign --config "$OUT/signed.toml" --url /1k.bin --expires-at 4102444800) \
    || die "hoard sign failed"

wait_port "$ORIGIN" origin "$ORIGIN_PID" "$OUT/origin.log"

# measure NAME PORT CMD...: sets RESULT="requests instructions strace-requests syscalls"
# (the URL's path and query: $MPATH, default /1k.bin; its scheme: $MSCHEME,
# default http)
measure() {
  local name=$1 port=$2; shift 2
  local path=${MPATH:-/1k.bin} scheme=${MSCHEME:-http}
  spawn "$OUT/$name.log" valgrind --tool=callgrind --callgrind-out-file="$OUT/$name.cg" "$@"
  local vg=$STARTED_PID
  sleep 2; wait_port "$port" "$name (callgrind)" "$vg" "$OUT/$name.log"
  curl -skf -o /dev/null "$scheme://127.0.0.1:$port$path"; curl -skf -o /dev/null "$scheme://127.0.0.1:$port$path"
  wrk -t1 -c"$CONNS" -d2s "$scheme://127.0.0.1:$port$path" >/dev/null
  callgrind_control -z "$vg" >/dev/null
  local reqs; reqs=$(wrk -t1 -c"$CONNS" -d"${DURATION}s" "$scheme://127.0.0.1:$port$path" | awk '/requests in/ {print $1}')
  callgrind_control -d "$vg" >/dev/null; sleep 1
  local ir; ir=$(grep -h '^summary:' "$OUT/$name.cg".* | awk '{s+=$2} END {print s}')
  stop_pid "$vg"
  # System calls per request, natively (strace slows the proxy, not the counts).
  spawn /dev/null "$@"
  local p=$STARTED_PID
  wait_port "$port" "$name" "$p"; curl -skf -o /dev/null "$scheme://127.0.0.1:$port$path"; curl -skf -o /dev/null "$scheme://127.0.0.1:$port$path"
  timeout $((DURATION / 2 + 3)) strace -c -f -p "$p" -o "$OUT/$name.strace" & local st=$!
  sleep 1
  local sreqs; sreqs=$(wrk -t1 -c"$CONNS" -d"$((DURATION / 2))s" "$scheme://127.0.0.1:$port$path" | awk '/requests in/ {print $1}')
  wait "$st" 2>/dev/null || true
  stop_pid "$p"
  local calls; calls=$(awk '/total$/ {print $4}' "$OUT/$name.strace")
  RESULT="$reqs $ir $sreqs $calls"
}

measure hoard "$HOARD" "$HOARD_BIN" --upstream "http://127.0.0.1:$ORIGIN" --listen "127.0.0.1:$HOARD" --threads 1
read -r hr hi hsr hc <<<"$RESULT"
measure hoard-logged "$HOARD" "$HOARD_BIN" --upstream "http://127.0.0.1:$ORIGIN" --listen "127.0.0.1:$HOARD" --threads 1 \
    --admin "127.0.0.1:$ADMIN" --access-log "$OUT/access.log"
read -r lr li lsr lc <<<"$RESULT"
measure hoard-edge "$HOARD" "$HOARD_BIN" run --config "$OUT/edge.toml"
read -r er ei esr ec <<<"$RESULT"
measure hoard-filter "$HOARD" "$HOARD_BIN" run --config "$OUT/filter.toml"
read -r wr wi wsr wc <<<"$RESULT"
MPATH="/1k.bin?utm_source=news&b=2&a=1" measure hoard-vcl "$HOARD" "$HOARD_BIN" run --config "$OUT/vcl.toml"
read -r vr vi vsr vc <<<"$RESULT"
# The plain run again with the VCL run's URL: what the route's keys add.
MPATH="/1k.bin?utm_source=news&b=2&a=1" measure hoard-query "$HOARD" "$HOARD_BIN" --upstream "http://127.0.0.1:$ORIGIN" --listen "127.0.0.1:$HOARD" --threads 1
read -r qr qi qsr qc <<<"$RESULT"
MPATH="$SIGNED_PATH" measure hoard-signed "$HOARD" "$HOARD_BIN" run --config "$OUT/signed.toml"
read -r gr gi gsr gc <<<"$RESULT"
# The plain run again with the signed run's URL (keyed with its parameters).
MPATH="$SIGNED_PATH" measure hoard-signed-plain "$HOARD" "$HOARD_BIN" --upstream "http://127.0.0.1:$ORIGIN" --listen "127.0.0.1:$HOARD" --threads 1
read -r pr pi psr pc <<<"$RESULT"
measure nginx "$NGINX" nginx -c "$OUT/nginx.conf"
read -r nr ni nsr nc <<<"$RESULT"
MSCHEME=https measure hoard-tls "$HOARD_TLS" "$HOARD_BIN" run --config "$OUT/tls.toml"
read -r tr ti tsr tc <<<"$RESULT"
MSCHEME=https measure nginx-tls "$NGINX_TLS" nginx -c "$OUT/nginx.conf"
read -r xr xi xsr xc <<<"$RESULT"

python3 - "$hr" "$hi" "$hsr" "$hc" "$nr" "$ni" "$nsr" "$nc" "$lr" "$li" "$lsr" "$lc" "$er" "$ei" "$esr" "$ec" "$wr" "$wi" "$wsr" "$wc" "$vr" "$vi" "$vsr" "$vc" "$qr" "$qi" "$qsr" "$qc" "$gr" "$gi" "$gsr" "$gc" "$pr" "$pi" "$psr" "$pc" "$tr" "$ti" "$tsr" "$tc" "$xr" "$xi" "$xsr" "$xc" <<'PY' | tee "$OUT_DIR/instructions-$(date +%Y%m%d-%H%M%S).md"
import sys
hr, hi, hsr, hc, nr, ni, nsr, nc, lr, li, lsr, lc, er, ei, esr, ec, wr, wi, wsr, wc, vr, vi, vsr, vc, qr, qi, qsr, qc, gr, gi, gsr, gc, pr, pi, psr, pc, tr, ti, tsr, tc, xr, xi, xsr, xc = map(float, sys.argv[1:])
h_ipr, n_ipr = hi / hr, ni / nr
h_spr, n_spr = hc / hsr, nc / nsr
print("| proxy | requests (callgrind) | user instructions / 1 KiB hit | syscalls / hit |")
print("|---|---:|---:|---:|")
print(f"| hoard | {int(hr)} | {h_ipr:,.0f} | {h_spr:.2f} |")
print(f"| nginx proxy_cache | {int(nr)} | {n_ipr:,.0f} | {n_spr:.2f} |")
print(f"| **hoard/nginx** | | **{h_ipr / n_ipr:.2f}x** | **{h_spr / n_spr:.2f}x** |")
l_ipr, l_spr = li / lr, lc / lsr
print(f"| hoard, admin + access log | {int(lr)} | {l_ipr:,.0f} | {l_spr:.2f} |")
print(f"| **hoard logged/plain** | | **{l_ipr / h_ipr:.2f}x** | **{l_spr / h_spr:.2f}x** |")
e_ipr, e_spr = ei / er, ec / esr
print(f"| hoard, edge rules | {int(er)} | {e_ipr:,.0f} | {e_spr:.2f} |")
print(f"| **hoard edge/plain** | | **{e_ipr / h_ipr:.2f}x** | **{e_spr / h_spr:.2f}x** |")
f_ipr, f_spr = wi / wr, wc / wsr
print(f"| hoard, one filter | {int(wr)} | {f_ipr:,.0f} | {f_spr:.2f} |")
print(f"| **hoard filter/plain** | | **{f_ipr / h_ipr:.2f}x** | **{f_spr / h_spr:.2f}x** |")
v_ipr, v_spr = vi / vr, vc / vsr
q_ipr, q_spr = qi / qr, qc / qsr
print(f"| hoard, plain, URL with a query | {int(qr)} | {q_ipr:,.0f} | {q_spr:.2f} |")
print(f"| hoard, when + rewrite_query, same URL | {int(vr)} | {v_ipr:,.0f} | {v_spr:.2f} |")
print(f"| **hoard VCL route - plain (same URL)** | | **{v_ipr - q_ipr:+,.0f} instructions** | |")
g_ipr, g_spr = gi / gr, gc / gsr
p_ipr, p_spr = pi / pr, pc / psr
print(f"| hoard, plain, signed URL | {int(pr)} | {p_ipr:,.0f} | {p_spr:.2f} |")
print(f"| hoard, signed_urls (nginx-md5), same URL | {int(gr)} | {g_ipr:,.0f} | {g_spr:.2f} |")
print(f"| **hoard signed_urls - plain (same URL)** | | **{g_ipr - p_ipr:+,.0f} instructions** | |")
t_ipr, t_spr = ti / tr, tc / tsr
x_ipr, x_spr = xi / xr, xc / xsr
print(f"| hoard, TLS (HTTP/1.1) | {int(tr)} | {t_ipr:,.0f} | {t_spr:.2f} |")
print(f"| nginx proxy_cache, TLS (HTTP/1.1) | {int(xr)} | {x_ipr:,.0f} | {x_spr:.2f} |")
print(f"| **hoard/nginx over TLS** | | **{t_ipr / x_ipr:.2f}x** | **{t_spr / x_spr:.2f}x** |")
PY
STATUS=0
