#!/usr/bin/env bash
# ESI: pages assembled from three fragments, hoard against Varnish's ESI.
#
# 1. Cold: a page whose three fragments each take 300 ms at the origin,
#    never requested before (a new id per try): time to the first byte and
#    to the last (curl), median of TRIES. Varnish fetches includes one after
#    another; hoard starts them all at once and streams the page in order.
# 2. Hot: the same page with every part cached, under wrk (1 thread,
#    CONNS connections, DURATION s) against the proxy pinned to one CPU:
#    requests per second and the proxy's CPU time per request, against a
#    plain cached page of the same size on the same proxy (the issue's
#    budget: an assembled hit costs at most 2x a plain hit).
set -euo pipefail
BENCH_NAME=esi
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
DURATION=${DURATION:-5}
CONNS=${CONNS:-16}
TRIES=${TRIES:-5}
KEEP=${KEEP:-0}
DELAY_MS=${DELAY_MS:-300}
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"

ensure_tools varnishd:varnish wrk:wrk curl:curl
start_run esi
NEXT_PORT=${BASE_PORT:-18380}
free_port ORIGIN; free_port HOARD; free_port VARNISH
build_hoard
NCPU=$(nproc)
PROXY_CPU=0; LOAD_CPU=$((NCPU > 1 ? 1 : 0))

spawn "$RUN/origin.log" python3 "$BENCH_DIR/esi_origin.py" --port "$ORIGIN"
wait_port "$ORIGIN" origin "$STARTED_PID" "$RUN/origin.log"

cat > "$RUN/hoard.toml" <<TOML
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
esi = true
encodings = []
TOML
"$HOARD_BIN" check --config "$RUN/hoard.toml" >/dev/null || die "hoard rejects $RUN/hoard.toml"
spawn "$RUN/hoard.log" taskset -c "$PROXY_CPU" "$HOARD_BIN" run --config "$RUN/hoard.toml"
HOARD_PID=$STARTED_PID
wait_port "$HOARD" hoard "$HOARD_PID" "$RUN/hoard.log"

mkdir -p "$RUN/varnish"
cat > "$RUN/varnish.vcl" <<VCL
vcl 4.1;
backend default { .host = "127.0.0.1"; .port = "$ORIGIN"; }
sub vcl_backend_response {
    if (bereq.url ~ "^/page/") { set beresp.do_esi = true; }
}
VCL
spawn "$RUN/varnish.log" taskset -c "$PROXY_CPU" varnishd -F -n "$RUN/varnish/work" \
    -a "127.0.0.1:$VARNISH" -f "$RUN/varnish.vcl" -s malloc,256m
VARNISH_PID=$STARTED_PID
wait_port "$VARNISH" varnish "$VARNISH_PID" "$RUN/varnish.log"

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# cold NAME PORT: sets COLD_FIRST, COLD_TOTAL (ms, medians) and checks the page.
cold() {
    local name=$1 port=$2 i first=() total=() out
    for i in $(seq "$TRIES"); do
        out=$(curl -s -o "$RUN/$name-cold.html" -w '%{time_starttransfer} %{time_total}' \
            "http://127.0.0.1:$port/page/$DELAY_MS/$name-cold-$i-$$")
        grep -q "<footer>end</footer>" "$RUN/$name-cold.html" || die "$name: incomplete cold page"
        ! grep -q "<esi:include" "$RUN/$name-cold.html" || die "$name: cold page not assembled"
        first+=("$(awk '{printf "%.0f", $1 * 1000}' <<<"$out")")
        total+=("$(awk '{printf "%.0f", $2 * 1000}' <<<"$out")")
    done
    COLD_FIRST=$(printf '%s\n' "${first[@]}" | median)
    COLD_TOTAL=$(printf '%s\n' "${total[@]}" | median)
}

