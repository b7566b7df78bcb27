-- Least connected clients: MySQL Proxy's own default algorithm, written out as a script.
--
-- Each new client goes to the backend (up or not yet known) with the fewest connected clients;
-- ties go to the first one listed. Backends that are down are skipped; if all are down the script
-- decides nothing and mysql-lb's built-in policy tries them anyway, soonest back first.
--
-- Uses only MySQL Proxy 0.8 fields, so it runs unchanged under MySQL Proxy as well:
--   mysql-lb --proxy-lua-script config/scripts/least-connected.lua \
--            --proxy-backend-addresses 10.0.0.1:3306,10.0.0.2:3306

function connect_server()
    local backends = proxy.global.backends
    local chosen, fewest = nil, nil
    for i = 1, #backends do
        local b = backends[i]
        if b.state ~= proxy.BACKEND_STATE_DOWN then
            if fewest == nil or b.connected_clients < fewest then
                chosen, fewest = i, b.connected_clients
            end
        end
    end
    if chosen ~= nil then
        proxy.connection.backend_ndx = chosen
    end
end
