<?php
// PHP mysqli and PDO_mysql (both on mysqlnd, PHP's own protocol code) through mysql-lb,
// compared with a direct connection. Exits non-zero with one line per mismatch.
// Run by tests/other_clients.rs; settings come from the MLB_* environment variables.

error_reporting(E_ALL);
mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);

$E = fn($k, $d) => getenv($k) !== false ? getenv($k) : $d;
$DIRECT = [$E('MLB_DIRECT_HOST', '127.0.0.1'), (int)$E('MLB_DIRECT_PORT', '3306')];
$PROXY = [$E('MLB_PROXY_HOST', '127.0.0.1'), (int)$E('MLB_PROXY_PORT', '4040')];
$SOCK = $E('MLB_PROXY_SOCKET', '');
$USER = $E('MLB_USER', 'bench');
$PASS = $E('MLB_PASS', 'bench');
$TMP = $E('MLB_TMP', '/tmp');
const PROXY_ID_BASE = 0x60000000;

$failures = [];
function check($cond, $what) {
    global $failures;
    if (!$cond) {
        $failures[] = $what;
        fwrite(STDERR, "MISMATCH: $what\n");
    }
}
function short($v) {
    $s = json_encode($v, JSON_INVALID_UTF8_SUBSTITUTE | JSON_UNESCAPED_UNICODE);
    return strlen($s) > 300 ? substr($s, 0, 300) . '... (' . strlen($s) . ' chars)' : $s;
}
function eq($got, $want, $what) {
    check($got === $want, "$what: got " . short($got) . ', want ' . short($want));
}
function step($name, $fn) {
    $t0 = microtime(true);
    try {
        $fn();
        printf("ok: %s (%.1fs)\n", $name, microtime(true) - $t0);
    } catch (Throwable $e) {
        check(false, "$name: unexpected " . get_class($e) . ': ' . $e->getMessage() . ' at line ' . $e->getLine());
    }
}
function blob($n) {
    $p = '';
    for ($i = 0; $i < 256; $i++) $p .= chr($i);
    $p = str_repeat($p, 64);
    return substr(str_repeat($p, intdiv($n, strlen($p)) + 1), 0, $n);
}

function my($where, $flags = 0, $pass = null, $db = 'test') {
    global $DIRECT, $PROXY, $SOCK, $USER, $PASS;
    $m = mysqli_init();
    $m->options(MYSQLI_OPT_CONNECT_TIMEOUT, 5);
    $m->options(MYSQLI_OPT_LOCAL_INFILE, true);
    $m->options(MYSQLI_OPT_READ_TIMEOUT, 20);
    if ($where === 'socket') {
        $m->real_connect('localhost', $USER, $pass ?? $PASS, $db, 0, $SOCK, $flags);
    } else {
        [$h, $p] = $where === 'direct' ? $DIRECT : $PROXY;
        $m->real_connect($h, $USER, $pass ?? $PASS, $db, $p, null, $flags);
    }
    return $m;
}
function pdo($where, $opts = []) {
    global $DIRECT, $PROXY, $SOCK, $USER, $PASS;
    if ($where === 'socket') {
        $dsn = "mysql:unix_socket=$SOCK;dbname=test;charset=utf8mb4";
    } else {
        [$h, $p] = $where === 'direct' ? $DIRECT : $PROXY;
        $dsn = "mysql:host=$h;port=$p;dbname=test;charset=utf8mb4";
    }
    return new PDO($dsn, $USER, $PASS, $opts + [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION, PDO::ATTR_TIMEOUT => 5]);
}
function all($m, $sql) {
    return $m->query($sql)->fetch_all(MYSQLI_NUM);
}

