#!/usr/bin/perl
# Perl DBI with DBD::MariaDB (on libmariadb, with its own statement handling and auto-reconnect)
# through mysql-lb, compared with a direct connection. Exits non-zero with one line per mismatch.
# Run by tests/other_clients.rs; settings come from the MLB_* environment variables.
use strict;
use warnings;
use DBI;
use Time::HiRes qw(time usleep);

my %E = map { $_ => $ENV{$_} } grep { /^MLB_/ } keys %ENV;
my $USER = $E{MLB_USER} // 'bench';
my $PASS = $E{MLB_PASS} // 'bench';
my %DSN = (
    direct => "host=$E{MLB_DIRECT_HOST};port=$E{MLB_DIRECT_PORT}",
    proxy  => "host=$E{MLB_PROXY_HOST};port=$E{MLB_PROXY_PORT}",
    socket => "mariadb_socket=$E{MLB_PROXY_SOCKET}",
);
use constant PROXY_ID_BASE => 0x60000000;

my @failures;
sub check {
    my ($cond, $what) = @_;
    return if $cond;
    push @failures, $what;
    print STDERR "MISMATCH: $what\n";
}
sub show {
    my ($v) = @_;
    return 'undef' unless defined $v;
    return '[' . join(', ', map { show($_) } @$v) . ']' if ref $v eq 'ARRAY';
    return "'$v'";
}
sub eq_ {
    my ($got, $want, $what) = @_;
    check(show($got) eq show($want), "$what: got " . show($got) . ', want ' . show($want));
}
sub step {
    my ($name, $fn) = @_;
    my $t = time;
    if (eval { $fn->(); 1 }) {
        printf "ok: %s (%.1fs)\n", $name, time - $t;
    } else {
        check(0, "$name: unexpected error: $@");
    }
}
sub conn {
    my ($where, %opts) = @_;
    my $pass = delete $opts{password} // $PASS;
    return DBI->connect("DBI:MariaDB:database=test;$DSN{$where}", $USER, $pass,
        { RaiseError => 1, PrintError => 0, mariadb_connect_timeout => 5, %opts });
}
# What a failed call left on the handle: code, SQLSTATE, message.
sub err_of { my ($h) = @_; return [$h->err, $h->state, $h->errstr] }

# KILL CONNECTION of server thread $tid once it runs $sql, from a direct admin connection.
sub kill_when_running {
    my ($tid, $sql) = @_;
    my $admin = conn('direct');
    my $deadline = time + 20;
    while (time < $deadline) {
        my ($n) = $admin->selectrow_array(
            'SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO = ?', undef, $tid, $sql);
        if ($n == 1) {
            $admin->do("KILL CONNECTION $tid");
            return 1;
        }
        usleep(20_000);
    }
    return 0;
}

step('login, thread id, ping, server version', sub {
    my $version = conn('direct')->{mariadb_serverinfo};
    for my $w (qw(proxy socket)) {
        my $d = conn($w);
        eq_([$d->selectrow_array('SELECT 1 + 1, CURRENT_USER()')], ['2', "$USER\@%"], "$w: select");
        my $id = $d->{mariadb_thread_id};
        check($id >= PROXY_ID_BASE && $id < 2**31, sprintf('%s: thread id %#x should be a proxy id', $w, $id));
        eq_($d->{mariadb_serverinfo}, $version, "$w: server version");
        check($d->ping, "$w: ping");
        $d->disconnect;
    }
});

step('wrong password', sub {
    my %got;
    for my $w (qw(direct proxy socket)) {
        my $d = eval { conn($w, password => 'wrong') };
        $got{$w} = $d ? 'connected' : [$DBI::err, $DBI::state, $DBI::errstr];
    }
    eq_($got{direct}[0], '1045', 'direct wrong password code');
    eq_($got{proxy}, $got{direct}, 'wrong password: proxy vs direct');
    eq_($got{socket}, $got{direct}, 'wrong password over the socket: proxy vs direct');
});

