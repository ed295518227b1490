#!/usr/bin/env bash
# Automatic HTTPS over ACME against pebble (Let's Encrypt's test CA):
#
# 1. Time from starting hoard to the first HTTPS response with a new
#    certificate: hoard (`--domain`) starts with an empty cache directory,
#    so it creates an account, orders, answers HTTP-01 on its plain
#    listener, gets the certificate and presents it; curl polls every 10 ms
#    (verifying against pebble's root, SNI a.example.test) until a GET over
#    HTTPS succeeds. RUNS times, a fresh cache directory (a new account and
#    order) each time. Then the same time on a restart with the stored
#    certificate (no order), and, for reference, a start with the same
#    certificate loaded from files (`--tls-cert/--tls-key`).
# 2. Full TLS handshakes per second, the ACME certificate (served through
#    hoard's ACME certificate resolver) against the same certificate and
#    key loaded from files: `openssl s_time -new` (a new session every
#    connection, never resumed; handshake only, no request; no SNI, so the
#    ACME side presents its default certificate), CLIENTS processes in
#    parallel. h2load is not used: it resumes TLS sessions.
#
# pebble and pebble-challtestsrv (its DNS, answering 127.0.0.1 for every
# name) run on 127.0.0.1 like everything else; pebble validates HTTP-01 and
# TLS-ALPN-01 on hoard's plain and TLS ports. hoard runs one worker thread
# on HOARD_CPU, pebble, curl and the handshake clients on CLIENT_CPU.
#
# Environment knobs (all optional):
#   RUNS=5          starts per row of the startup table (median, min, max)
#   DURATION=10     seconds per handshake run
#   HS_RUNS=3       handshake runs per certificate, interleaved (median)
#   CLIENTS=4       openssl s_time processes in parallel
#   HOARD_CPU=0 CLIENT_CPU=1   BASE_PORT=18900
#   HOARD_BIN       a hoard binary (default: $CARGO_TARGET_DIR/release/hoard,
#                   else target/release/hoard; built unless SKIP_BUILD=1)
#   SKIP_BUILD=1, KEEP=1
set -euo pipefail

BENCH_NAME=acme
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RUNS="${RUNS:-5}"
DURATION="${DURATION:-10}"
HS_RUNS="${HS_RUNS:-3}"
CLIENTS="${CLIENTS:-4}"
HOARD_CPU="${HOARD_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
KEEP="${KEEP:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
HOARD_BIN="${HOARD_BIN:-$TARGET_DIR/release/hoard}"
NEXT_PORT="${BASE_PORT:-18900}"
DOMAIN=a.example.test
START_TIMEOUT=60 # seconds a start may take before the run is abandoned

require_whole RUNS
require_whole DURATION "a whole number of seconds"
require_whole HS_RUNS
require_whole CLIENTS
require_whole HOARD_CPU "a CPU number"
require_whole CLIENT_CPU "a CPU number"
require_positive RUNS DURATION HS_RUNS CLIENTS

ensure_tools pebble:pebble pebble-challtestsrv:pebble openssl:openssl curl:curl \
    nginx:nginx-light taskset:util-linux
check_cpus HOARD_CPU CLIENT_CPU "hoard and the clients"
raise_nofile

# build_hoard from lib.sh builds into target/; this one honours
# CARGO_TARGET_DIR, so that a benchmark build does not hold the lock of
# another build in the repository's target directory.
if [ "$SKIP_BUILD" != 1 ] && [ "$HOARD_BIN" = "$TARGET_DIR/release/hoard" ]; then
    log "building hoard (cargo build --release -p hoard into $TARGET_DIR)"
    (cd "$ROOT" && CARGO_TARGET_DIR="$TARGET_DIR" cargo build --release -p hoard) || die "cargo build failed"
fi
[ -x "$HOARD_BIN" ] || die "hoard binary not found at $HOARD_BIN"