// `php php_check.php kill-when-running TID SQL`: the killer of the lost-backend check, its own
// process because a PDO query blocks this one. KILL CONNECTION of server thread TID once it
// runs SQL, on a direct admin connection; exit 1 if it never does.
if (($argv[1] ?? '') === 'kill-when-running') {
    [, , $tid, $sql] = $argv;
    $admin = my('direct');
    $deadline = microtime(true) + 20;
    while (microtime(true) < $deadline) {
        $st = $admin->prepare('SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO = ?');
        $st->bind_param('is', $tid, $sql);
        $st->execute();
        if ($st->get_result()->fetch_row()[0] == 1) {
            $admin->query("KILL CONNECTION $tid");
            exit(0);
        }
        usleep(20000);
    }
    fwrite(STDERR, "thread $tid never ran $sql\n");
    exit(1);
}
function start_killer($tid, $sql) {
    $cmd = [PHP_BINARY, __FILE__, 'kill-when-running', (string)$tid, $sql];
    $p = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => STDOUT, 2 => STDERR], $pipes);
    check($p !== false, 'cannot start the killer process');
    return $p;
}

step('mysqli login, thread id, ping, select_db', function () use ($USER) {
    $server = my('direct')->server_info;
    foreach (['proxy', 'socket'] as $w) {
        $m = my($w);
        eq(all($m, 'SELECT 1 + 1, CURRENT_USER()'), [['2', "$USER@%"]], "$w: select");
        check($m->thread_id >= PROXY_ID_BASE && $m->thread_id < 2 ** 31, "$w: thread_id " . dechex($m->thread_id) . ' should be a proxy id');
        eq($m->server_info, $server, "$w: server version");
        eq($m->ping(), true, "$w: ping");
        $m->select_db('mysql');
        eq(all($m, 'SELECT DATABASE()'), [['mysql']], "$w: select_db");
        $m->close();
    }
});

step('wrong password (mysqli and PDO)', function () {
    $got = [];
    foreach (['direct', 'proxy', 'socket'] as $w) {
        try {
            my($w, 0, 'wrong');
            $got[$w] = null;
        } catch (mysqli_sql_exception $e) {
            $got[$w] = [$e->getCode(), $e->getSqlState(), $e->getMessage()];
        }
        try {
            global $USER;
            pdo($w, []);
        } catch (PDOException $e) {
            check(false, "$w: PDO login failed: " . $e->getMessage());
        }
    }
    eq($got['direct'][0] ?? null, 1045, 'direct wrong password code');
    eq($got['proxy'], $got['direct'], 'wrong password: proxy vs direct');
    eq($got['socket'], $got['direct'], 'wrong password over the socket: proxy vs direct');
});

step('mysqli prepared statements, every type, NULL', function () {
    $res = [];
    foreach (['direct', 'proxy'] as $w) {
        $m = my($w);
        $m->query('CREATE OR REPLACE TABLE php_types (id INT PRIMARY KEY, i BIGINT, u BIGINT UNSIGNED,
            d DOUBLE, dec_ DECIMAL(30,10), dt DATE, ts DATETIME(6), tm TIME, s VARCHAR(50) CHARACTER SET utf8mb4,
            b LONGBLOB, n INT NULL)');
        $st = $m->prepare('INSERT INTO php_types VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)');
        $id = 1; $i = PHP_INT_MIN; $u = '18446744073709551615'; $d = 2.5; $dec = '-12345678901234567890.0123456789';
        $dt = '2024-02-29'; $ts = '2024-02-29 23:59:58.123456'; $tm = '-838:59:59'; $s = "h\u{e9}llo \u{1F600} 'q'";
        $b = null; $n = null;
        $st->bind_param('iisdsssssbi', $id, $i, $u, $d, $dec, $dt, $ts, $tm, $s, $b, $n);
        $st->send_long_data(9, blob(300000));
        $st->execute();
        eq($st->affected_rows, 1, "$w: insert affected");
        $q = $m->prepare('SELECT * FROM php_types WHERE id = ? AND n IS NULL');
        $q->bind_param('i', $id);
        $q->execute();
        $r = $q->get_result()->fetch_all(MYSQLI_NUM);
        eq(count($r), 1, "$w: one row");
        eq($r[0][1], PHP_INT_MIN, "$w: bigint min");
        eq((string)$r[0][2], '18446744073709551615', "$w: bigint unsigned max");
        eq($r[0][4], '-12345678901234567890.0123456789', "$w: decimal");
        eq($r[0][6], '2024-02-29 23:59:58.123456', "$w: datetime(6)");
        eq($r[0][7], '-838:59:59', "$w: negative time");
        eq($r[0][8], "h\u{e9}llo \u{1F600} 'q'", "$w: utf8mb4");
        check($r[0][9] === blob(300000), "$w: 300 KB blob sent with send_long_data");
        eq($r[0][10], null, "$w: NULL");
        $res[$w] = $r;
    }
    eq($res['proxy'], $res['direct'], 'prepared SELECT: proxy vs direct');
});

