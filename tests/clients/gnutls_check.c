/* A MySQL client over GnuTLS, through mysql-lb (compiled and run by tests/tls_interop.rs).
 *
 * `gnutls_check HOST PORT CA USER PASS PRIORITY` reads the greeting, sends an SSLRequest, does
 * the TLS handshake with the GnuTLS priority string PRIORITY (verifying the server's certificate
 * against CA for `localhost`), logs in with mysql_native_password and runs queries: a small one,
 * a 2 MiB statement, a 3 MiB result. Under TLS 1.3 it then sends a KeyUpdate asking for the
 * server's, and one that does not, each followed by a query; `read_key_changed` says whether the
 * server's KeyUpdate moved our receiving key. gnutls-cli cannot do this: its STARTTLS knows no
 * MySQL (3.7.9). Prints `key=value` lines; any failure is `error=...` and exit status 1.
 */
#include <arpa/inet.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* LONG_PASSWORD LONG_FLAG PROTOCOL_41 SSL TRANSACTIONS SECURE_CONNECTION PLUGIN_AUTH */
#define CAPS (0x1u | 0x4u | 0x200u | 0x800u | 0x2000u | 0x8000u | 0x80000u)
#define MiB (1024 * 1024)
static gnutls_session_t tls;
static int fd;
static unsigned char seq;

static void die(const char *what, const char *why) {
    printf("error=%.200s: %.200s\n", what, why);
    exit(1);
}

static void io(int n, const char *what) {
    if (n <= 0) die(what, n == 0 ? "connection closed" : gnutls_strerror(n));
}

static void get(unsigned char *buf, size_t len) { /* TLS once the handshake is done */
    for (size_t got = 0; got < len;) {
        ssize_t n = tls ? gnutls_record_recv(tls, buf + got, len - got) : read(fd, buf + got, len - got);
        if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) continue;
        io((int)n, "read");
        got += (size_t)n;
    }
}

static void put(const unsigned char *buf, size_t len) {
    for (size_t sent = 0; sent < len;) {
        ssize_t n = tls ? gnutls_record_send(tls, buf + sent, len - sent) : write(fd, buf + sent, len - sent);
        if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED) continue;
        io((int)n, "write");
        sent += (size_t)n;
    }
}

static unsigned char *packet(size_t *len) { /* one packet, < 16 MiB; ERR ends the run */
    unsigned char h[4];
    get(h, 4);
    *len = h[0] | h[1] << 8 | h[2] << 16;
    seq = h[3] + 1;
    unsigned char *p = malloc(*len + 1);
    get(p, *len);
    p[*len] = 0;
    if (*len > 9 && p[0] == 0xff) die("server error", (char *)p + 9);
    return p;
}

static void send_packet(const unsigned char *body, size_t len) {
    unsigned char *p = malloc(len + 4);
    p[0] = len & 0xff, p[1] = len >> 8 & 0xff, p[2] = len >> 16 & 0xff, p[3] = seq++;
    memcpy(p + 4, body, len);
    put(p, len + 4);
    free(p);
}

/* COM_QUERY with a one-column, one-row result (no CLIENT_DEPRECATE_EOF): the value's length and
 * bytes. Column count, column definition, EOF, the row, EOF. */
static unsigned char *query(const char *sql, size_t *value_len) {
    size_t len = strlen(sql), n;
    unsigned char *body = malloc(len + 1);
    body[0] = 3;
    memcpy(body + 1, sql, len);
    seq = 0;
    send_packet(body, len + 1);
    free(body);
    for (int i = 0; i < 3; i++) free(packet(&n));
    size_t row_len;
    unsigned char *row = packet(&row_len);
    free(packet(&n));
    n = row_len;
    if (row[0] < 0xfb) *value_len = row[0], memmove(row, row + 1, n - 1);
    else if (row[0] == 0xfc) *value_len = row[1] | row[2] << 8, memmove(row, row + 3, n - 3);
    else if (row[0] == 0xfd) *value_len = row[1] | row[2] << 8 | row[3] << 16, memmove(row, row + 4, n - 4);
    else die(sql, "unexpected row");
    return row;
}

static void expect(const char *sql, const char *want, const char *key) {
    size_t n;
    unsigned char *got = query(sql, &n);
    if (n != strlen(want) || memcmp(got, want, n) != 0) die(sql, (char *)got);
    printf("%s=ok\n", key);
    free(got);
}

static void read_key(gnutls_datum_t *key) {
    gnutls_datum_t mac, iv, k;
    unsigned char s[8];
    io(gnutls_record_get_state(tls, 1, &mac, &iv, &k, s) == 0 ? 1 : -1, "record state");
    key->data = malloc(k.size), key->size = k.size;
    memcpy(key->data, k.data, k.size);
}

