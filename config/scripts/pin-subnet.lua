-- Pin a client subnet to one backend; every other client goes to the built-in policy.
--
-- Typical use: the reporting hosts in 10.20.0.0/16 always land on the reporting replica, so
-- their long queries never reach the servers the application uses. Edit PINS below: each entry
-- sends clients whose IPv4 address is inside `subnet` to the backend whose address (dst.name,
-- "host:port" as configured) is `backend`. The first matching entry wins. When the pinned backend
-- is down the client is not refused: the script returns without choosing and the built-in policy
-- places it.
--
-- Written without Lua 5.3 bit operators so it also runs under MySQL Proxy 0.8 (Lua 5.1).

local PINS = {
    { subnet = "10.20.0.0/16", backend = "10.0.0.9:3306" },
}

-- "a.b.c.d" -> number, or nil when it is not an IPv4 address (e.g. IPv6 or a unix socket).
local function ipv4(text)
    local a, b, c, d = string.match(text, "^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
    if a == nil then
        return nil
    end
    a, b, c, d = tonumber(a), tonumber(b), tonumber(c), tonumber(d)
    if a > 255 or b > 255 or c > 255 or d > 255 then
        return nil
    end
    return ((a * 256 + b) * 256 + c) * 256 + d
end

-- Prefix comparison by division, exact for 32-bit values in a double.
local function in_subnet(addr, cidr)
    local net, bits = string.match(cidr, "^([%d%.]+)/(%d+)$")
    net, bits = ipv4(net or ""), tonumber(bits)
    if addr == nil or net == nil or bits == nil or bits > 32 then
        return false
    end
    local block = 2 ^ (32 - bits)
    return math.floor(addr / block) == math.floor(net / block)
end

function connect_server()
    local client = ipv4(proxy.connection.client.src.address or "")
    for _, pin in ipairs(PINS) do
        if in_subnet(client, pin.subnet) then
            local backends = proxy.global.backends
            for i = 1, #backends do
                local b = backends[i]
                if b.dst.name == pin.backend and b.state ~= proxy.BACKEND_STATE_DOWN then
                    proxy.connection.backend_ndx = i
                    return
                end
            end
            return -- pinned backend down or not configured: built-in policy
        end
    end
end