step('mysqli 20 MiB blob', function () {
    $m = my('proxy');
    $data = blob(20 << 20);
    $m->query('CREATE TABLE IF NOT EXISTS php_blob (id INT PRIMARY KEY, b LONGBLOB)');
    $st = $m->prepare('REPLACE INTO php_blob VALUES (1, ?)');
    $st->bind_param('s', $data);
    $st->execute();
    eq(all($m, 'SELECT LENGTH(b), SHA2(b, 256) FROM php_blob WHERE id = 1'),
        [[(string)strlen($data), hash('sha256', $data)]], 'blob on the server');
    $got = all($m, 'SELECT b FROM php_blob WHERE id = 1')[0][0];
    check($got === $data, '20 MiB blob read back (text protocol) differs');
    $q = $m->prepare('SELECT b FROM php_blob WHERE id = 1');
    $q->execute();
    $got = $q->get_result()->fetch_row()[0];
    check($got === $data, '20 MiB blob read back (binary protocol) differs');
});

step('mysqli multi_query and CALL', function () {
    $res = [];
    foreach (['direct', 'proxy'] as $w) {
        $m = my($w);
        $m->query('DROP PROCEDURE IF EXISTS php_two');
        $m->query('CREATE PROCEDURE php_two(IN x INT) BEGIN SELECT x AS a; SELECT x * 2 AS b; END');
        $sets = [];
        $m->multi_query("SELECT 1; SELECT 'x', 2; DO 0; CALL php_two(4)");
        do {
            $r = $m->store_result();
            $sets[] = $r ? $r->fetch_all(MYSQLI_NUM) : $m->affected_rows;
        } while ($m->next_result());
        // A prepared CALL: binary multi-results.
        $st = $m->prepare('CALL php_two(?)');
        $x = 9;
        $st->bind_param('i', $x);
        $st->execute();
        do {
            $r = $st->get_result();
            $sets[] = $r ? $r->fetch_all(MYSQLI_NUM) : 'status';
        } while ($st->more_results() && $st->next_result());
        $st->close();
        eq(all($m, "SELECT 'after'"), [['after']], "$w: after CALL");
        $res[$w] = $sets;
    }
    eq($res['proxy'], $res['direct'], 'multi_query / CALL: proxy vs direct');
    eq(array_slice($res['proxy'], 0, 5), [[['1']], [['x', '2']], 0, [['4']], [['8']]], 'multi_query values');
});

step('mysqli transactions', function () {
    $m = my('proxy');
    $o = my('direct');
    $m->query('CREATE TABLE IF NOT EXISTS php_tx (id INT PRIMARY KEY) ENGINE=InnoDB');
    $m->query('DELETE FROM php_tx');
    $m->begin_transaction();
    $m->query('INSERT INTO php_tx VALUES (1)');
    eq(all($o, 'SELECT COUNT(*) FROM php_tx'), [['0']], 'uncommitted hidden');
    $m->rollback();
    $m->begin_transaction(MYSQLI_TRANS_START_READ_ONLY);
    try {
        $m->query('INSERT INTO php_tx VALUES (2)');
        check(false, 'write in a read-only transaction accepted');
    } catch (mysqli_sql_exception $e) {
        eq($e->getCode(), 1792, 'read-only transaction error');
    }
    $m->commit();
    $m->autocommit(false);
    $m->query('INSERT INTO php_tx VALUES (3)');
    $m->commit();
    eq(all($o, 'SELECT id FROM php_tx'), [['3']], 'committed');
});

