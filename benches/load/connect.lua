-- One sysbench event = one new connection: connect, authenticate, SELECT 1, COM_QUIT.
-- Used by benches/load/run.py for the connection-setup rate (sysbench 1.0 Lua API).

function thread_init()
   drv = sysbench.sql.driver()
end

function event()
   local con = drv:connect()
   con:query("SELECT 1")
   con:disconnect()
end
