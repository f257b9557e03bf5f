-- leased's lease registry (see docs/protocol.md, "The model" and "Time"),
-- written as one Redis 7 script, for benchmarking leased against Redis + Lua.
--
--   SCRIPT LOAD "$(cat bench/lease.lua)"            -> sha
--   EVALSHA sha 0 ACQUIRE   run worker [now] [TTL seconds]
--   EVALSHA sha 0 HEARTBEAT lease_id token [now]
--   EVALSHA sha 0 VALIDATE  run lease_id token [now]
--   EVALSHA sha 0 RELEASE   lease_id token
--   EVALSHA sha 0 GET       run [now]
--   EVALSHA sha 0 SETDATA   lease_id token value [now]
--   EVALSHA sha 0 DELDATA   lease_id token
--
-- Replies are shaped like leased's RESP2 replies: the lease as a flat array
-- of key/value pairs (fencing_token an integer, expires_at a bulk string
-- formatted as leased formats it), null bulk, integers 1/0, and errors in
-- leased's wording.
--
-- Keys (all under "lease:"; the script computes them, so it is for a single
-- Redis server, not a cluster):
--   lease:run:<run>      hash: worker, token, expires_at, ttl
--   lease:token:<token>  string: the run id whose current lease has it
--   lease:next-token     INCR counter, the last fencing token issued
--   lease:time           registry time: the largest `now` seen
--   lease:data:<run>     string: the run's data (LEASE.SETDATA's value)
--
-- Not modelled: lease-retention (reclaiming long-expired leases, and run
-- data with them: here data stays until DELDATA), the token and time leased
-- keeps with run data (here only the value is SET), GETDATA and WITHDATA,
-- and leased's durable token ceiling (here tokens are as durable as the AOF).
-- Lua numbers are doubles, so tokens are exact only up to 2^53.

local RUN = 'lease:run:'
local TOKEN = 'lease:token:'
local COUNTER = 'lease:next-token'
local CLOCK = 'lease:time'
local DATA = 'lease:data:'
local DEFAULT_TTL = 10
-- lease-max-data-len at its default (64kb)
local MAX_DATA_LEN = 65536

local NOT_FLOAT = 'ERR value is not a valid float'
local NOT_INTEGER = 'ERR value is not an integer or out of range'
local NOT_POSITIVE = 'ERR value is out of range, must be positive'
local SYNTAX = 'ERR syntax error'
local BAD_TTL = "ERR invalid expire time in 'lease.acquire' command"
-- lease-max-skew at its default: an explicit `now` further ahead of the
-- server clock is refused.
local MAX_SKEW = 60
local TOO_FAR = "ERR now is more than 60 seconds ahead of the server's clock "
    .. '(lease-max-skew); send seconds since the Unix epoch, or omit now'

local function fail(message)
    return { err = message }
end

local function arity(name)
    return fail("ERR wrong number of arguments for '" .. name .. "' command")
end

-- A finite decimal number, as leased reads `now` and TTL: digits with an
-- optional sign, point and exponent; nothing before or after it.
local function parse_float(text)
    local int, frac, rest = string.match(text, '^[+-]?(%d*)%.?(%d*)(.*)$')
    if int == nil or (int == '' and frac == '') then
        return nil
    end
    if rest ~= '' and not string.find(rest, '^[eE][+-]?%d+$') then
        return nil
    end
    local value = tonumber(text)
    if value == nil or value ~= value or value == math.huge or value == -math.huge then
        return nil
    end
    return value
end

-- `digits` (no sign, no leading zero) is at most `limit` (same form).
local function at_most(digits, limit)
    return #digits < #limit or (#digits == #limit and digits <= limit)
end

-- A fencing token: an integer as Redis's string2ll reads it (no sign but
-- '-', no leading zero, fits in 64 bits), and positive. Returns the
-- canonical text, so equal tokens are equal strings; or nil and the error.
local function parse_token(text)
    if text == '0' then
        return nil, NOT_POSITIVE
    end
    local minus, digits = string.match(text, '^(%-?)([1-9]%d*)$')
    if digits == nil then
        return nil, NOT_INTEGER
    end
    if minus == '-' then
        if at_most(digits, '9223372036854775808') then
            return nil, NOT_POSITIVE
        end
        return nil, NOT_INTEGER
    end
    if not at_most(digits, '9223372036854775807') then
        return nil, NOT_INTEGER
    end
    return digits
end

