<?php
// TLS and compression with PHP mysqli and PDO_mysql (mysqlnd), run by tests/tls_clients.rs.
// Connects to MLB_HOST:MLB_PORT (MariaDB itself, or mysql-lb in front of it) with TLS required
// and the server's certificate verified against MLB_CA for the name MLB_HOST, with compression
// (MYSQLI_CLIENT_COMPRESS, PDO::MYSQL_ATTR_COMPRESS), and both; in each mode a query, a 20 MiB
// BLOB round trip and LOAD DATA LOCAL INFILE. What the server says of the session is checked
// against MLB_EXPECT_BACKEND_TLS / MLB_EXPECT_BACKEND_COMPRESSION (`client` = as the client leg,
// or 1/0 and ON/OFF: through mysql-lb the server sees the backend leg). mysqlnd does not report
// its own connection's cipher, so only the server's view is printed. A client trusting only
// MLB_OTHER_CA must be refused. Exits non-zero with one line per mismatch.

error_reporting(E_ALL);
mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);

$E = fn($k, $d) => getenv($k) !== false ? getenv($k) : $d;
$HOST = $E('MLB_HOST', '127.0.0.1');
$PORT = (int)$E('MLB_PORT', '3306');
$USER = $E('MLB_USER', 'bench');
$PASS = $E('MLB_PASS', 'bench');
$CA = $E('MLB_CA', '');
$OTHER_CA = $E('MLB_OTHER_CA', '');
$TMP = $E('MLB_TMP', '/tmp');
$EXPECT_TLS = $E('MLB_EXPECT_BACKEND_TLS', 'client');
$EXPECT_COMPRESSION = $E('MLB_EXPECT_BACKEND_COMPRESSION', 'client');
const MODES = [['tls', true, false], ['compress', false, true], ['tls+compress', true, true]];