start_run acme
free_port ORIGIN_PORT
free_port HTTP_PORT   # hoard's plain listener (HTTP-01, redirects)
free_port TLS_PORT    # hoard's ACME TLS listener (TLS-ALPN-01)
free_port FILES_PORT  # hoard with --tls-cert/--tls-key
free_port ADMIN_PORT
free_port ACME_PORT   # pebble's ACME API
free_port MGMT_PORT   # pebble's management API (/roots/0)
free_port DNS_PORT    # pebble-challtestsrv's DNS (TCP and UDP)
free_port CHALL_PORT  # pebble-challtestsrv's management API

ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); } # start-ns: milliseconds

# ------------------------------------------------------------------ origin ----
mkdir -p "$RUN/www"
echo "hello over https" >"$RUN/www/index.html"
write_static_origin
start_nginx origin taskset -c "$CLIENT_CPU"
wait_port "$ORIGIN_PORT" origin "$STARTED_PID"

# ------------------------------------------------------------------ pebble ----
# pebble's own HTTPS (the ACME API hoard talks to) is certified by a test
# CA made here; hoard trusts it with --acme-ca-root. The certificates
# pebble issues chain to a root it makes at each start (/roots/0).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$RUN/pebble-api-ca.key" -out "$RUN/pebble-api-ca.pem" -days 2 \
    -subj "/CN=hoard bench pebble API CA" 2>/dev/null || die "openssl: API CA"
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$RUN/pebble-api.key" -out "$RUN/pebble-api.csr" -subj /CN=localhost 2>/dev/null \
    || die "openssl: API CSR"
printf '%s\n' subjectAltName=DNS:localhost,IP:127.0.0.1 basicConstraints=critical,CA:FALSE \
    extendedKeyUsage=serverAuth >"$RUN/pebble-api.ext"
openssl x509 -req -in "$RUN/pebble-api.csr" -CA "$RUN/pebble-api-ca.pem" \
    -CAkey "$RUN/pebble-api-ca.key" -set_serial 1 -days 2 -extfile "$RUN/pebble-api.ext" \
    -out "$RUN/pebble-api.pem" 2>/dev/null || die "openssl: API certificate"

cat >"$RUN/pebble.json" <<EOF
{"pebble": {
  "listenAddress": "127.0.0.1:$ACME_PORT",
  "managementListenAddress": "127.0.0.1:$MGMT_PORT",
  "certificate": "$RUN/pebble-api.pem",
  "privateKey": "$RUN/pebble-api.key",
  "httpPort": $HTTP_PORT,
  "tlsPort": $TLS_PORT,
  "ocspResponderURL": "",
  "externalAccountBindingRequired": false
}}
EOF
spawn "$RUN/challtestsrv.log" taskset -c "$CLIENT_CPU" pebble-challtestsrv \
    -management "127.0.0.1:$CHALL_PORT" -dns01 "127.0.0.1:$DNS_PORT" \
    -http01 "" -https01 "" -tlsalpn01 "" -defaultIPv4 127.0.0.1 -defaultIPv6 ""
wait_port "$DNS_PORT" pebble-challtestsrv "$STARTED_PID" "$RUN/challtestsrv.log"
spawn "$RUN/pebble.log" env PEBBLE_VA_NOSLEEP=1 PEBBLE_WFE_NONCEREJECT=0 PEBBLE_AUTHZREUSE=0 \
    taskset -c "$CLIENT_CPU" pebble -config "$RUN/pebble.json" -dnsserver "127.0.0.1:$DNS_PORT"
PEBBLE_PID=$STARTED_PID
wait_port "$ACME_PORT" pebble "$PEBBLE_PID" "$RUN/pebble.log"
wait_port "$MGMT_PORT" pebble "$PEBBLE_PID" "$RUN/pebble.log"
curl -sf --cacert "$RUN/pebble-api-ca.pem" -o "$RUN/pebble-root.pem" \
    "https://127.0.0.1:$MGMT_PORT/roots/0" || die "could not fetch pebble's root (/roots/0)"
grep -q 'BEGIN CERTIFICATE' "$RUN/pebble-root.pem" || die "pebble's /roots/0 is not a certificate"
PEBBLE_VERSION="$(dpkg-query -W -f '${Version}' pebble 2>/dev/null || echo unknown)"

