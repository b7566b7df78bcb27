-- One sysbench event = one short-lived client: connect, authenticate, --queries point selects
-- (default 3, the same query as oltp_point_select), COM_QUIT. sysbench's per-event latency is
-- then the client's whole visit. Used by benches/load/hetero.py (sysbench 1.0 Lua API).

sysbench.cmdline.options = {
   queries = {"point selects per connection", 3},
   tables = {"number of tables", 4},
   table_size = {"rows per table", 10000},
}

function thread_init()
   drv = sysbench.sql.driver()
end

function event()
   local con = drv:connect()
   for _ = 1, sysbench.opt.queries do
      con:query(string.format("SELECT c FROM sbtest%d WHERE id=%d",
                              sysbench.rand.uniform(1, sysbench.opt.tables),
                              sysbench.rand.default(1, sysbench.opt.table_size)))
   end
   con:disconnect()
end
