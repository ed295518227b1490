-- wrk script for bench/ops.sh: GET /obj/0 .. /obj/N-1 until each has been
-- answered once, then write the file MARK and stop the thread.
--
--   wrk -t1 -c64 -d600s -s bench/ops_fill.lua http://127.0.0.1:PORT/ -- N MARK
--
-- The origin's body of /obj/<i> starts with "/obj/<i>", so the script counts
-- the distinct objects answered rather than assuming that every request sent
-- early has completed.  After /obj/N-1 it starts again at /obj/0 (cache hits)
-- until the last stragglers are in.  wrk keeps running after its thread has
-- stopped: the caller ends it with SIGINT once MARK exists, and it prints
--   FILL got=<responses> distinct=<objects> bad=<non-200> errors=<socket errors>

local n, limit, mark = 0, 0, nil
local seen = {}
local threads = {}
got, bad, distinct = 0, 0, 0

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  limit = tonumber(args[1]) or 0
  mark = args[2]
  if limit < 1 or not mark then
    error("usage: -- N MARK")
  end
end

function request()
  local i = n % limit
  n = n + 1
  return wrk.format("GET", "/obj/" .. i)
end

function response(status, headers, body)
  got = got + 1
  if status ~= 200 then
    bad = bad + 1
    return
  end
  local i = tonumber(string.match(body, "^/obj/(%d+)"))
  if i and not seen[i] then
    seen[i] = true
    distinct = distinct + 1
    if distinct == limit then
      local f = io.open(mark, "w")
      f:write("done\n")
      f:close()
      wrk.thread:stop()
    end
  end
end

function done(summary, latency, requests)
  local g, b, d = 0, 0, 0
  for _, t in ipairs(threads) do
    g = g + t:get("got")
    b = b + t:get("bad")
    d = d + t:get("distinct")
  end
  local e = summary.errors
  io.write(string.format("FILL got=%d distinct=%d bad=%d errors=%d\n",
    g, d, b, e.connect + e.read + e.write + e.timeout))
end