# CPU ticks of a process and its children (varnishd's worker is its child).
cpu_ticks() {
    local p sum=0
    for p in $1 $(pgrep -P "$1" || true); do
        sum=$((sum + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    echo "$sum"
}

# hot NAME PORT PID PATH: sets HOT_RPS and HOT_US (proxy CPU µs per request).
hot() {
    local name=$1 port=$2 pid=$3 path=$4 t0 t1 reqs
    curl -s -o /dev/null "http://127.0.0.1:$port$path"
    curl -s -o /dev/null "http://127.0.0.1:$port$path"
    t0=$(cpu_ticks "$pid")
    reqs=$(taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" "http://127.0.0.1:$port$path" \
        | awk '/requests in/ {print $1}')
    t1=$(cpu_ticks "$pid")
    HOT_RPS=$((reqs / DURATION))
    HOT_US=$(awk -v t="$((t1 - t0))" -v r="$reqs" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", t / hz * 1e6 / r}')
}

cold hoard "$HOARD"; h_first=$COLD_FIRST; h_total=$COLD_TOTAL
cold varnish "$VARNISH"; v_first=$COLD_FIRST; v_total=$COLD_TOTAL

curl -s -o "$RUN/hot.html" "http://127.0.0.1:$HOARD/page/0/hot"
SIZE=$(stat -c %s "$RUN/hot.html")
# hoard's page: the three fragments in place.
! grep -q "<esi:include" "$RUN/hot.html" || die "hoard: hot page not assembled"
curl -s "http://127.0.0.1:$VARNISH/page/0/hot" | grep -q "<esi:include" && die "varnish: hot page not assembled"
hot hoard-esi "$HOARD" "$HOARD_PID" /page/0/hot; he_rps=$HOT_RPS; he_us=$HOT_US
hot hoard-plain "$HOARD" "$HOARD_PID" "/plain/$SIZE"; hp_rps=$HOT_RPS; hp_us=$HOT_US
hot varnish-esi "$VARNISH" "$VARNISH_PID" /page/0/hot; ve_rps=$HOT_RPS; ve_us=$HOT_US
hot varnish-plain "$VARNISH" "$VARNISH_PID" "/plain/$SIZE"; vp_rps=$HOT_RPS; vp_us=$HOT_US

report_start esi
{
    echo "# ESI: pages of three fragments"
    echo
    machine_line
    echo "- hoard built $(hoard_built); $(varnishd -V 2>&1 | head -n1)"
    echo "- proxies on CPU $PROXY_CPU, wrk on CPU $LOAD_CPU; cold: median of $TRIES new pages, fragments ${DELAY_MS} ms each; hot: wrk -t1 -c$CONNS -d${DURATION}s, page of $SIZE bytes"
    echo
    echo "| cold page (3 x ${DELAY_MS} ms fragments) | first byte ms | last byte ms |"
    echo "|---|---:|---:|"
    echo "| hoard | $h_first | $h_total |"
    echo "| varnish | $v_first | $v_total |"
    echo
    echo "| hot, every part cached | requests/s | proxy CPU µs/request |"
    echo "|---|---:|---:|"
    echo "| hoard, assembled page | $he_rps | $he_us |"
    echo "| hoard, plain page of the same size | $hp_rps | $hp_us |"
    echo "| varnish, assembled page | $ve_rps | $ve_us |"
    echo "| varnish, plain page of the same size | $vp_rps | $vp_us |"
    echo
    echo "- **hoard assembled/plain CPU per request: $(awk -v a="$he_us" -v b="$hp_us" 'BEGIN {printf "%.2fx", a / b}')** (budget 2x)"
    echo "- **cold page, hoard/varnish last byte: $(awk -v a="$h_total" -v b="$v_total" 'BEGIN {printf "%.2fx", a / b}')**; hoard's first byte before its fragments finish: $( [ "$h_first" -lt "$DELAY_MS" ] && echo yes || echo no)"
    echo "- **hot assembled page, hoard/varnish CPU per request: $(awk -v a="$he_us" -v b="$ve_us" 'BEGIN {printf "%.2fx", a / b}')**"
} > "$REPORT"
report_done
