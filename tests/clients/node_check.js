// Node mysql2 (pure JavaScript protocol code) through mysql-lb, compared with a direct connection.
// Exits non-zero with one line per mismatch. Run by tests/other_clients.rs (NODE_PATH = npm root -g).
'use strict';

const mysql = require('mysql2/promise');
const assert = require('assert');
const fs = require('fs');
const crypto = require('crypto');
const path = require('path');

const env = (k, d) => process.env[k] ?? d;
const DIRECT = { host: env('MLB_DIRECT_HOST', '127.0.0.1'), port: +env('MLB_DIRECT_PORT', '3306') };
const PROXY = { host: env('MLB_PROXY_HOST', '127.0.0.1'), port: +env('MLB_PROXY_PORT', '4040') };
const SOCK = env('MLB_PROXY_SOCKET', '');
const USER = env('MLB_USER', 'bench');
const PASS = env('MLB_PASS', 'bench');
const TMP = env('MLB_TMP', '/tmp');
const PROXY_ID_BASE = 0x60000000;

const failures = [];
function check(cond, what) {
  if (!cond) {
    failures.push(what);
    console.error(`MISMATCH: ${what}`);
  }
}
const short = (v) => {
  const s = JSON.stringify(v, (k, x) => (typeof x === 'bigint' ? x.toString() : x));
  return s && s.length > 300 ? `${s.slice(0, 300)}... (${s.length} chars)` : s;
};
function eq(got, want, what) {
  try {
    assert.deepStrictEqual(got, want);
  } catch {
    check(false, `${what}: got ${short(got)}, want ${short(want)}`);
  }
}
async function step(name, fn) {
  const t = Date.now();
  try {
    await fn();
    console.log(`ok: ${name} (${((Date.now() - t) / 1000).toFixed(1)}s)`);
  } catch (e) {
    check(false, `${name}: unexpected ${e.code || e.name}: ${e.message}`);
  }
}
function blob(n) {
  const p = Buffer.alloc(256 * 64);
  for (let i = 0; i < p.length; i++) p[i] = i % 256;
  const b = Buffer.alloc(n);
  for (let o = 0; o < n; o += p.length) p.copy(b, o, 0, Math.min(p.length, n - o));
  return b;
}
function connect(where, opts = {}) {
  const base = where === 'socket' ? { socketPath: SOCK } : where === 'direct' ? DIRECT : PROXY;
  return mysql.createConnection({
    ...base, user: USER, password: PASS, database: 'test', connectTimeout: 5000,
    supportBigNumbers: true, bigNumberStrings: true, dateStrings: true, ...opts,
  });
}
const rows = async (c, sql, params) => (await c.query({ sql, rowsAsArray: true }, params))[0];
const prows = async (c, sql, params) => (await c.execute({ sql, rowsAsArray: true }, params))[0];