# ------------------------------------------------------------------- hoard ----
# start_acme_hoard dir log: hoard with --domain, its cache (and so the ACME
# account and certificate) in dir; sets HOARD_PID.
start_acme_hoard() {
    spawn "$2" taskset -c "$HOARD_CPU" "$HOARD_BIN" \
        --upstream "http://127.0.0.1:$ORIGIN_PORT" --threads 1 \
        --cache-dir "$1" --disk-size 64MiB --admin "127.0.0.1:$ADMIN_PORT" \
        --domain "$DOMAIN" --listen "127.0.0.1:$HTTP_PORT" --tls-listen "127.0.0.1:$TLS_PORT" \
        --acme-directory "https://127.0.0.1:$ACME_PORT/dir" \
        --acme-ca-root "$RUN/pebble-api-ca.pem"
    HOARD_PID=$STARTED_PID
}

# start_files_hoard dir log: hoard serving $RUN/files/{cert,key}.pem on
# FILES_PORT; sets HOARD_PID.
start_files_hoard() {
    spawn "$2" taskset -c "$HOARD_CPU" "$HOARD_BIN" \
        --upstream "http://127.0.0.1:$ORIGIN_PORT" --threads 1 \
        --cache-dir "$1" --disk-size 64MiB \
        --listen "127.0.0.1:$FILES_PORT" \
        --tls-cert "$RUN/files/cert.pem" --tls-key "$RUN/files/key.pem"
    HOARD_PID=$STARTED_PID
}

# first_https port start-ns log: poll every 10 ms until a GET over HTTPS
# verified against pebble's root succeeds; prints the milliseconds since
# start-ns.
first_https() {
    local port="$1" t0="$2" log="$3"
    until taskset -c "$CLIENT_CPU" curl -sf -o /dev/null --max-time 2 \
        --resolve "$DOMAIN:$port:127.0.0.1" --cacert "$RUN/pebble-root.pem" \
        "https://$DOMAIN:$port/"; do
        if ! kill -0 "$HOARD_PID" 2>/dev/null; then
            tail -n 20 "$log" >&2
            die "hoard exited before its first HTTPS response (see $RUN)"
        fi
        if [ "$(ms_since "$t0")" -gt $((START_TIMEOUT * 1000)) ]; then
            tail -n 20 "$log" >&2
            die "no HTTPS response within ${START_TIMEOUT}s (see $RUN)"
        fi
        sleep 0.01
    done
    ms_since "$t0"
}

# acme_orders: the ACME orders hoard made (the "orders" of /status, summed
# over sites), or n/a.
acme_orders() {
    curl -sf "http://127.0.0.1:$ADMIN_PORT/status" 2>/dev/null \
        | grep -o '"orders": *[0-9]*' | awk -F: '{ n += $2; seen = 1 } END { print seen ? n : "n/a" }'
}

# leaf port [sni]: SHA-256 fingerprint of the certificate presented there.
leaf() {
    local sni=(-noservername)
    [ -z "${2:-}" ] || sni=(-servername "$2")
    openssl s_client -connect "127.0.0.1:$1" "${sni[@]}" </dev/null 2>/dev/null \
        | openssl x509 -noout -fingerprint -sha256 2>/dev/null | cut -d= -f2
}

# ------------------------------------------------------- 1. time to HTTPS ----
declare -A TIMES ORDERS
FINGERPRINTS=""
for run in $(seq "$RUNS"); do
    dir="$RUN/order.$run"
    mkdir -p "$dir"
    t0=$(date +%s%N)
    start_acme_hoard "$dir/cache" "$dir/hoard.log"
    ms=$(first_https "$TLS_PORT" "$t0" "$dir/hoard.log")
    fp=$(leaf "$TLS_PORT" "$DOMAIN")
    [ -n "$fp" ] || die "no certificate presented after the first response"
    case " $FINGERPRINTS " in *" $fp "*) die "run $run presents the certificate of an earlier run" ;; esac
    FINGERPRINTS="$FINGERPRINTS $fp"
    orders=$(acme_orders)
    TIMES[order]="${TIMES[order]:-} $ms"
    ORDERS[order]="${ORDERS[order]:-} $orders"
    log "new certificate, run $run: first HTTPS response after $ms ms ($orders orders)"
    stop_pid "$HOARD_PID"
done
CACHE="$RUN/order.$RUNS/cache"