int main(int argc, char **argv) {
    if (argc != 7) die("usage", "gnutls_check HOST PORT CA USER PASS PRIORITY");
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &sa.sin_addr);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) die("connect", argv[2]);
    size_t n;
    unsigned char *greeting = packet(&n), scramble[20];
    unsigned char *p = greeting + 1 + strlen((char *)greeting + 1) + 1 + 4; /* past version, id */
    memcpy(scramble, p, 8);
    memcpy(scramble + 8, p + 8 + 1 + 2 + 1 + 2 + 2 + 1 + 10, 12);
    unsigned char hello[32 + 256] = {CAPS & 0xff, CAPS >> 8 & 0xff, CAPS >> 16 & 0xff, 0, 0, 0, 0, 1, 33};
    send_packet(hello, 32); /* SSLRequest */
    gnutls_certificate_credentials_t creds;
    gnutls_certificate_allocate_credentials(&creds);
    io(gnutls_certificate_set_x509_trust_file(creds, argv[3], GNUTLS_X509_FMT_PEM), "CA file");
    gnutls_init(&tls, GNUTLS_CLIENT);
    io(gnutls_priority_set_direct(tls, argv[6], NULL) == 0 ? 1 : -1, "priority string");
    gnutls_credentials_set(tls, GNUTLS_CRD_CERTIFICATE, creds);
    gnutls_session_set_verify_cert(tls, "localhost", 0);
    gnutls_transport_set_int(tls, fd);
    int r;
    do r = gnutls_handshake(tls); while (r < 0 && !gnutls_error_is_fatal(r));
    if (r < 0) die("handshake", gnutls_strerror(r));
    gnutls_protocol_t version = gnutls_protocol_get_version(tls);
    printf("gnutls=%s\nversion=%s\n", gnutls_check_version(NULL), gnutls_protocol_get_name(version));
    printf("cipher=%s\n", gnutls_cipher_get_name(gnutls_cipher_get(tls)));
    /* mysql_native_password: SHA1(pass) XOR SHA1(scramble + SHA1(SHA1(pass))) */
    unsigned char h1[20], h2[20], salted[40], token[20];
    gnutls_hash_fast(GNUTLS_DIG_SHA1, argv[5], strlen(argv[5]), h1);
    gnutls_hash_fast(GNUTLS_DIG_SHA1, h1, 20, h2);
    memcpy(salted, scramble, 20), memcpy(salted + 20, h2, 20);
    gnutls_hash_fast(GNUTLS_DIG_SHA1, salted, 40, token);
    p = hello + 32;
    p += sprintf((char *)p, "%s", argv[4]) + 1;
    *p++ = 20;
    for (int i = 0; i < 20; i++) *p++ = h1[i] ^ token[i];
    p += sprintf((char *)p, "mysql_native_password") + 1;
    send_packet(hello, (size_t)(p - hello));
    unsigned char *ok = packet(&n);
    if (ok[0] != 0) die("login", "no OK packet");
    printf("login=ok\n");
    expect("SELECT REPEAT('gnutls', 3)", "gnutlsgnutlsgnutls", "query");
    char *big = malloc(2 * MiB + 64);
    memset(big + sprintf(big, "SELECT LENGTH('"), 'x', 2 * MiB);
    strcpy(big + 15 + 2 * MiB, "')");
    expect(big, "2097152", "big_statement");
    unsigned char *row = query("SELECT REPEAT('y', 3145728)", &n);
    for (size_t i = 0; i < n; i++) if (row[i] != 'y') die("big result", "a byte is not y");
    printf("big_result=%s\n", n == 3 * MiB ? "ok" : "short");
    if (version != GNUTLS_TLS1_3) return 0;
    gnutls_datum_t before, after;
    read_key(&before);
    io(gnutls_session_key_update(tls, GNUTLS_KU_PEER) == 0 ? 1 : -1, "key update (peer)");
    expect("SELECT 'after the KeyUpdate asking for yours'", "after the KeyUpdate asking for yours", "after_key_update_requested");
    read_key(&after);
    printf("read_key_changed=%s\n", before.size == after.size && !memcmp(before.data, after.data, after.size) ? "no" : "yes");
    io(gnutls_session_key_update(tls, 0) == 0 ? 1 : -1, "key update");
    expect("SELECT 'after our own KeyUpdate'", "after our own KeyUpdate", "after_key_update");
    read_key(&before); /* the control: a KeyUpdate that asks nothing leaves the server's keys */
    printf("read_key_changed_unasked=%s\n", before.size == after.size && !memcmp(before.data, after.data, after.size) ? "no" : "yes");
    gnutls_bye(tls, GNUTLS_SHUT_WR);
    return 0;
}
