-- wrk script for Scripts/bench-http: counts answers by status and prints percentiles.
-- With the argument "post KEY RUN" each request posts a unique account.verify command (its own
-- user and idempotency id, from a per-thread counter); with "get" it repeats the given URL.
local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  mode = args[1] or "get"
  key = args[2] or ""
  run = args[3] or "run"
  counter = 0
  ok = 0
  other = 0
  if mode == "post" then
    headers = {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. key}
  end
end

function request()
  if mode ~= "post" then
    return wrk.format("GET", nil)
  end
  counter = counter + 1
  local n = run .. "-" .. tid .. "-" .. counter
  local body = '{"type":"account.verify","app":"bench","user":"user-' .. n ..
    '","account_created_at":"2026-01-01T00:00:00Z","id":"req-' .. n .. '"}'
  return wrk.format("POST", "/v1/commands", headers, body)
end

function response(status, headers, body)
  if status == 200 then ok = ok + 1 else other = other + 1 end
end

function done(summary, latency, requests)
  local total_ok, total_other = 0, 0
  for _, t in ipairs(threads) do
    total_ok = total_ok + t:get("ok")
    total_other = total_other + t:get("other")
  end
  io.write(string.format("BENCH status_200=%d status_other=%d duration_us=%d errors_connect=%d errors_read=%d errors_timeout=%d\n",
    total_ok, total_other, summary.duration, summary.errors.connect, summary.errors.read, summary.errors.timeout))
  io.write(string.format("BENCH p50_us=%d p90_us=%d p99_us=%d p999_us=%d max_us=%d\n",
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9), latency.max))
end