# The issued certificate and key, copied out of the ACME directory.
cert=$(find "$CACHE" -name cert.pem -print | head -n 1)
[ -n "$cert" ] || die "no cert.pem under $CACHE"
[ -f "$(dirname "$cert")/key.pem" ] || die "no key.pem beside $cert"
mkdir -p "$RUN/files"
cp "$cert" "$RUN/files/cert.pem"
cp "$(dirname "$cert")/key.pem" "$RUN/files/key.pem"
log "certificate stored in ${cert#"$RUN"/}: $(grep -c 'BEGIN CERTIFICATE' "$cert") certificates in the chain"

for run in $(seq "$RUNS"); do
    t0=$(date +%s%N)
    start_acme_hoard "$CACHE" "$RUN/restart.$run.log"
    ms=$(first_https "$TLS_PORT" "$t0" "$RUN/restart.$run.log")
    orders=$(acme_orders)
    [ "$orders" = 0 ] || [ "$orders" = n/a ] || die "a restart with a stored certificate ordered ($orders orders)"
    TIMES[restart]="${TIMES[restart]:-} $ms"
    ORDERS[restart]="${ORDERS[restart]:-} $orders"
    log "stored certificate, restart $run: first HTTPS response after $ms ms"
    stop_pid "$HOARD_PID"
done

for run in $(seq "$RUNS"); do
    dir="$RUN/files.$run"
    mkdir -p "$dir"
    t0=$(date +%s%N)
    start_files_hoard "$dir/cache" "$dir/hoard.log"
    ms=$(first_https "$FILES_PORT" "$t0" "$dir/hoard.log")
    TIMES[files]="${TIMES[files]:-} $ms"
    ORDERS[files]="${ORDERS[files]:-} -"
    log "certificate from files, start $run: first HTTPS response after $ms ms"
    stop_pid "$HOARD_PID"
done

# ------------------------------------------------------- 2. handshakes/s ----
start_acme_hoard "$CACHE" "$RUN/hoard.acme.log"
ACME_PID=$HOARD_PID
start_files_hoard "$RUN/files/cache" "$RUN/hoard.files.log"
FILES_PID=$HOARD_PID
declare -A HPORT=([acme]=$TLS_PORT [files]=$FILES_PORT) HPID=([acme]=$ACME_PID [files]=$FILES_PID)
want=$(openssl x509 -in "$RUN/files/cert.pem" -noout -fingerprint -sha256 | cut -d= -f2)
for m in acme files; do
    HOARD_PID=${HPID[$m]}
    first_https "${HPORT[$m]}" "$(date +%s%N)" "$RUN/hoard.$m.log" >/dev/null
    for sni in "$DOMAIN" ""; do
        got=$(leaf "${HPORT[$m]}" "$sni")
        [ "$got" = "$want" ] || die "$m presents ${got:-nothing} (SNI ${sni:-none}), not the issued certificate $want"
    done
done

