#!/usr/bin/env bash
# A hoard cluster on loopback: origin requests per object (against three
# independent hoards, nginx's two-tier consistent hash and Varnish's shard
# director), purge fan-out latency, a member killed under load, and a hot key
# through a non-owner (forwarded hit vs. local hit, with and without the
# near-cache), and purges through the Redis invalidation log (--cluster-bus)
# against the HTTP fan-out. See bench/README.md.
#
# Environment knobs (all optional):
#   OBJECTS=200 REQUESTS=2000   objects and requests of the spread test
#   PURGES=300                  purges timed per cluster size
#   LOAD_SECONDS=6              the kill test's length (the kill at a third)
#   HOT_SECONDS=5               each hot-key run (wrk -t1 -c16)
#   ANCHORS="nginx varnish"     which anchors run the spread test
#   JOIN_OBJECTS=400            objects held when a fourth node joins
#   HOARD_BIN, SKIP_BUILD=1, KEEP=1, BASE_PORT=18800
set -euo pipefail

BENCH_NAME=cluster
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OBJECTS="${OBJECTS:-200}"
REQUESTS="${REQUESTS:-2000}"
PURGES="${PURGES:-300}"
LOAD_SECONDS="${LOAD_SECONDS:-6}"
HOT_SECONDS="${HOT_SECONDS:-5}"
ANCHORS="${ANCHORS:-nginx varnish}"
KEEP="${KEEP:-0}"
SKIP_BUILD="${SKIP_BUILD:-0}"
HOARD_BIN="${HOARD_BIN:-$ROOT/target/release/hoard}"
NEXT_PORT="${BASE_PORT:-18800}"
require_whole OBJECTS
require_whole REQUESTS
require_whole PURGES
require_positive OBJECTS REQUESTS PURGES LOAD_SECONDS

wanted=(curl:curl python3:python3 wrk:wrk redis-server:redis-server)
! has "$ANCHORS" nginx || wanted+=(nginx:nginx-light)
! has "$ANCHORS" varnish || wanted+=(varnishd:varnish)
ensure_tools "${wanted[@]}"
raise_nofile
NCPU="$(nproc)"
build_hoard
start_run cluster
TAG="$(date +%s)"

free_port ORIGIN_PORT
spawn "$RUN/origin.log" python3 "$BENCH_DIR/fill_origin.py" --port "$ORIGIN_PORT" --body-size 4096 --etag
wait_port "$ORIGIN_PORT" origin "$STARTED_PID" "$RUN/origin.log"
count() { curl -sS "http://127.0.0.1:$ORIGIN_PORT/__count?prefix=$1"; }
stat_of() { curl -sS "http://$1/status" | python3 -c "import json,sys; s=json.load(sys.stdin); print(eval(sys.argv[1]))" "$2"; }

# start_nodes NAME N [cluster]: N hoards; sets NODES (host:port list),
# ADMIN1 (the first one's admin) and NODE_PIDS.
start_nodes() {
    local name="$1" n="$2" clustered="${3:-}" i peers="" ports=() admins=() p a
    for i in $(seq "$n"); do free_port p; ports+=("$p"); free_port a; admins+=("$a"); done
    for i in $(seq "$n"); do peers+="${peers:+,}n$i=127.0.0.1:${ports[i-1]}"; done
    NODES=""; NODE_PIDS=()
    for i in $(seq "$n"); do
        local args=(--upstream "http://127.0.0.1:$ORIGIN_PORT" --listen "127.0.0.1:${ports[i-1]}"
            --admin "127.0.0.1:${admins[i-1]}" --threads 1)
        [ -z "$clustered" ] || args+=(--cluster-node "n$i" --cluster-peers "$peers")
        [ -z "$clustered" ] || [ -z "${BUS_URL:-}" ] || args+=(--cluster-bus "$BUS_URL")
        spawn "$RUN/$name-n$i.log" "$HOARD_BIN" "${args[@]}"
        NODE_PIDS+=("$STARTED_PID")
        wait_port "${ports[i-1]}" "$name-n$i" "$STARTED_PID" "$RUN/$name-n$i.log"
        NODES+="${NODES:+,}127.0.0.1:${ports[i-1]}"
    done
    ADMIN1="127.0.0.1:${admins[0]}"
}
stop_nodes() { local p; for p in "${NODE_PIDS[@]}"; do stop_pid "$p"; done; }