step('server-side prepared statements, types, NULL', sub {
    my %res;
    for my $w (qw(direct proxy)) {
        my $d = conn($w, mariadb_server_prepare => 1);
        my $st = $d->prepare('SELECT ?, ? + 1, ?, CAST(? AS DECIMAL(20,5)), ?');
        for my $i (1 .. 20) {
            $st->execute($i % 3 ? $i : undef, -9_000_000_000 + $i, "h\x{e9}llo $i", "-$i.25", 'x' x (1000 * $i));
            $res{$w} .= show($st->fetchrow_arrayref) . "\n";
        }
        my $bad = eval { $d->prepare('SELEC ?')->execute(1); 1 };
        eq_([$bad ? 'accepted' : $d->err], ['1064'], "$w: bad prepare");
        eq_([$d->selectrow_array("SELECT 'after'")], ['after'], "$w: after a failed prepare");
    }
    eq_($res{proxy}, $res{direct}, 'prepared rows: proxy vs direct');
});

step('KILL QUERY of an async SELECT SLEEP by mariadb_thread_id', sub {
    for my $w (qw(proxy socket)) {
        my $victim = conn($w);
        my $killer = conn($w);
        my $t = time;
        $victim->do('SELECT SLEEP(20)', { mariadb_async => 1 });
        usleep(300_000);
        $killer->do("KILL QUERY $victim->{mariadb_thread_id}");
        my $r = eval { $victim->mariadb_async_result };
        eq_($r ? ['no error'] : err_of($victim), ['1317', '70100', 'Query execution was interrupted'], "$w: interrupted");
        check(time - $t < 15, "$w: still sleeping after the KILL");
        eq_([$victim->selectrow_array("SELECT 'alive'")], ['alive'], "$w: victim alive");
    }
});

# The server thread behind a session is killed mid-statement (MariaDB closes without an ERR):
# the error, ping and DBD's auto-reconnect behave as directly. An ERR of the proxy's instead
# (1105 `mysql-lb: backend … closed the connection mid-response`) shows as its own code.
step('backend connection lost mid-statement', sub {
    my %seen;
    for my $w (qw(direct proxy socket)) {
        for my $reconnect (0, 1) {
            my $d = conn($w, mariadb_auto_reconnect => $reconnect);
            my ($tid) = $d->selectrow_array('SELECT CONNECTION_ID()');
            $d->do('SELECT SLEEP(5)', { mariadb_async => 1 });
            check(kill_when_running($tid, 'SELECT SLEEP(5)'), "$w: thread $tid never ran SELECT SLEEP(5)");
            my $r = eval { $d->mariadb_async_result };
            my $got = $r ? ['no error'] : err_of($d);
            my $ping = $d->ping ? 'ping ok' : 'ping fails';
            my $next = eval { [$d->selectrow_array("SELECT 'next'")] } // err_of($d);
            $seen{"$w/$reconnect"} = [$got, $ping, $next];
            eq_([conn($w)->selectrow_array("SELECT 'back'")], ['back'], "$w: a new connection afterwards");
        }
    }
    print '  lost connection, direct: ', show($seen{'direct/0'}), '; with auto_reconnect: ', show($seen{'direct/1'}), "\n";
    eq_($seen{'direct/0'}[0][0], '2013', 'direct: lost connection code');
    for my $r (0, 1) {
        eq_($seen{"proxy/$r"}, $seen{"direct/$r"}, "auto_reconnect=$r: proxy vs direct");
        eq_($seen{"socket/$r"}, $seen{"direct/$r"}, "auto_reconnect=$r over the socket: proxy vs direct");
    }
});

if (@failures) {
    print STDERR "DBD::MariaDB $DBD::MariaDB::VERSION: ", scalar(@failures), " mismatch(es)\n";
    print STDERR "  - $_\n" for @failures;
    exit 1;
}
print "DBD::MariaDB $DBD::MariaDB::VERSION (perl $^V): all checks passed\n";
