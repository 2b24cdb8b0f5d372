-- wrk script: count the answers by status code, print "STATUS 200=n 304=m" at the end.
-- wrk's own "Non-2xx or 3xx responses" line cannot tell a 304 from a 200.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  statuses = {}
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    for code, n in pairs(thread:get("statuses")) do
      total[code] = (total[code] or 0) + n
    end
  end
  io.write("STATUS")
  for code, n in pairs(total) do
    io.write(" ", code, "=", n)
  end
  io.write("\n")
end