# start_nginx_two_tier: nginx's answer to a cluster, as its users build it:
# an edge tier that any request may reach (three listeners) hashing
# $request_uri consistently over three caches (proxy_cache, proxy_cache_lock
# on: its best setting for collapsing misses). One nginx, sets NODES and
# NODE_PIDS.
start_nginx_two_tier() {
    local edges=() caches=() p i
    for i in 1 2 3; do free_port p; edges+=("$p"); free_port p; caches+=("$p"); done
    {
        nginx_common ngx2
        echo "http {"
        echo "    access_log off;"
        nginx_temp_paths ngx2
        for i in 1 2 3; do
            mkdir -p "$RUN/ngx2/c$i"
            echo "    proxy_cache_path $RUN/ngx2/c$i levels=1:2 keys_zone=c$i:8m max_size=256m inactive=1h use_temp_path=off;"
        done
        echo "    upstream origin { server 127.0.0.1:$ORIGIN_PORT; keepalive 32; }"
        echo "    upstream caches {"
        echo "        hash \$request_uri consistent;"
        for i in 1 2 3; do echo "        server 127.0.0.1:${caches[i-1]};"; done
        echo "        keepalive 32;"
        echo "    }"
        echo "    server {"
        for i in 1 2 3; do echo "        listen 127.0.0.1:${edges[i-1]};"; done
        echo "        location / { proxy_pass http://caches; proxy_http_version 1.1; proxy_set_header Connection \"\"; }"
        echo "    }"
        for i in 1 2 3; do
            echo "    server {"
            echo "        listen 127.0.0.1:${caches[i-1]};"
            echo "        location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection \"\";"
            echo "            proxy_cache c$i; proxy_cache_lock on; proxy_cache_lock_timeout 30s; }"
            echo "    }"
        done
        echo "}"
    } >"$RUN/ngx2.conf"
    start_nginx ngx2
    NODE_PIDS=("$STARTED_PID")
    NODES=""
    for i in 1 2 3; do
        wait_port "${edges[i-1]}" ngx2 "$STARTED_PID" "$RUN/ngx2/error.log"
        NODES+="${NODES:+,}127.0.0.1:${edges[i-1]}"
    done
}

# start_varnish_shard: three varnishd, each self-routing with the shard
# director by URL (as kube-httpcache sets it up): a request whose shard is
# another member goes there (marked, so that member fills it from the
# origin), its own shard goes to the origin. Sets NODES and NODE_PIDS.
start_varnish_shard() {
    local ports=() p i j
    for i in 1 2 3; do free_port p; ports+=("$p"); done
    NODES=""; NODE_PIDS=()
    for i in 1 2 3; do
        local d="$RUN/vsh$i"
        mkdir -p "$d"
        {
            echo "vcl 4.1;"
            echo "import directors;"
            echo "backend origin { .host = \"127.0.0.1\"; .port = \"$ORIGIN_PORT\"; }"
            for j in 1 2 3; do echo "backend v$j { .host = \"127.0.0.1\"; .port = \"${ports[j-1]}\"; }"; done
            echo "sub vcl_init {"
            echo "    new shard = directors.shard();"
            for j in 1 2 3; do echo "    shard.add_backend(v$j);"; done
            echo "    shard.reconfigure();"
            echo "}"
            echo "sub vcl_recv {"
            echo "    if (req.http.X-Shard-Hop) {"
            echo "        set req.backend_hint = origin;"
            echo "    } else {"
            echo "        set req.backend_hint = shard.backend(by=URL);"
            echo "        if (req.backend_hint == v$i) {"
            echo "            set req.backend_hint = origin;"
            echo "        } else {"
            echo "            set req.http.X-Shard-Hop = \"v$i\";"
            echo "        }"
            echo "    }"
            echo "}"
        } >"$d.vcl"
        spawn "$d/stdout.log" varnishd -F -n "$d/work" -a "127.0.0.1:${ports[i-1]}" -f "$d.vcl" -s malloc,64m
        NODE_PIDS+=("$STARTED_PID")
    done
    for i in 1 2 3; do
        wait_port "${ports[i-1]}" "varnish-$i" "${NODE_PIDS[i-1]}" "$RUN/vsh$i/stdout.log"
        NODES+="${NODES:+,}127.0.0.1:${ports[i-1]}"
    done
}
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }

declare -A R
# ------------------------------------------- 1. origin requests per object ----
kinds="cluster independent"
! has "$ANCHORS" nginx || kinds+=" nginx-2tier"
! has "$ANCHORS" varnish || kinds+=" varnish-shard"
for kind in $kinds; do
    case "$kind" in
        nginx-2tier) start_nginx_two_tier ;;
        varnish-shard) start_varnish_shard ;;
        *) start_nodes "$kind" 3 "$([ "$kind" = cluster ] && echo yes)" ;;
    esac
    prefix="/cold/0/$kind-$TAG-"
    out="$(python3 "$BENCH_DIR/cluster_client.py" spread "$NODES" "$OBJECTS" "$REQUESTS" "$prefix")"
    log "$kind: $out"
    [ "$(field bad "$out")" = 0 ] || die "$kind: failed requests: $out"
    R[$kind]="$(awk -v o="$(count "$prefix")" -v n="$OBJECTS" 'BEGIN { printf "%.2f", o / n }')"
    if [ "$kind" = cluster ]; then
        # ----------------------------------------- 2. purge fan-out, 3 nodes ----
        out="$(python3 "$BENCH_DIR/cluster_client.py" purge "$ADMIN1" "$PURGES")"
        log "purge, 3 nodes: $out"
        R[p3]="$out"
        # ------------------------------------ 3. a member killed under load ----
        prefix="/cold/0/kill-$TAG-"
        live="$(cut -d, -f1,3 <<<"$NODES")"
        python3 "$BENCH_DIR/cluster_client.py" load "$live" "$LOAD_SECONDS" "$prefix" >"$RUN/load.out" &
        loader=$!
        sleep "$(awk -v s="$LOAD_SECONDS" 'BEGIN { print s / 3 }')"
        kill -KILL "${NODE_PIDS[1]}"
        wait "$loader"
        out="$(cat "$RUN/load.out")"
        log "kill: $out"
        R[kill]="$out"
        R[kill_origin]="$(count "$prefix")"
    fi
    stop_nodes
done
start_nodes five 5 yes
out="$(python3 "$BENCH_DIR/cluster_client.py" purge "$ADMIN1" "$PURGES")"
log "purge, 5 nodes: $out"
R[p5]="$out"
stop_nodes

# ------------------------------- 2b. purges through the Redis log ----
free_port REDIS_PORT
mkdir -p "$RUN/redis"
spawn "$RUN/redis/stdout.log" redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$RUN/redis" \
    --save "" --appendonly yes
