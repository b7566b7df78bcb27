<?php
// Routing and deferred connect through mysql-lb for PHP mysqli and PDO_mysql (mysqlnd). mysql-lb
// routes MLB_ROUTED_USER and the schema MLB_ROUTED_SCHEMA to the server on MLB_PORT_B, the rest to
// MLB_PORT_A. Each login is checked for the server it reached, the account, the proxy's connection
// id and the server version; refusals are compared with the same login made directly.
// Exits non-zero with one line per mismatch. Run by tests/routing.rs.

error_reporting(E_ALL);
mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);

$HOST = getenv('MLB_PROXY_HOST');
$PROXY = (int)getenv('MLB_PROXY_PORT');
$A = (int)getenv('MLB_PORT_A');
$B = (int)getenv('MLB_PORT_B');
$USER = getenv('MLB_USER');
$PASS = getenv('MLB_PASS');
$ROUTED = getenv('MLB_ROUTED_USER');
$ROUTED_PASS = getenv('MLB_ROUTED_PASS');
$SCHEMA = getenv('MLB_ROUTED_SCHEMA');
const PROXY_ID_BASE = 0x60000000;

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
    try {
        $fn();
        echo "ok: $name\n";
    } catch (Throwable $e) {
        check(false, "$name: unexpected " . get_class($e) . ': ' . $e->getMessage() . ' at line ' . $e->getLine());
    }
}

function my($port, $user, $pass, $db = null) {
    global $HOST;
    $m = mysqli_init();
    $m->options(MYSQLI_OPT_CONNECT_TIMEOUT, 10);
    $m->real_connect($HOST, $user, $pass, $db, $port);
    return $m;
}
function pdo($port, $user, $pass, $db = null) {
    global $HOST;
    $dsn = "mysql:host=$HOST;port=$port" . ($db ? ";dbname=$db" : '');
    return new PDO($dsn, $user, $pass, [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION, PDO::ATTR_TIMEOUT => 10]);
}

// Rows as strings: whether a library returns native integers depends on its version and mode.
function strs($rows) {
    return array_map(fn($r) => array_map('strval', $r), $rows);
}

function landing($user, $pass, $db, $want, $what) {
    global $PROXY;
    $m = my($PROXY, $user, $pass, $db);
    eq(strs($m->query('SELECT @@port, CURRENT_USER()')->fetch_all(MYSQLI_NUM)), [[(string)$want, "$user@%"]], "mysqli $what");
    check($m->thread_id >= PROXY_ID_BASE, "mysqli $what: thread id " . dechex($m->thread_id) . ' should be a proxy id');
    $direct = my($want, $user, $pass, $db);
    eq($m->server_info, $direct->server_info, "mysqli $what: server version");
    $direct->close();
    $st = $m->prepare('SELECT ? + 1');
    $n = 41;
    $st->bind_param('i', $n);
    $st->execute();
    eq($st->get_result()->fetch_all(MYSQLI_NUM), [[42]], "mysqli $what: prepared statement");
    $m->close();

    $p = pdo($PROXY, $user, $pass, $db);
    eq(strs($p->query('SELECT @@port, CURRENT_USER()')->fetchAll(PDO::FETCH_NUM)), [[(string)$want, "$user@%"]], "PDO $what");
    $p->setAttribute(PDO::ATTR_EMULATE_PREPARES, false);
    $st = $p->prepare('SELECT ? + 1');
    $st->execute([41]);
    eq((int)$st->fetchColumn(), 42, "PDO $what: server-side prepared statement");
}

function refusals() {
    global $PROXY, $A, $B, $USER, $ROUTED, $SCHEMA;
    $cases = [[$ROUTED, 'wrong', null, $B], [$USER, 'wrong', $SCHEMA, $B], ['nobody_here', 'x', null, $A]];
    foreach ($cases as [$user, $pass, $db, $server]) {
        $what = "$user/$pass/" . ($db ?? '-');
        $got = [];
        foreach (['direct' => $server, 'proxy' => $PROXY] as $where => $port) {
            try {
                my($port, $user, $pass, $db);
                $got[$where] = null;
            } catch (mysqli_sql_exception $e) {
                $got[$where] = [$e->getCode(), $e->getSqlState(), $e->getMessage()];
            }
            try {
                pdo($port, $user, $pass, $db);
                $got["pdo $where"] = null;
            } catch (PDOException $e) {
                $got["pdo $where"] = [$e->getCode(), $e->getMessage()];
            }
        }
        check(($got['direct'][0] ?? 0) === 1045, "$what direct: " . json_encode($got['direct']));
        eq($got['proxy'], $got['direct'], "mysqli $what: proxy vs direct");
        eq($got['pdo proxy'], $got['pdo direct'], "PDO $what: proxy vs direct");
    }
}

step('logins land on their pools', function () {
    global $A, $B, $USER, $PASS, $ROUTED, $ROUTED_PASS, $SCHEMA;
    landing($USER, $PASS, null, $A, 'unrouted user: pool default');
    landing($ROUTED, $ROUTED_PASS, null, $B, 'routed user');
    landing($USER, $PASS, $SCHEMA, $B, 'routed schema');
});
step("refusals are the server's own", 'refusals');

if ($failures) {
    fwrite(STDERR, 'PHP routing: ' . count($failures) . " mismatch(es)\n");
    exit(1);
}
echo 'PHP ' . PHP_VERSION . " mysqli/PDO routing: all checks passed\n";
