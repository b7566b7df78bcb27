// TLS and compression with Node mysql2, run by tests/tls_clients.rs. Connects to
// MLB_HOST:MLB_PORT (MariaDB itself, or mysql-lb in front of it) with TLS required and the
// server's certificate verified against MLB_CA for the name MLB_HOST, with `compress: true`, and
// both; in each mode a query, a 20 MiB BLOB round trip and LOAD DATA LOCAL INFILE. It prints the
// TLS version and cipher Node's socket reports and what the server says of the session, checked
// against MLB_EXPECT_BACKEND_TLS / MLB_EXPECT_BACKEND_COMPRESSION (`client` = as the client leg,
// or 1/0 and ON/OFF: through mysql-lb the server sees the backend leg). A client trusting only
// MLB_OTHER_CA must be refused. Exits non-zero with one line per mismatch.
'use strict';

const mysql = require('mysql2/promise');
const assert = require('assert');
const crypto = require('crypto');
const fs = require('fs');
const path = require('path');

const env = (k, d) => process.env[k] ?? d;
const HOST = env('MLB_HOST', '127.0.0.1');
const PORT = +env('MLB_PORT', '3306');
const USER = env('MLB_USER', 'bench');
const PASS = env('MLB_PASS', 'bench');
const CA = env('MLB_CA', '');
const OTHER_CA = env('MLB_OTHER_CA', '');
const TMP = env('MLB_TMP', '/tmp');
const EXPECT_TLS = env('MLB_EXPECT_BACKEND_TLS', 'client');
const EXPECT_COMPRESSION = env('MLB_EXPECT_BACKEND_COMPRESSION', 'client');
const MODES = [['tls', true, false], ['compress', false, true], ['tls+compress', true, true]];

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
  const t = Date.now();
  try {
    await fn();
    console.log(`ok: ${name} (${((Date.now() - t) / 1000).toFixed(1)}s)`);
  } catch (e) {
    check(false, `${name}: unexpected ${e.code || e.name}: ${e.message}`);
  }
}
function blob(n) {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = i % 256;
  return b;
}

function connect(tls, compress, ca = CA) {
  const opts = {
    host: HOST, port: PORT, user: USER, password: PASS, database: 'test', connectTimeout: 10000,
    compress, flags: ['+LOCAL_FILES'], infileStreamFactory: (p) => fs.createReadStream(p),
    maxPreparedStatements: 4,
  };
  if (tls) opts.ssl = { ca: fs.readFileSync(ca), rejectUnauthorized: true };
  return mysql.createConnection(opts);
}
const rows = async (c, sql, params) => (await c.query({ sql, rowsAsArray: true }, params))[0];
async function status(c, name) {
  const r = await rows(c, `SHOW SESSION STATUS LIKE '${name}'`);
  return r.length ? String(r[0][1]) : '';
}

async function session(mode, tls, compress) {
  const c = await connect(tls, compress);
  eq(await rows(c, 'SELECT 40 + 2'), [[42]], `${mode}: query`);
  const stream = c.connection.stream;
  const mine = typeof stream.getCipher === 'function' ? [stream.getProtocol(), stream.getCipher().name] : null;
  const cipher = await status(c, 'Ssl_cipher');
  const compression = await status(c, 'Compression');
  console.log(`  ${mode}: client says ${JSON.stringify(mine)}; server says Ssl_version=${JSON.stringify(await status(c, 'Ssl_version'))} Ssl_cipher=${JSON.stringify(cipher)} Compression=${compression}`);
  eq(mine !== null, tls, `${mode}: client-side TLS ${JSON.stringify(mine)}`);
  eq(cipher !== '', EXPECT_TLS === 'client' ? tls : EXPECT_TLS === '1', `${mode}: server sees TLS (${cipher})`);
  eq(compression, EXPECT_COMPRESSION === 'client' ? (compress ? 'ON' : 'OFF') : EXPECT_COMPRESSION, `${mode}: server's Compression`);

  const t = `tls_node_${mode.replace('+', '_')}`;
  await c.query(`CREATE OR REPLACE TABLE ${t} (id INT PRIMARY KEY, b LONGBLOB)`);
  const data = blob(20 << 20);
  await c.execute(`INSERT INTO ${t} VALUES (1, ?)`, [data]);
  const sha = crypto.createHash('sha256').update(data).digest('hex');
  eq(await rows(c, `SELECT LENGTH(b), SHA2(b, 256) FROM ${t}`), [[data.length, sha]], `${mode}: 20 MiB up`);
  const back = (await rows(c, `SELECT b FROM ${t}`))[0][0];
  check(Buffer.isBuffer(back) && back.equals(data), `${mode}: 20 MiB down differs`);
  await c.query(`DROP TABLE ${t}`);

  const file = path.join(TMP, `tls_node_${process.pid}.tsv`);
  fs.writeFileSync(file, Array.from({ length: 5000 }, (_, i) => `${i}\tname ${i}\n`).join(''));
  await c.query(`CREATE OR REPLACE TABLE ${t} (id INT, name VARCHAR(20))`);
  const [r] = await c.query(`LOAD DATA LOCAL INFILE '${file}' INTO TABLE ${t}`);
  eq(r.affectedRows, 5000, `${mode}: rows loaded`);
  eq(await rows(c, `SELECT COUNT(*), SUM(id), MAX(name) FROM ${t}`), [['5000', '12497500', 'name 999']].map((x) => [+x[0], x[1], x[2]]), `${mode}: LOAD DATA LOCAL`);
  await c.query(`DROP TABLE ${t}`);
  fs.unlinkSync(file);
  await c.end();
}

async function main() {
  for (const [mode, tls, compress] of MODES) await step(`${mode} session`, () => session(mode, tls, compress));
  await step('certificate from another CA refused', async () => {
    if (!OTHER_CA) return;
    try {
      const c = await connect(true, false, OTHER_CA);
      check(false, 'a certificate the client\'s CA did not sign was accepted');
      c.destroy();
    } catch (e) {
      console.log(`  another CA: refused (${e.code}: ${e.message.slice(0, 100)})`);
    }
  });
  const what = `mysql2 ${require('mysql2/package.json').version} (node ${process.version}) over TLS/compression to ${HOST}:${PORT}`;
  if (failures.length) {
    console.error(`${what}: ${failures.length} mismatch(es)`);
    for (const f of failures) console.error(`  - ${f}`);
    process.exit(1);
  }
  console.log(`${what}: all checks passed`);
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(2);
});