REDIS_PID="$STARTED_PID"
wait_port "$REDIS_PORT" redis "$REDIS_PID" "$RUN/redis/stdout.log"
BUS_URL="redis://127.0.0.1:$REDIS_PORT/0"
for n in 3 5; do
    start_nodes "bus$n" "$n" yes
    # Every member's position is known to the first node.
    for _ in $(seq 100); do
        known="$(curl -sS "http://$ADMIN1/status" | python3 -c 'import json,sys; print(len((json.load(sys.stdin)["cluster"]["bus"] or {}).get("positions", {})))')"
        [ "$known" -ge "$n" ] && break
        sleep 0.1
    done
    [ "$known" -ge "$n" ] || die "the members' log positions did not reach the first node"
    out="$(python3 "$BENCH_DIR/cluster_client.py" purge "$ADMIN1" "$PURGES")"
    log "purge through the log, $n nodes: $out"
    R[b$n]="$out"
    if [ "$n" = 3 ]; then
        # ---------------- 2c. Redis gone for 10 s under a load of hits ----
        prefix="/cold/0/busloss-$TAG-"
        python3 "$BENCH_DIR/cluster_client.py" spread "$NODES" 50 500 "$prefix" >/dev/null
        before="$(count "$prefix")"
        python3 "$BENCH_DIR/cluster_client.py" hits "$NODES" 16 "$prefix" 50 >"$RUN/busloss.out" &
        loader=$!
        sleep 2
        stop_pid "$REDIS_PID"
        log "redis stopped"
        sleep 10
        spawn "$RUN/redis/stdout2.log" redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$RUN/redis" \
            --save "" --appendonly yes
        REDIS_PID="$STARTED_PID"
        wait_port "$REDIS_PORT" redis "$REDIS_PID" "$RUN/redis/stdout2.log"
        log "redis back"
        wait "$loader"
        R[busloss]="$(cat "$RUN/busloss.out")"
        R[busloss_origin]="$(( $(count "$prefix") - before ))"
        log "bus loss: ${R[busloss]}, origin requests meanwhile ${R[busloss_origin]}"
    fi
    stop_nodes
done

# ------------------ 2d. a fourth node joins a warm cluster under load ----
# Members from heartbeats on the bus (--cluster-advertise): three nodes hold
# JOIN_OBJECTS objects, a load of hits runs on them, a fourth node starts
# and joins; then every object is asked once more through the new node.
# The keys that moved to it are counted on it (answered by their previous
# owner during its ramp-up, or fetched), and the origin requests the join
# caused are counted at the origin. Twice: ramp-up on (the default for a
# discovered member list) and off (--cluster-rampup 0s, what a plain
# consistent-hash cluster does).
start_member() { # I RAMPUP
    local i="$1" rampup="$2" p a
    free_port p; free_port a
    spawn "$RUN/join-$rampup-n$i.log" "$HOARD_BIN" --upstream "http://127.0.0.1:$ORIGIN_PORT" \
        --listen "127.0.0.1:$p" --admin "127.0.0.1:$a" --threads 1 --cluster-node "n$i" \
        --cluster-bus "$BUS_URL" --cluster-advertise "127.0.0.1:$p" --cluster-rampup "$rampup"
    NODE_PIDS+=("$STARTED_PID")
    wait_port "$p" "join-n$i" "$STARTED_PID" "$RUN/join-$rampup-n$i.log"
    NODES+="${NODES:+,}127.0.0.1:$p"
    JOIN_ADMINS+=("127.0.0.1:$a")
}
wait_members() { # N ADMIN...: until each routes to N members
    local n="$1" a k seen; shift
    for a in "$@"; do
        for k in $(seq 200); do
            seen="$(stat_of "$a" "len(s['cluster']['members'])")"
            [ "$seen" -ge "$n" ] && break
            sleep 0.05
        done
        [ "$seen" -ge "$n" ] || die "$a routes to $seen members, not $n"
    done
}
JOIN_OBJECTS="${JOIN_OBJECTS:-400}"
for rampup in 60s 0s; do
    redis-cli -p "$REDIS_PORT" DEL hoard:members >/dev/null
    NODES=""; NODE_PIDS=(); JOIN_ADMINS=()
    for i in 1 2 3; do start_member "$i" "$rampup"; done
    wait_members 3 "${JOIN_ADMINS[@]}"
    prefix="/cold/0/join-$rampup-$TAG-"
    python3 "$BENCH_DIR/cluster_client.py" spread "$NODES" "$JOIN_OBJECTS" "$JOIN_OBJECTS" "$prefix" >/dev/null
    warm="$(count "$prefix")"
    python3 "$BENCH_DIR/cluster_client.py" hits "$NODES" 8 "$prefix" "$JOIN_OBJECTS" >"$RUN/join-$rampup.out" &
    loader=$!
    sleep 2
    start_member 4 "$rampup"
    wait_members 4 "${JOIN_ADMINS[@]}"
    wait "$loader"
    python3 "$BENCH_DIR/cluster_client.py" spread "${NODES##*,}" "$JOIN_OBJECTS" "$JOIN_OBJECTS" "$prefix" >/dev/null
    R[join_caused_$rampup]="$(( $(count "$prefix") - warm ))"
    R[join_moved_$rampup]="$(stat_of "${JOIN_ADMINS[3]}" "s['cluster']['rampup_hits'] + s['cluster']['owner_fills']")"
    R[join_hits_$rampup]="$(stat_of "${JOIN_ADMINS[3]}" "s['cluster']['rampup_hits']")"
    R[join_misses_$rampup]="$(stat_of "${JOIN_ADMINS[3]}" "s['cluster']['rampup_misses']")"
    R[join_load_$rampup]="$(cat "$RUN/join-$rampup.out")"
    log "join, rampup $rampup: warm $warm, origin requests caused ${R[join_caused_$rampup]}, keys moved ${R[join_moved_$rampup]}, from previous owners ${R[join_hits_$rampup]} (not held there: ${R[join_misses_$rampup]}), load ${R[join_load_$rampup]}"
    stop_nodes
