-- Prefer read-only backends, fall back to read-write ones.
--
-- For read-mostly clients behind one proxy port: new clients go to the read-only backend with the
-- fewest connected clients; only when every read-only backend is down do they go to the read-write
-- backend with the fewest. Mark backends read-only with `type: ro` in the YAML file, or list them
-- with MySQL Proxy's flag:
--   mysql-lb --proxy-lua-script config/scripts/prefer-ro.lua \
--            --proxy-backend-addresses 10.0.0.1:3306 \
--            --proxy-read-only-backend-addresses 10.0.0.2:3306,10.0.0.3:3306
--
-- Uses only MySQL Proxy 0.8 fields.

local function least_connected(wanted_type)
    local backends = proxy.global.backends
    local chosen, fewest = nil, nil
    for i = 1, #backends do
        local b = backends[i]
        if b.type == wanted_type and b.state ~= proxy.BACKEND_STATE_DOWN then
            if fewest == nil or b.connected_clients < fewest then
                chosen, fewest = i, b.connected_clients
            end
        end
    end
    return chosen
end

function connect_server()
    local chosen = least_connected(proxy.BACKEND_TYPE_RO) or least_connected(proxy.BACKEND_TYPE_RW)
    if chosen ~= nil then
        proxy.connection.backend_ndx = chosen
    end
end