$failures = [];
function check($cond, $what) {
    global $failures;
    if (!$cond) {
        $failures[] = $what;
        fwrite(STDERR, "MISMATCH: $what\n");
    }
}
function eq($got, $want, $what) {
    check($got === $want, "$what: got " . json_encode($got) . ', want ' . json_encode($want));
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

function my($tls, $compress, $ca = null) {
    global $HOST, $PORT, $USER, $PASS, $CA;
    $m = mysqli_init();
    $m->options(MYSQLI_OPT_CONNECT_TIMEOUT, 10);
    $m->options(MYSQLI_OPT_LOCAL_INFILE, true);
    $flags = $compress ? MYSQLI_CLIENT_COMPRESS : 0;
    if ($tls) {
        $m->ssl_set(null, null, $ca ?? $CA, null, null);
        $m->options(MYSQLI_OPT_SSL_VERIFY_SERVER_CERT, true);
        $flags |= MYSQLI_CLIENT_SSL;
    }
    $m->real_connect($HOST, $USER, $PASS, 'test', $PORT, null, $flags);
    return $m;
}
function pdo($tls, $compress, $ca = null) {
    global $HOST, $PORT, $USER, $PASS, $CA;
    $opts = [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION, PDO::ATTR_TIMEOUT => 10,
        PDO::MYSQL_ATTR_LOCAL_INFILE => true, PDO::MYSQL_ATTR_COMPRESS => $compress];
    if ($tls) {
        $opts[PDO::MYSQL_ATTR_SSL_CA] = $ca ?? $CA;
        $opts[PDO::MYSQL_ATTR_SSL_VERIFY_SERVER_CERT] = true;
    }
    return new PDO("mysql:host=$HOST;port=$PORT;dbname=test", $USER, $PASS, $opts);
}
// Rows of $sql as arrays of strings, for either API.
function rows($c, $sql) {
    return $c instanceof PDO ? $c->query($sql)->fetchAll(PDO::FETCH_NUM) : $c->query($sql)->fetch_all(MYSQLI_NUM);
}
function status($c, $name) {
    $r = rows($c, "SHOW SESSION STATUS LIKE '$name'");
    return $r ? $r[0][1] : '';
}

function session($api, $mode, $tls, $compress) {
    global $EXPECT_TLS, $EXPECT_COMPRESSION, $TMP;
    $c = $api === 'mysqli' ? my($tls, $compress) : pdo($tls, $compress);
    eq(rows($c, 'SELECT 40 + 2'), [[$api === 'mysqli' ? '42' : 42]], "$api $mode: query");
    $cipher = status($c, 'Ssl_cipher');
    $compression = status($c, 'Compression');
    printf("  %s %s: server says Ssl_version=%s Ssl_cipher=%s Compression=%s\n", $api, $mode,
        json_encode(status($c, 'Ssl_version')), json_encode($cipher), $compression);
    $want_tls = $EXPECT_TLS === 'client' ? $tls : $EXPECT_TLS === '1';
    eq($cipher !== '', $want_tls, "$api $mode: server sees TLS ($cipher)");
    $want_c = $EXPECT_COMPRESSION === 'client' ? ($compress ? 'ON' : 'OFF') : $EXPECT_COMPRESSION;
    eq($compression, $want_c, "$api $mode: server's Compression");

    $t = 'tls_php_' . $api . '_' . str_replace('+', '_', $mode);
    $c->query("CREATE OR REPLACE TABLE $t (id INT PRIMARY KEY, b LONGBLOB)");
    $data = blob(20 << 20);
    if ($c instanceof PDO) {
        $st = $c->prepare("INSERT INTO $t VALUES (1, ?)");
        $st->bindValue(1, $data, PDO::PARAM_LOB);
        $st->execute();
    } else {
        $st = $c->prepare("INSERT INTO $t VALUES (1, ?)");
        $null = null;
        $st->bind_param('b', $null);
        foreach (str_split($data, 1 << 20) as $chunk) $st->send_long_data(0, $chunk);
        $st->execute();
    }
    eq(array_map('strval', rows($c, "SELECT LENGTH(b), SHA2(b, 256) FROM $t")[0]),
        [(string)strlen($data), hash('sha256', $data)], "$api $mode: 20 MiB up");
    check(rows($c, "SELECT b FROM $t")[0][0] === $data, "$api $mode: 20 MiB down differs");
    $c->query("DROP TABLE $t");

    $file = "$TMP/tls_php_" . getmypid() . '.tsv';
    $lines = '';
    for ($i = 0; $i < 5000; $i++) $lines .= "$i\tname $i\n";
    file_put_contents($file, $lines);
    $c->query("CREATE OR REPLACE TABLE $t (id INT, name VARCHAR(20))");
    $c->query("LOAD DATA LOCAL INFILE '$file' INTO TABLE $t");
    eq(array_map('strval', rows($c, "SELECT COUNT(*), SUM(id), MAX(name) FROM $t")[0]),
        ['5000', '12497500', 'name 999'], "$api $mode: LOAD DATA LOCAL");
    $c->query("DROP TABLE $t");
    unlink($file);
}

foreach (['mysqli', 'pdo'] as $api) {
    foreach (MODES as [$mode, $tls, $compress]) {
        step("$api $mode session", fn() => session($api, $mode, $tls, $compress));
    }
}
step('certificate from another CA refused', function () use ($OTHER_CA) {
    if ($OTHER_CA === '') return;
    foreach (['mysqli', 'pdo'] as $api) {
        try {
            @($api === 'mysqli' ? my(true, false, $OTHER_CA) : pdo(true, false, $OTHER_CA));
            check(false, "$api: a certificate the client's CA did not sign was accepted");
        } catch (Throwable $e) {
            printf("  %s, another CA: refused (%s)\n", $api, substr($e->getMessage(), 0, 120));
        }
    }
});

$what = "PHP " . PHP_VERSION . " mysqli/PDO over TLS/compression to $HOST:$PORT";
if ($failures) {
    fwrite(STDERR, "$what: " . count($failures) . " mismatch(es)\n");
    foreach ($failures as $f) fwrite(STDERR, "  - $f\n");
    exit(1);
}
echo "$what: all checks passed\n";
