-- wrk script for modelfn.client.wrk: POST one pre-serialised KServe V2 infer request, over and
-- over.
--
--   wrk -t1 -cN -dS -s wrk_v2_infer.lua URL -- BODY_FILE [HEADER_LENGTH]
--
-- BODY_FILE holds the exact bytes the Python client would send (written by
-- modelfn.client.wrk.write_body). With HEADER_LENGTH the body is Triton's binary tensor
-- extension: the first HEADER_LENGTH bytes are the JSON header, announced in
-- Inference-Header-Content-Length. The request is formatted once per thread (no request()
-- function), so wrk sends the same bytes with no Lua on the send path.
--
-- Every answer's status is checked: one that is not 200 is counted as an error, and each 200
-- is counted in the wall-clock second it completed in, so the driver can take the throughput
-- of the seconds after a warm-up in the same run, on connections already busy. At the end a
-- line "wrk-result {json}" carries the counts, the latency percentiles and those per-second
-- counts (modelfn.client.wrk's parse_output reads it).

non_200 = 0  -- a global: done() reads each thread's count with thread:get
local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

function init(args)
   local path = args[1]
   local file = assert(io.open(path, "rb"), "cannot open the body file " .. tostring(path))
   wrk.body = file:read("*a")
   file:close()
   wrk.method = "POST"
   if args[2] then
      wrk.headers["Content-Type"] = "application/octet-stream"
      wrk.headers["Inference-Header-Content-Length"] = args[2]
   else
      wrk.headers["Content-Type"] = "application/json"
   end
end

counted = {}  -- a global, per thread: wall-clock second -> 200 answers completed in it

function response(status, headers, body)
   if status ~= 200 then
      non_200 = non_200 + 1
   else
      local second = os.time()
      counted[second] = (counted[second] or 0) + 1
   end
end

function done(summary, latency, requests)
   local non_200_total = 0
   local per_second = {}
   for _, thread in ipairs(threads) do
      non_200_total = non_200_total + (thread:get("non_200") or 0)
      for second, n in pairs(thread:get("counted") or {}) do
         per_second[second] = (per_second[second] or 0) + n
      end
   end
   local seconds = {}
   for second, n in pairs(per_second) do
      table.insert(seconds, string.format('"%d":%d', second, n))
   end
   local e = summary.errors
   local fields = {
      string.format('"requests":%d', summary.requests),
      string.format('"duration_us":%d', summary.duration),
      string.format('"bytes":%d', summary.bytes),
      string.format('"non_200":%d', non_200_total),
      string.format('"connect_errors":%d', e.connect),
      string.format('"read_errors":%d', e.read),
      string.format('"write_errors":%d', e.write),
      string.format('"timeouts":%d', e.timeout),
      string.format('"mean_us":%.3f', latency.mean),
      string.format('"max_us":%d', latency.max),
   }
   for _, p in ipairs({50, 90, 99}) do
      table.insert(fields, string.format('"p%d_us":%d', p, latency:percentile(p)))
   end
   table.insert(fields, '"per_second":{' .. table.concat(seconds, ",") .. '}')
   io.write("wrk-result {" .. table.concat(fields, ",") .. "}\n")
end