-- A number as leased prints it (Rust's f64 Display): the shortest digits
-- that read back as the same double, never in exponent form.
local function plain(mantissa_sign, first, rest, exponent)
    local digits = string.gsub(first .. rest, '0+$', '')
    if digits == '' then
        return '0'
    end
    local point = tonumber(exponent) + 1 -- digits before the decimal point
    local out
    if point <= 0 then
        out = '0.' .. string.rep('0', -point) .. digits
    elseif point >= #digits then
        out = digits .. string.rep('0', point - #digits)
    else
        out = string.sub(digits, 1, point) .. '.' .. string.sub(digits, point + 1)
    end
    return mantissa_sign .. out
end

local function format_number(x)
    if x == 0 then
        return (1 / x < 0) and '-0' or '0'
    end
    if x == math.floor(x) and math.abs(x) < 1e15 then
        return string.format('%d', x)
    end
    -- Rounded to 15 significant digits, a double that has a representation
    -- of 15 digits or fewer shows exactly that one (%g drops the zeros).
    local text
    for _, precision in ipairs({ '%.15g', '%.16g', '%.17g' }) do
        text = string.format(precision, x)
        if tonumber(text) == x then
            break
        end
    end
    if not string.find(text, 'e') then
        return text
    end
    local sign, first, rest, exponent = string.match(text, '^(%-?)(%d)%.?(%d*)e([+-]%d+)$')
    return plain(sign, first, rest, exponent)
end

-- Exact text for a double stored in a key: %.17g reads back unchanged.
local function store_number(x)
    return string.format('%.17g', x)
end

-- The server clock: seconds since the Unix epoch, in milliseconds.
local function clock()
    local time = redis.call('TIME')
    return (tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)) / 1000
end

-- The refusal of an explicit `now` too far ahead of the server clock.
local function too_far(now)
    if now ~= nil and now > clock() + MAX_SKEW then
        return fail(TOO_FAR)
    end
    return nil
end

-- The time to evaluate a change at, max(now, registry time), which becomes
-- the new registry time. Without `now`, the server clock.
local function advance(now)
    now = now or clock()
    local time = redis.call('GET', CLOCK)
    if time then
        time = tonumber(time)
        if now <= time then
            return time
        end
    end
    redis.call('SET', CLOCK, store_number(now))
    return now
end

-- The time a read evaluates at: with `now`, as a change does; without,
-- max(server clock, registry time), and nothing is written.
local function read_time(now)
    if now ~= nil then
        return advance(now)
    end
    local time = tonumber(redis.call('GET', CLOCK) or '0')
    return math.max(clock(), time)
end

-- The run's current lease: worker, token, expires_at, ttl; or nil.
local function lease_of(run)
    local fields = redis.call('HMGET', RUN .. run, 'worker', 'token', 'expires_at', 'ttl')
    if not fields[2] then
        return nil
    end
    return {
        worker = fields[1],
        token = fields[2],
        expires_at = tonumber(fields[3]),
        ttl = tonumber(fields[4]),
    }
end

local function lease_id(run, worker, token)
    return run .. ':' .. worker .. ':' .. token
end

-- The lease map of leased's RESP2 replies.
local function lease_reply(run, lease, expired)
    local reply = {
        'run_id', run,
        'worker_id', lease.worker,
        'lease_id', lease_id(run, lease.worker, lease.token),
        'fencing_token', tonumber(lease.token),
        'expires_at', format_number(lease.expires_at),
    }
    if expired ~= nil then
        reply[11] = 'expired'
        reply[12] = expired and 1 or 0
    end
    return reply
end

-- The lease with this id and token, if it is its run's current lease.
local function lease_named(id, token)
    local run = redis.call('GET', TOKEN .. token)
    if not run then
        return nil
    end
    local lease = lease_of(run)
    if lease == nil or lease.token ~= token or id ~= lease_id(run, lease.worker, token) then
        return nil
    end
    return run, lease
end

local function acquire(args)
    local n = #args
    if n < 2 then
        return arity('lease.acquire')
    end
    local run, worker = args[1], args[2]
    local now, ttl = nil, DEFAULT_TTL
    local i = 3
    if i <= n and string.lower(args[i]) ~= 'ttl' then
        now = parse_float(args[i])
        if now == nil then
            return fail(NOT_FLOAT)
        end
        i = i + 1
    end
    if i <= n then
        if string.lower(args[i]) ~= 'ttl' or i + 1 > n then
            return fail(SYNTAX)
        end
        ttl = parse_float(args[i + 1])
        if ttl == nil then
            return fail(NOT_FLOAT)
        end
        if ttl <= 0 then
            return fail(BAD_TTL)
        end
        if i + 1 < n then
            return fail(SYNTAX)
        end
    end

    local refused = too_far(now)
    if refused then
        return refused
    end
    now = advance(now)
    local previous = lease_of(run)
    if previous and previous.expires_at > now then
        return false
    end
    local token = string.format('%d', redis.call('INCR', COUNTER))
    if previous then
        redis.call('DEL', TOKEN .. previous.token)
    end
    local lease = { worker = worker, token = token, expires_at = now + ttl, ttl = ttl }
    redis.call('HSET', RUN .. run,
        'worker', worker, 'token', token,
        'expires_at', store_number(lease.expires_at), 'ttl', store_number(ttl))
    redis.call('SET', TOKEN .. token, run)
    return lease_reply(run, lease, nil)
end

-- The optional trailing `now` of HEARTBEAT, VALIDATE and GET, at args[i].
local function optional_now(args, i, name)
    local now = nil
    if args[i] ~= nil then
        now = parse_float(args[i])
        if now == nil then
            return nil, fail(NOT_FLOAT)
        end
    end
    if #args > i then
        return nil, arity(name)
    end
    return now, nil
end

local function heartbeat(args)
    if #args < 2 then
        return arity('lease.heartbeat')
    end
    local id = args[1]
    local token, problem = parse_token(args[2])
    if token == nil then
        return fail(problem)
    end
    local now, bad = optional_now(args, 3, 'lease.heartbeat')
    bad = bad or too_far(now)
    if bad then
        return bad
    end
    now = advance(now)
    local run, lease = lease_named(id, token)
    if run == nil or lease.expires_at <= now then
        return 0
    end
    redis.call('HSET', RUN .. run, 'expires_at', store_number(now + lease.ttl))
    return 1
end

local function validate(args)
    if #args < 3 then
        return arity('lease.validate')
    end
    local run, id = args[1], args[2]
    local token, problem = parse_token(args[3])
    if token == nil then
        return fail(problem)
    end
    local now, bad = optional_now(args, 4, 'lease.validate')
    bad = bad or too_far(now)
    if bad then
        return bad
    end
    now = read_time(now)
    local lease = lease_of(run)
    if lease == nil or lease.token ~= token or id ~= lease_id(run, lease.worker, token)
        or lease.expires_at <= now then
        return 0
    end
    return 1
end

local function release(args)
    if #args ~= 2 then
        return arity('lease.release')
    end
    local token, problem = parse_token(args[2])
    if token == nil then
        return fail(problem)
    end
    local run = lease_named(args[1], token)
    if run == nil then
        return 0
    end
    redis.call('DEL', RUN .. run, TOKEN .. token)
    return 1
end

local function get(args)
    if #args < 1 then
        return arity('lease.get')
    end
    local run = args[1]
    local now, bad = optional_now(args, 2, 'lease.get')
    bad = bad or too_far(now)
    if bad then
        return bad
    end
    now = read_time(now)
    local lease = lease_of(run)
    if lease == nil then
        return false
    end
    return lease_reply(run, lease, lease.expires_at <= now)
end

-- The check of HEARTBEAT (the run's current lease, unexpired, id and token
-- matching), then the run's data SET to the value. Unlike HEARTBEAT it does
-- not extend the lease.
local function setdata(args)
    if #args < 3 then
        return arity('lease.setdata')
    end
    local id, value = args[1], args[3]
    local token, problem = parse_token(args[2])
    if token == nil then
        return fail(problem)
    end
    local now, bad = optional_now(args, 4, 'lease.setdata')
    if bad then
        return bad
    end
    if #value > MAX_DATA_LEN then
        return fail('ERR value is longer than ' .. MAX_DATA_LEN .. ' bytes (lease-max-data-len)')
    end
    bad = too_far(now)
    if bad then
        return bad
    end
    now = advance(now)
    local run, lease = lease_named(id, token)
    if run == nil or lease.expires_at <= now then
        return 0
    end
    redis.call('SET', DATA .. run, value)
    return 1
end

-- The same check at the time a read is evaluated at (time does not move),
-- then the run's data deleted: 1 if there was any.
local function deldata(args)
    if #args ~= 2 then
        return arity('lease.deldata')
    end
    local token, problem = parse_token(args[2])
    if token == nil then
        return fail(problem)
    end
    local now = read_time(nil)
    local run, lease = lease_named(args[1], token)
    if run == nil or lease.expires_at <= now then
        return 0
    end
    return redis.call('DEL', DATA .. run)
end

local COMMANDS = {
    ACQUIRE = acquire,
    HEARTBEAT = heartbeat,
    VALIDATE = validate,
    RELEASE = release,
    GET = get,
    SETDATA = setdata,
    DELDATA = deldata,
}

local command = COMMANDS[string.upper(ARGV[1] or '')]
if command == nil then
    return fail('ERR unknown lease command, expected ACQUIRE, HEARTBEAT, VALIDATE, RELEASE, GET, SETDATA or DELDATA')
end
local args = {}
for i = 2, #ARGV do
    args[i - 1] = ARGV[i]
end
return command(args)