// KILL CONNECTION of server thread `tid` once it runs `sql`, from a direct admin connection;
// resolves false if it never does.
async function killWhenRunning(tid, sql) {
  const admin = await connect('direct');
  try {
    const deadline = Date.now() + 20000;
    while (Date.now() < deadline) {
      const [[n]] = await rows(admin, 'SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO = ?', [tid, sql]);
      if (Number(n) === 1) {
        await admin.query(`KILL CONNECTION ${tid}`);
        return true;
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    return false;
  } finally {
    await admin.end();
  }
}

async function main() {
  await step('login, thread id, ping, changeUser', async () => {
    const d = await connect('direct');
    const server = d.connection.serverVersion;
    await d.end();
    for (const w of ['proxy', 'socket']) {
      const c = await connect(w);
      eq(await rows(c, 'SELECT 1 + 1 AS x, CURRENT_USER()'), [[2, `${USER}@%`]], `${w}: select`);
      check(c.threadId >= PROXY_ID_BASE && c.threadId < 2 ** 31, `${w}: threadId ${c.threadId.toString(16)} should be a proxy id`);
      eq(c.connection.serverVersion, server, `${w}: server version`);
      await c.ping();
      await c.query('SET @v = 5');
      await c.changeUser({ user: USER, password: PASS, database: 'mysql' });
      eq(await rows(c, 'SELECT @v, DATABASE()'), [[null, 'mysql']], `${w}: after changeUser`);
      await c.end();
    }
  });

  await step('wrong password', async () => {
    const got = {};
    for (const w of ['direct', 'proxy', 'socket']) {
      try {
        await connect(w, { password: 'wrong' });
        got[w] = null;
      } catch (e) {
        got[w] = [e.errno, e.sqlState, e.sqlMessage];
      }
    }
    eq(got.direct && got.direct[0], 1045, 'direct code');
    eq(got.proxy, got.direct, 'wrong password: proxy vs direct');
    eq(got.socket, got.direct, 'wrong password over the socket: proxy vs direct');
  });

  await step('prepared statements (execute) with every common type and NULL', async () => {
    const res = {};
    for (const w of ['direct', 'proxy']) {
      const c = await connect(w);
      await c.query(`CREATE OR REPLACE TABLE node_types (id INT PRIMARY KEY, i BIGINT, u BIGINT UNSIGNED,
        d DOUBLE, dec_ DECIMAL(30,10), dt DATE, ts DATETIME(6), s VARCHAR(50) CHARACTER SET utf8mb4,
        b LONGBLOB, j JSON, n INT NULL)`);
      const vals = [1, '-9223372036854775808', '18446744073709551615', 2.5, '-12345678901234567890.0123456789',
        '2024-02-29', '2024-02-29 23:59:58.123456', 'h\u00e9llo \u{1F600}', blob(100000), '{"k":[1,2]}', null];
      await c.execute('INSERT INTO node_types VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)', vals);
      const r = await prows(c, 'SELECT * FROM node_types WHERE id = ? AND n IS NULL', [1]);
      eq(r.length, 1, `${w}: one row`);
      eq(r[0].slice(0, 8), [1, '-9223372036854775808', '18446744073709551615', 2.5,
        '-12345678901234567890.0123456789', '2024-02-29', '2024-02-29 23:59:58.123456', 'h\u00e9llo \u{1F600}'],
      `${w}: scalar values`);
      check(Buffer.isBuffer(r[0][8]) && r[0][8].equals(blob(100000)), `${w}: 100 KB blob`);
      eq(r[0][10], null, `${w}: NULL`);
      // The same statement again and again, NULLs moving.
      for (let i = 0; i < 30; i++) {
        const a = i % 3 ? i : null;
        const s = i % 5 ? `s${i}` : null;
        eq(await prows(c, 'SELECT ?, ?, CAST(? AS SIGNED) + 1', [a, s, i]), [[a, s, String(i + 1)]], `${w}: re-execute ${i}`);
      }
      try {
        await c.execute('SELEC ?', [1]);
        check(false, `${w}: bad prepare accepted`);
      } catch (e) {
        eq(e.errno, 1064, `${w}: prepare error`);
      }
      res[w] = r;
      await c.end();
    }
    eq(res.proxy, res.direct, 'prepared row: proxy vs direct');
  });

  await step('20 MiB blob', async () => {
    const c = await connect('proxy', { maxPreparedStatements: 4 });
    const data = blob(20 << 20);
    await c.query('CREATE TABLE IF NOT EXISTS node_blob (id INT PRIMARY KEY, b LONGBLOB)');
    await c.execute('REPLACE INTO node_blob VALUES (1, ?)', [data]);
    const sha = crypto.createHash('sha256').update(data).digest('hex');
    eq(await rows(c, 'SELECT LENGTH(b), SHA2(b, 256) FROM node_blob WHERE id = 1'), [[data.length, sha]], 'on the server');
    const t = await rows(c, 'SELECT b FROM node_blob WHERE id = 1');
    check(t[0][0].equals(data), '20 MiB blob read back (text protocol) differs');
    const p = await prows(c, 'SELECT b FROM node_blob WHERE id = ?', [1]);
    check(p[0][0].equals(data), '20 MiB blob read back (binary protocol) differs');
    await c.end();
  });

  await step('multi-statements and CALL', async () => {
    const res = {};
    for (const w of ['direct', 'proxy']) {
      const c = await connect(w, { multipleStatements: true });
      await c.query('DROP PROCEDURE IF EXISTS node_two; CREATE PROCEDURE node_two(IN x INT) BEGIN SELECT x AS a; SELECT x * 2 AS b; END');
      const [multi] = await c.query({ sql: "SELECT 1; SELECT 'x', 2; DO 0; CALL node_two(3)", rowsAsArray: true });
      const [ps] = await c.execute({ sql: 'CALL node_two(?)', rowsAsArray: true }, [6]);
      res[w] = [multi.map((r) => (Array.isArray(r) ? r : r.affectedRows)), ps.map((r) => (Array.isArray(r) ? r : 'ok'))];
      eq(await rows(c, "SELECT 'after'"), [['after']], `${w}: after`);
      await c.end();
    }
    eq(res.proxy, res.direct, 'results: proxy vs direct');
    eq(res.proxy[0].slice(0, 5), [[[1]], [['x', 2]], 0, [[3]], [['6']]], 'multi-statement values');
    eq(res.proxy[1].slice(0, 2), [[[6]], [['12']]], 'prepared CALL values');
  });

  await step('transactions', async () => {
    const c = await connect('proxy');
    const o = await connect('direct');
    await c.query('CREATE OR REPLACE TABLE node_tx (id INT PRIMARY KEY) ENGINE=InnoDB');
    await c.beginTransaction();
    await c.query('INSERT INTO node_tx VALUES (1)');
    eq(await rows(o, 'SELECT COUNT(*) FROM node_tx'), [['0']], 'uncommitted hidden');
    await c.rollback();
    await c.beginTransaction();
    await c.query('INSERT INTO node_tx VALUES (2)');
    await c.commit();
    eq(await rows(o, 'SELECT id FROM node_tx'), [[2]], 'committed');
    try {
      await c.query('INSERT INTO node_tx VALUES (2)');
      check(false, 'duplicate accepted');
    } catch (e) {
      eq(e.errno, 1062, 'duplicate code');
    }
    await c.end();
    await o.end();
  });

  await step('LOAD DATA LOCAL INFILE', async () => {
    const file = path.join(TMP, 'node_infile.tsv');
    fs.writeFileSync(file, Array.from({ length: 1000 }, (_, i) => `${i}\tname ${i}\n`).join(''));
    const c = await connect('proxy', { flags: ['+LOCAL_FILES'], infileStreamFactory: (p) => fs.createReadStream(p) });
    await c.query('CREATE OR REPLACE TABLE node_load (id INT, name VARCHAR(20))');
    const [r] = await c.query(`LOAD DATA LOCAL INFILE '${file}' INTO TABLE node_load`);
    eq(r.affectedRows, 1000, 'rows loaded');
    eq(await rows(c, 'SELECT COUNT(*), SUM(id), MAX(name) FROM node_load'), [['1000', '499500', 'name 999']], 'contents');
    await c.end();
  });

  await step('compression requested', async () => {
    for (const [w, want] of [['direct', 'ON'], ['proxy', 'OFF']]) {
      const c = await connect(w, { compress: true });
      const st = await Promise.race([rows(c, "SHOW SESSION STATUS LIKE 'Compression'"),
        new Promise((_, rej) => setTimeout(() => rej(new Error('query hung with compress: true')), 5000))]);
      eq(st, [['Compression', want]], `${w}: compression state`);
      c.destroy();
    }
  });

  await step('TLS required fails clearly', async () => {
    const t = Date.now();
    try {
      const c = await connect('proxy', { ssl: { rejectUnauthorized: false } });
      check(false, 'ssl: {...} through the proxy connected without TLS');
      c.destroy();
    } catch (e) {
      check(/SSL|TLS|secure connection/i.test(e.message), `TLS error message: ${e.message}`);
    }
    check(Date.now() - t < 5000, 'TLS failure took too long');
  });

  await step('KILL QUERY with threadId and CONNECTION_ID()', async () => {
    for (const how of ['threadId', 'CONNECTION_ID()']) {
      const victim = await connect('proxy');
      const killer = await connect('proxy');
      const id = how === 'threadId' ? victim.threadId : (await rows(victim, 'SELECT CONNECTION_ID()'))[0][0];
      const t = Date.now();
      const sleeping = rows(victim, 'SELECT SLEEP(20)').then((r) => ({ r }), (e) => ({ e }));
      await new Promise((r) => setTimeout(r, 300));
      await killer.query(`KILL QUERY ${id}`);
      const out = await sleeping;
      check((out.e && out.e.errno === 1317) || (out.r && out.r[0][0] === 1), `${how}: victim got ${short(out.r || out.e.message)}`);
      check(Date.now() - t < 10000, `${how}: took too long`);
      eq(await rows(victim, "SELECT 'alive'"), [['alive']], `${how}: victim alive`);
      await killer.query(`KILL ${id}`);
      await new Promise((r) => setTimeout(r, 200));
      try {
        await rows(victim, 'SELECT 1');
        check(false, `${how}: victim survived KILL`);
      } catch (e) {
        check(true, '');
      }
      await killer.end();
      victim.destroy();
    }
  });

  // The server thread behind a session is killed mid-statement (MariaDB closes without an ERR):
  // what mysql2 raises (its pool and retry logic key on `fatal` and PROTOCOL_CONNECTION_LOST), and
  // the way back, are what they are directly. An ERR of the proxy's instead (1105 `mysql-lb:
  // backend … closed the connection mid-response`) shows as its own errno and code.
  await step('backend connection lost mid-statement', async () => {
    const seen = {};
    for (const w of ['direct', 'proxy', 'socket']) {
      for (const how of ['query', 'execute']) {
        const c = await connect(w);
        const ended = new Promise((resolve) => c.connection.once('end', () => resolve('end')));
        const tid = (await rows(c, 'SELECT CONNECTION_ID()'))[0][0];
        const killer = killWhenRunning(tid, 'SELECT SLEEP(5)');
        const got = await (how === 'query' ? rows(c, 'SELECT SLEEP(5)') : prows(c, 'SELECT SLEEP(5)'))
          .then(() => ['no error'], (e) => [e.constructor.name, e.code, e.errno, e.sqlState, e.fatal, e.message]);
        check(await killer, `${w} ${how}: thread ${tid} never ran SELECT SLEEP(5)`);
        const next = await c.ping().then(() => 'ping ok', (e) => [e.code, e.fatal, e.message]);
        const closed = await Promise.race([ended, new Promise((r) => setTimeout(() => r('no end event'), 5000))]);
        seen[`${w}/${how}`] = { error: got, ping: next, closed };
        c.destroy();
        const again = await connect(w);
        eq(await rows(again, "SELECT 'back'"), [['back']], `${w} ${how}: a new connection afterwards`);
        await again.end();
      }
    }
    console.log(`  lost connection, direct: ${short(seen['direct/query'])}`);
    for (const how of ['query', 'execute']) {
      eq(seen[`direct/${how}`].error.slice(1, 5), ['PROTOCOL_CONNECTION_LOST', undefined, undefined, true],
        `direct ${how}: lost connection ${short(seen[`direct/${how}`])}`);
      eq(seen[`proxy/${how}`], seen[`direct/${how}`], `${how}: lost connection, proxy vs direct`);
      eq(seen[`socket/${how}`], seen[`direct/${how}`], `${how}: lost connection over the socket, proxy vs direct`);
    }
  });

  const version = require('mysql2/package.json').version;
  if (failures.length) {
    console.error(`mysql2 ${version}: ${failures.length} mismatch(es)`);
    for (const f of failures) console.error(`  - ${f}`);
    process.exit(1);
  }
  console.log(`mysql2 ${version} (node ${process.version}): all checks passed`);
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(2);
});