forget_pid() { # pid: a process from spawn that has ended and been waited for
    local p rest=()
    for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || rest+=("$p"); done
    PIDS=("${rest[@]}")
}
busy_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
sys_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
cpu_ticks() { awk -v c="cpu$1" '$1 == c { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }

declare -A HS
for run in $(seq "$HS_RUNS"); do
    for m in acme files; do
        pid=${HPID[$m]}
        before=$(busy_ticks "$pid"); cbefore=$(cpu_ticks "$CLIENT_CPU")
        t0=$(date +%s%N)
        cpids=()
        for c in $(seq "$CLIENTS"); do
            spawn "$RUN/s_time.$m.$run.$c" taskset -c "$CLIENT_CPU" openssl s_time \
                -connect "127.0.0.1:${HPORT[$m]}" -new -time "$DURATION"
            cpids+=("$STARTED_PID")
        done
        for c in "${!cpids[@]}"; do
            wait "${cpids[c]}" || die "openssl s_time failed against $m: $(tail -n 3 "$RUN/s_time.$m.$run.$((c + 1))")"
            forget_pid "${cpids[c]}"
        done
        wall_ms=$(ms_since "$t0")
        after=$(busy_ticks "$pid"); cafter=$(cpu_ticks "$CLIENT_CPU")
        n=$(cat "$RUN"/s_time."$m"."$run".* | awk '/connections in .* real seconds/ { n += $1 } END { print n + 0 }')
        [ "$n" -gt 0 ] || die "no handshakes against $m: $(tail -n 3 "$RUN/s_time.$m.$run.1")"
        r=$(awk -v n="$n" -v w="$wall_ms" -v t=$((after - before)) -v ct=$((cafter - cbefore)) -v hz="$CLK_TCK" \
            'BEGIN { printf "%d:%.1f:%d:%d", n / w * 1000, t / hz * 1e6 / n, t / hz * 100000 / w, ct / hz * 100000 / w }')
        HS[$m]="${HS[$m]:-} $r"
        IFS=: read -r rate cpu hcpu ccpu <<<"$r"
        log "handshakes, run $run, $m: $rate/s ($n in $wall_ms ms), hoard $cpu cpu µs each, hoard cpu $hcpu%, client cpu $ccpu%"
    done
done

# ------------------------------------------------------------------ report ----
stats() { # "ms ...": median min max
    tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)], a[1], a[NR] }'
}
median() { tr ' ' '\n' <<<"$1" | grep . | sort -t: -k1,1n | awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }'; }
span() { tr ' ' '\n' <<<"$1" | grep . | cut -d: -f1 | sort -n | awk 'NR == 1 { lo = $0 } { hi = $0 } END { print lo "-" hi }'; }
orders() { tr ' ' '\n' <<<"$1" | grep . | sort -u | paste -sd/ -; }

report_start acme
{
    echo "# Automatic HTTPS over ACME against pebble ($(date -u +%Y-%m-%d))"
    echo
    machine_line
    echo "- $("$HOARD_BIN" --version 2>/dev/null || echo "hoard $git_rev") (built $(hoard_built)), \`--threads 1\` on CPU $HOARD_CPU; pebble $PEBBLE_VERSION (PEBBLE_VA_NOSLEEP=1, PEBBLE_AUTHZREUSE=0), curl and openssl on CPU $CLIENT_CPU"
    echo "- time to first HTTPS response: from spawning hoard until curl (every 10 ms; verifying against pebble's root, SNI $DOMAIN) gets a 200 over HTTPS; $RUNS starts per row"
    echo
    echo "| start | first HTTPS response, median | min | max | ACME orders |"
    echo "|---|---|---|---|---|"
    for k in order restart files; do
        case $k in
            order) what="empty cache dir: new account, order, HTTP-01, certificate" ;;
            restart) what="restart with the stored ACME certificate" ;;
            files) what="same certificate from files (\`--tls-cert/--tls-key\`)" ;;
        esac
        read -r med lo hi <<<"$(stats "${TIMES[$k]}")"
        echo "| $what | $med ms | $lo ms | $hi ms | $(orders "${ORDERS[$k]}") |"
    done
    echo
    echo "- handshakes: \`openssl s_time -new\` x $CLIENTS on CPU $CLIENT_CPU, ${DURATION}s per run (full handshakes, no session resumption, no request, no SNI); same hoard flags and certificate chain; $HS_RUNS runs per row, interleaved, median shown"
    echo
    echo "| certificate | handshakes/s | range | hoard cpu µs/handshake | hoard cpu | client cpu |"
    echo "|---|---|---|---|---|---|"
    for m in acme files; do
        IFS=: read -r rate cpu hcpu ccpu <<<"$(median "${HS[$m]}")"
        case $m in acme) what="ACME (stored, via the ACME resolver)" ;; files) what="files (\`--tls-cert/--tls-key\`)" ;; esac
        echo "| $what | $rate | $(span "${HS[$m]}") | $cpu | $hcpu% | $ccpu% |"
    done
    a=$(median "${HS[acme]}"); f=$(median "${HS[files]}")
    awk -v ar="${a%%:*}" -v fr="${f%%:*}" -v ac="$(cut -d: -f2 <<<"$a")" -v fc="$(cut -d: -f2 <<<"$f")" \
        'BEGIN { printf "| **ACME/files** | **%.2fx** | | %.2fx | | |\n", ar / fr, ac / fc }'
} >"$REPORT"
report_done
