-- wrk script of the intake benchmark (benches/intake.rs): POST /webhook with the fixture's
-- bytes as is, its precomputed X-Hub-Signature-256, and a unique X-GitHub-Delivery per
-- request ("<tag>-<thread>-<n>").
--
--   wrk -t2 -c32 -d10s --latency -s wrk.lua http://127.0.0.1:PORT/webhook -- BODY_FILE SIGNATURE TAG
--
-- done() prints one machine-readable line, INTAKE_RESULT key=value ..., with sent=<thread>:<n>,...
-- so the caller can look every delivery id up afterwards.

local threads = {}

function setup(thread)
   table.insert(threads, thread)
   thread:set("tid", #threads)
end

function init(args)
   local f = assert(io.open(args[1], "rb"))
   body = f:read("*a")
   f:close()
   tag = args[3]
   counter = 0
   headers = {
      ["Content-Type"] = "application/json",
      ["User-Agent"] = "GitHub-Hookshot/wrk",
      ["X-GitHub-Event"] = "pull_request",
      ["X-Hub-Signature-256"] = args[2],
   }
end

function request()
   counter = counter + 1
   headers["X-GitHub-Delivery"] = tag .. "-" .. tid .. "-" .. counter
   return wrk.format("POST", nil, headers, body)
end

function done(summary, latency, requests)
   local sent = {}
   for _, t in ipairs(threads) do
      table.insert(sent, t:get("tid") .. ":" .. t:get("counter"))
   end
   local e = summary.errors
   io.write(string.format(
      "INTAKE_RESULT requests=%d duration_us=%d non_2xx=%d connect=%d read=%d write=%d timeout=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d sent=%s\n",
      summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
      table.concat(sent, ",")))
end
