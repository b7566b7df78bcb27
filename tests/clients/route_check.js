// Routing and deferred connect through mysql-lb for Node mysql2. mysql-lb routes MLB_ROUTED_USER
// and the schema MLB_ROUTED_SCHEMA to the server on MLB_PORT_B, the rest to MLB_PORT_A. Each login
// is checked for the server it reached, the account, the proxy's connection id and the server
// version; refusals are compared with the same login made directly.
// Exits non-zero with one line per mismatch. Run by tests/routing.rs (NODE_PATH from it).
'use strict';

const mysql = require('mysql2/promise');
const assert = require('assert');

const env = process.env;
const HOST = env.MLB_PROXY_HOST;
const PROXY = +env.MLB_PROXY_PORT;
const A = +env.MLB_PORT_A;
const B = +env.MLB_PORT_B;
const PROXY_ID_BASE = 0x60000000;

const failures = [];
function check(cond, what) {
  if (!cond) {
    failures.push(what);
    console.error(`MISMATCH: ${what}`);
  }
}
function eq(got, want, what) {
  try {
    assert.deepStrictEqual(got, want);
  } catch {
    check(false, `${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  }
}
async function step(name, fn) {
  try {
    await fn();
    console.log(`ok: ${name}`);
  } catch (e) {
    check(false, `${name}: unexpected ${e.code || e.name}: ${e.message}`);
  }
}
const connect = (port, user, password, database) =>
  mysql.createConnection({ host: HOST, port, user, password, database, connectTimeout: 10000 });

async function landing(user, password, database, want, what) {
  const c = await connect(PROXY, user, password, database);
  const [rows] = await c.query({ sql: 'SELECT @@port, CURRENT_USER()', rowsAsArray: true });
  eq(rows, [[want, `${user}@%`]], what);
  check(c.threadId >= PROXY_ID_BASE, `${what}: thread id ${c.threadId.toString(16)} should be a proxy id`);
  const direct = await connect(want, user, password, database);
  eq(c.connection.serverVersion, direct.connection.serverVersion, `${what}: server version`);
  await direct.end();
  const [prepared] = await c.execute({ sql: 'SELECT ? + 1 AS n', rowsAsArray: true }, [41]);
  eq(prepared.map((r) => r.map(Number)), [[42]], `${what}: prepared statement`);
  await c.end();
}

async function refused(port, user, password, database) {
  try {
    await (await connect(port, user, password, database)).end();
    return null;
  } catch (e) {
    return [e.errno, e.sqlState, e.sqlMessage];
  }
}

async function main() {
  await step('logins land on their pools', async () => {
    await landing(env.MLB_USER, env.MLB_PASS, undefined, A, 'unrouted user: pool default');
    await landing(env.MLB_ROUTED_USER, env.MLB_ROUTED_PASS, undefined, B, 'routed user');
    await landing(env.MLB_USER, env.MLB_PASS, env.MLB_ROUTED_SCHEMA, B, 'routed schema');
  });
  await step("refusals are the server's own", async () => {
    const cases = [
      [env.MLB_ROUTED_USER, 'wrong', undefined, B],
      [env.MLB_USER, 'wrong', env.MLB_ROUTED_SCHEMA, B],
      ['nobody_here', 'x', undefined, A],
    ];
    for (const [user, password, database, server] of cases) {
      const what = `${user}/${password}/${database}`;
      const direct = await refused(server, user, password, database);
      check(direct && direct[0] === 1045, `${what} direct: ${JSON.stringify(direct)}`);
      eq(await refused(PROXY, user, password, database), direct, `${what}: proxy vs direct`);
    }
  });
  if (failures.length) {
    console.error(`Node mysql2 routing: ${failures.length} mismatch(es)`);
    process.exit(1);
  }
  console.log('Node mysql2 routing: all checks passed');
}

main();