step('mysqli LOAD DATA LOCAL INFILE', function () use ($TMP) {
    $path = "$TMP/php_infile.csv";
    $f = fopen($path, 'w');
    for ($i = 0; $i < 1000; $i++) fwrite($f, "$i,name $i\n");
    fclose($f);
    $m = my('proxy');
    $m->query('CREATE OR REPLACE TABLE php_load (id INT, name VARCHAR(20))');
    $m->query("LOAD DATA LOCAL INFILE '$path' INTO TABLE php_load FIELDS TERMINATED BY ','");
    eq($m->affected_rows, 1000, 'rows loaded');
    eq(all($m, 'SELECT COUNT(*), SUM(id), MAX(name) FROM php_load'), [['1000', '499500', 'name 999']], 'loaded contents');
});

step('mysqli change_user / reset_connection / kill', function () use ($USER, $PASS) {
    foreach (['direct', 'proxy'] as $w) {
        $m = my($w);
        $m->query('SET @v = 1');
        eq($m->change_user($USER, $PASS, 'mysql'), true, "$w: change_user");
        eq(all($m, 'SELECT @v, DATABASE()'), [[null, 'mysql']], "$w: after change_user");
        try {
            $r = $m->change_user($USER, 'wrong', 'test');
            check(false, "$w: change_user with a wrong password returned " . var_export($r, true));
        } catch (mysqli_sql_exception $e) {
            eq($e->getCode(), 1045, "$w: change_user wrong password");
        }
    }
});

step('mysqli server-side cursor (COM_STMT_FETCH)', function () {
    $res = [];
    foreach (['direct', 'proxy'] as $w) {
        $m = my($w);
        $st = $m->prepare('SELECT seq, REPEAT(\'y\', seq % 40) FROM seq_1_to_3000 WHERE seq > ?');
        $st->attr_set(MYSQLI_STMT_ATTR_CURSOR_TYPE, MYSQLI_CURSOR_TYPE_READ_ONLY);
        $x = 0;
        $st->bind_param('i', $x);
        $st->execute();
        $st->bind_result($a, $b);
        $n = 0; $sum = 0;
        while ($st->fetch()) { $n++; $sum += $a; }
        $st->close();
        $res[$w] = [$n, $sum];
        eq(all($m, 'SELECT 2'), [['2']], "$w: after cursor");
    }
    eq($res['proxy'], [3000, 4501500], 'cursor rows');
    eq($res['proxy'], $res['direct'], 'cursor: proxy vs direct');
});

step('mysqli compression', function () {
    // Through the proxy only the client's leg is compressed (the backend leg is plain unless
    // `backend_compression` is set), so the backend's own status says OFF there.
    foreach (['direct' => 'ON', 'proxy' => 'OFF'] as $w => $want) {
        $m = my($w, MYSQLI_CLIENT_COMPRESS);
        eq(all($m, "SHOW SESSION STATUS LIKE 'Compression'"), [['Compression', $want]], "$w: compression");
        eq(all($m, "SELECT LENGTH(REPEAT('z', 100000))"), [['100000']], "$w: query");
    }
});

step('mysqli TLS required fails clearly', function () use ($PROXY, $USER, $PASS) {
    $t = microtime(true);
    $m = mysqli_init();
    $m->options(MYSQLI_OPT_CONNECT_TIMEOUT, 5);
    $m->ssl_set(null, null, null, null, null);
    try {
        @$m->real_connect($PROXY[0], $USER, $PASS, 'test', $PROXY[1], null, MYSQLI_CLIENT_SSL | MYSQLI_CLIENT_SSL_DONT_VERIFY_SERVER_CERT);
        // mysqlnd goes on in plaintext when the server offers no TLS (the same with such a server).
        eq(all($m, "SHOW STATUS LIKE 'Ssl_cipher'"), [['Ssl_cipher', '']], 'plaintext');
    } catch (mysqli_sql_exception $e) {
        check(true, '');
    }
    check(microtime(true) - $t < 5, 'TLS attempt took too long');
});