done
BUS_URL=""

# ------------------------------ 4. a hot key: local, forwarded, near hits ----
wrk_report_lua "$RUN/report.lua"
# wrk_on NODE PATH: one run; prints its BENCH line.
wrk_on() { # NODE PATH [connections]
    local out
    out="$(wrk -t1 -c"${3:-16}" -d"${HOT_SECONDS}s" -H "Host: localhost" -s "$RUN/report.lua" "http://$1$2" | grep '^BENCH')"
    [ "$(field status "$out")" = 0 ] && [ "$(field read "$out")" = 0 ] || die "errors from $1$2: $out"
    echo "$out"
}
ms() { awk -v u="$(field "$2" "$1")" 'BEGIN { printf "%.2f", u / 1000 }'; }
rps() { awk -v r="$(field requests "$1")" -v d="$(field duration_us "$1")" 'BEGIN { printf "%.0f", r / (d / 1e6) }'; }
for near in default 0; do
    extra=()
    [ "$near" = default ] || extra=(--cluster-near-size "$near")
    # start_nodes with the near size: its args are rebuilt here.
    ports=(); admins=(); peers=""
    for i in 1 2 3; do free_port p; ports+=("$p"); free_port a; admins+=("$a"); done
    for i in 1 2 3; do peers+="${peers:+,}n$i=127.0.0.1:${ports[i-1]}"; done
    NODE_PIDS=()
    for i in 1 2 3; do
        spawn "$RUN/hot$near-n$i.log" "$HOARD_BIN" --upstream "http://127.0.0.1:$ORIGIN_PORT" \
            --listen "127.0.0.1:${ports[i-1]}" --admin "127.0.0.1:${admins[i-1]}" --threads 1 \
            --cluster-node "n$i" --cluster-peers "$peers" "${extra[@]}"
        NODE_PIDS+=("$STARTED_PID")
        wait_port "${ports[i-1]}" "hot-n$i" "$STARTED_PID" "$RUN/hot$near-n$i.log"
    done
    path="/cold/0/hot-$TAG-$near"
    owner="$(curl -sS -D - -o /dev/null -H 'Host: localhost' "http://127.0.0.1:${ports[0]}$path" \
        | sed -n 's/^cache-status: *hoard-n\([0-9]\).*/\1/Ip' | head -n1)"
    [ -n "$owner" ] || die "no owner named in Cache-Status for $path"
    other=$(( owner % 3 + 1 ))
    own="127.0.0.1:${ports[owner-1]}"; fwd="127.0.0.1:${ports[other-1]}"
    own_admin="127.0.0.1:${admins[owner-1]}"; fwd_admin="127.0.0.1:${admins[other-1]}"
    curl -sS -o /dev/null -H 'Host: localhost' "http://$own$path"
    # Two rounds, the local and the non-owner run interleaved, the best of
    # each kept: three single-threaded hoards and wrk on two CPUs vary by
    # ±15 % from run to run.
    before="$(stat_of "$own_admin" "s['cluster']['peer_requests']")"
    for round in 1 2; do
        if [ "$near" = default ]; then
            out="$(wrk_on "$own" "$path")"; log "local hit on the owner: $out"
            [ -n "${R[local]:-}" ] && [ "$(rps "$out")" -le "$(rps "${R[local]}")" ] || R[local]="$out"
        fi
        out="$(wrk_on "$fwd" "$path")"; log "hot key through a non-owner (near $near): $out"
        [ -n "${R[hot_$near]:-}" ] && [ "$(rps "$out")" -le "$(rps "${R[hot_$near]}")" ] || R[hot_$near]="$out"
    done
    after="$(stat_of "$own_admin" "s['cluster']['peer_requests']")"
    if [ "$near" = 0 ]; then
        # One connection: what a hop adds to one request, without queueing.
        R[one_local]="$(wrk_on "$own" "$path" 1)"; log "local hit, one connection: ${R[one_local]}"
        R[one_fwd]="$(wrk_on "$fwd" "$path" 1)"; log "forwarded hit, one connection: ${R[one_fwd]}"
    fi
    R[hot_owner_$near]="$(( after - before ))"
    R[hot_near_bytes_$near]="$(stat_of "$fwd_admin" "(s['cluster']['near'] or {}).get('bytes', 0)")"
    stop_nodes