step('KILL QUERY of a sleeping mysqli session', function () {
    foreach (['thread_id', 'CONNECTION_ID()'] as $how) {
        $victim = my('proxy');
        $killer = my('proxy');
        $id = $how === 'thread_id' ? $victim->thread_id : (int)all($victim, 'SELECT CONNECTION_ID()')[0][0];
        $t = microtime(true);
        $victim->query('SELECT SLEEP(20)', MYSQLI_ASYNC);
        usleep(300000);
        $killer->query("KILL QUERY $id");
        $links = $errors = $reject = [$victim];
        mysqli_poll($links, $errors, $reject, 15);
        try {
            $r = $victim->reap_async_query();
            eq($r->fetch_all(MYSQLI_NUM), [['1']], "$how: interrupted SLEEP returns 1");
        } catch (mysqli_sql_exception $e) {
            eq($e->getCode(), 1317, "$how: interrupted");
        }
        check(microtime(true) - $t < 10, "$how: KILL QUERY took too long");
        eq(all($victim, "SELECT 'alive'"), [['alive']], "$how: victim alive");
        $killer->query("KILL $id");
        usleep(200000);
        try {
            $victim->query('SELECT 1');
            check(false, "$how: victim survived KILL");
        } catch (mysqli_sql_exception $e) {
            check(in_array($e->getCode(), [2006, 2013, 1927, 4031], true), "$how: killed victim error " . $e->getCode());
        }
    }
});

step('PDO prepared (native and emulated), NULL, blob, multi rowsets', function () {
    $res = [];
    foreach (['direct', 'proxy', 'socket'] as $w) {
        foreach ([false, true] as $emulate) {
            $p = pdo($w, [PDO::ATTR_EMULATE_PREPARES => $emulate, PDO::ATTR_STRINGIFY_FETCHES => true]);
            $st = $p->prepare('SELECT ?, ?, ?, ?, CAST(? AS DECIMAL(12,4))');
            $st->bindValue(1, null, PDO::PARAM_NULL);
            $st->bindValue(2, 42, PDO::PARAM_INT);
            $st->bindValue(3, "it's \u{1F600}", PDO::PARAM_STR);
            $st->bindValue(4, blob(70000), PDO::PARAM_LOB);
            $st->bindValue(5, '-1234.5678', PDO::PARAM_STR);
            $st->execute();
            $row = $st->fetch(PDO::FETCH_NUM);
            eq($row[0], null, "$w emulate=$emulate: NULL");
            eq((string)$row[1], '42', "$w emulate=$emulate: int");
            eq($row[2], "it's \u{1F600}", "$w emulate=$emulate: string");
            check($row[3] === blob(70000), "$w emulate=$emulate: 70 KB blob");
            eq($row[4], '-1234.5678', "$w emulate=$emulate: decimal");
            $p->exec('DROP PROCEDURE IF EXISTS pdo_two');
            $p->exec('CREATE PROCEDURE pdo_two(IN x INT) BEGIN SELECT x AS a; SELECT x + 1 AS b, NULL AS c; END');
            $st = $p->prepare('CALL pdo_two(?)');
            $st->execute([10]);
            $sets = [];
            do {
                if ($st->columnCount() > 0) $sets[] = $st->fetchAll(PDO::FETCH_NUM);
            } while ($st->nextRowset());
            $res["$w/$emulate"] = $sets;
            // Native prepares also report the CALL's own status as an empty rowset.
            eq(array_slice($sets, 0, 2), [[['10']], [['11', null]]], "$w emulate=$emulate: CALL rowsets");
            eq($sets, $res["direct/$emulate"], "$w emulate=$emulate: CALL rowsets vs direct");
            eq($p->query('SELECT 5')->fetchColumn(), '5', "$w emulate=$emulate: after CALL");
        }
    }
});

step('PDO unbuffered query abandoned mid-result, then reused', function () {
    foreach (['direct', 'proxy'] as $w) {
        $p = pdo($w, [PDO::MYSQL_ATTR_USE_BUFFERED_QUERY => false]);
        $st = $p->query('SELECT seq FROM seq_1_to_100000');
        eq($st->fetchColumn(), 1, "$w: first row");
        $st->closeCursor();
        eq($p->query('SELECT 6')->fetchColumn(), 6, "$w: next query after an abandoned result");
    }
});