done

report_start cluster
{
    echo "# hoard cluster on loopback ($(date -u +%Y-%m-%d))"
    echo
    machine_line
    echo "- hoard $git_rev, every node --threads 1 --admin; origin fill_origin.py (4 KiB bodies, max-age=3600, strong ETags and Range)"
    echo
    echo "| measure | value |"
    echo "|---|---|"
    echo "| origin requests per object, 3 nodes, $REQUESTS requests over $OBJECTS objects, random node each | **${R[cluster]}** (target 1.00) |"
    echo "| the same through 3 independent hoards | ${R[independent]} |"
    ! has "$ANCHORS" nginx || echo "| the same through nginx two-tier (3 edge listeners, \`hash \$request_uri consistent\` over 3 \`proxy_cache\` + \`proxy_cache_lock\`) | ${R[nginx-2tier]} |"
    ! has "$ANCHORS" varnish || echo "| the same through 3 Varnish with the \`shard\` director self-routing by URL | ${R[varnish-shard]} |"
    echo "| purge to all-acked, 3 nodes (p50 / p99 / max ms, all acked) | $(field p50_ms "${R[p3]}") / $(field p99_ms "${R[p3]}") / $(field max_ms "${R[p3]}"), $(field all_acked "${R[p3]}") of $PURGES |"
    echo "| purge to all-acked, 5 nodes | $(field p50_ms "${R[p5]}") / $(field p99_ms "${R[p5]}") / $(field max_ms "${R[p5]}"), $(field all_acked "${R[p5]}") of $PURGES |"
    echo "| purge to all-acked through the Redis log (redis-server $(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p'), appendonly), 3 nodes | $(field p50_ms "${R[b3]}") / $(field p99_ms "${R[b3]}") / $(field max_ms "${R[b3]}"), $(field all_acked "${R[b3]}") of $PURGES |"
    echo "| the same, 5 nodes | $(field p50_ms "${R[b5]}") / $(field p99_ms "${R[b5]}") / $(field max_ms "${R[b5]}"), $(field all_acked "${R[b5]}") of $PURGES |"
    echo "| Redis stopped for 10 s during 16 s of hits on 50 objects over 3 nodes (bus on, grace 5 s): requests ok / failed, served as hits | $(field ok "${R[busloss]}") / **$(field bad "${R[busloss]}")** (target 0), $(field hit "${R[busloss]}") hits |"
    echo "| the same: origin requests meanwhile (revalidations while a node was not caught up) | ${R[busloss_origin]} |"
    for r in 60s 0s; do
        echo "| a 4th node joins 3 holding $JOIN_OBJECTS objects under hits (members from Redis heartbeats, ramp-up $r): origin requests the join caused / keys that moved to it (answered by their previous owner) | **${R[join_caused_$r]}** / ${R[join_moved_$r]} ($(awk -v c="${R[join_caused_$r]}" -v m="${R[join_moved_$r]}" 'BEGIN { printf "%.1f%%", m ? 100 * c / m : 0 }'); ${R[join_hits_$r]} from previous owners); hits during the join ok / failed $(field ok "${R[join_load_$r]}") / $(field bad "${R[join_load_$r]}") |"
    done
    echo "| member killed (SIGKILL) a third into ${LOAD_SECONDS} s of misses on the two others: requests ok / failed | $(field ok "${R[kill]}") / **$(field bad "${R[kill]}")** (target 0) |"
    echo "| the same: origin requests for those unique URLs (ok requests) | ${R[kill_origin]} ($(field ok "${R[kill]}")) |"
    echo
    echo "A hot key (4 KiB), wrk -t1 -c16 for ${HOT_SECONDS} s, best of two interleaved runs, every node --threads 1 (three hoards and wrk share $NCPU CPUs); the owner's count covers both runs:"
    echo
    echo "| hot key | req/s | p50 / p99 ms | requests the owner answered for it | near tier bytes on the non-owner |"
    echo "|---|---|---|---|---|"
    echo "| local hit (on the owner) | $(rps "${R[local]}") | $(ms "${R[local]}" p50_us) / $(ms "${R[local]}" p99_us) | | |"
    echo "| forwarded hit (non-owner, near-cache off) | $(rps "${R[hot_0]}") ($(awk -v a="$(rps "${R[hot_0]}")" -v b="$(rps "${R[local]}")" 'BEGIN { printf "%.2fx", a / b }')) | $(ms "${R[hot_0]}" p50_us) / $(ms "${R[hot_0]}" p99_us) | ${R[hot_owner_0]} | ${R[hot_near_bytes_0]} |"
    echo "| near hit (non-owner, near-cache on) | $(rps "${R[hot_default]}") ($(awk -v a="$(rps "${R[hot_default]}")" -v b="$(rps "${R[local]}")" 'BEGIN { printf "%.2fx", a / b }')) | $(ms "${R[hot_default]}" p50_us) / $(ms "${R[hot_default]}" p99_us) | ${R[hot_owner_default]} | ${R[hot_near_bytes_default]} |"
    echo
    echo "One connection (wrk -t1 -c1), near-cache off: a local hit p50 $(ms "${R[one_local]}" p50_us) ms ($(rps "${R[one_local]}") req/s), a forwarded hit p50 $(ms "${R[one_fwd]}" p50_us) ms ($(rps "${R[one_fwd]}") req/s): the hop adds $(awk -v a="$(field p50_us "${R[one_fwd]}")" -v b="$(field p50_us "${R[one_local]}")" 'BEGIN { printf "%.0f", a - b }') µs."
} >"$REPORT"
report_done