// The server thread behind a session is killed mid-statement (MariaDB closes without an ERR):
// what the driver raises, and the way back, are what they are directly. An ERR of the proxy's
// instead (1105 `mysql-lb: backend … closed the connection mid-response`) shows as its own code.
step('mysqli: backend connection lost mid-statement', function () {
    $seen = [];
    foreach (['direct', 'proxy', 'socket'] as $w) {
        $m = my($w);
        $tid = (int)all($m, 'SELECT CONNECTION_ID()')[0][0];
        $killer = start_killer($tid, 'SELECT SLEEP(5)');
        try {
            $m->query('SELECT SLEEP(5)');
            $got = ['no error'];
        } catch (mysqli_sql_exception $e) {
            $got = [get_class($e), $e->getCode(), $e->getSqlState(), $e->getMessage()];
        }
        eq(proc_close($killer), 0, "$w: killer");
        try {
            $m->query('SELECT 1');
            $next = ['no error'];
        } catch (mysqli_sql_exception $e) {
            $next = [$e->getCode(), $e->getSqlState()];
        }
        try {
            $ping = @$m->ping();
        } catch (mysqli_sql_exception $e) {
            $ping = $e->getCode();
        }
        $seen[$w] = ['error' => $got, 'next query' => $next, 'ping' => $ping];
        $m2 = my($w);
        eq(all($m2, "SELECT 'back'"), [['back']], "$w: a new connection afterwards");
        $m2->close();
    }
    echo '  mysqli lost connection, direct: ' . short($seen['direct']) . "\n";
    eq($seen['direct']['error'][1] ?? null, 2006, 'direct: lost connection code ' . short($seen['direct']));
    eq($seen['proxy'], $seen['direct'], 'mysqli lost connection: proxy vs direct');
    eq($seen['socket'], $seen['direct'], 'mysqli lost connection over the socket: proxy vs direct');
});

step('PDO: backend connection lost mid-statement', function () {
    $seen = [];
    foreach (['direct', 'proxy', 'socket'] as $w) {
        foreach ([false, true] as $emulate) {
            $p = pdo($w, [PDO::ATTR_EMULATE_PREPARES => $emulate]);
            $tid = (int)$p->query('SELECT CONNECTION_ID()')->fetchColumn();
            $killer = start_killer($tid, 'SELECT SLEEP(5)');
            try {
                $emulate ? $p->query('SELECT SLEEP(5)') : $p->prepare('SELECT SLEEP(5)')->execute();
                $got = ['no error'];
            } catch (PDOException $e) {
                $got = [get_class($e), $e->getCode(), $e->errorInfo, $e->getMessage()];
            }
            eq(proc_close($killer), 0, "$w emulate=$emulate: killer");
            try {
                $p->query('SELECT 1');
                $next = ['no error'];
            } catch (PDOException $e) {
                $next = [$e->getCode(), $e->errorInfo];
            }
            $seen["$w/$emulate"] = ['error' => $got, 'next query' => $next];
            $p = null;
            eq(pdo($w)->query("SELECT 'back'")->fetchColumn(), 'back', "$w emulate=$emulate: a new connection afterwards");
        }
    }
    echo '  PDO lost connection, direct: ' . short($seen['direct/']) . "\n";
    foreach ([false, true] as $emulate) {
        eq($seen["direct/$emulate"]['error'][2][1] ?? null, 2006, "direct emulate=$emulate: lost connection code " . short($seen["direct/$emulate"]));
        eq($seen["proxy/$emulate"], $seen["direct/$emulate"], "PDO emulate=$emulate lost connection: proxy vs direct");
        eq($seen["socket/$emulate"], $seen["direct/$emulate"], "PDO emulate=$emulate lost connection over the socket: proxy vs direct");
    }
});

if ($failures) {
    fwrite(STDERR, 'php ' . PHP_VERSION . ': ' . count($failures) . " mismatch(es)\n");
    foreach ($failures as $f) fwrite(STDERR, "  - $f\n");
    exit(1);
}
echo 'php ' . PHP_VERSION . " (mysqlnd): all checks passed\n";
