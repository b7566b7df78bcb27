//! Unit tests of configuration loading and validation.

use super::raw::parse_size;
use super::*;
use clap::Parser;

fn err(yaml: &str) -> String {
    Config::from_yaml_str(yaml).unwrap_err().to_string()
}

fn tcp(host: &str, port: u16) -> BackendAddr {
    BackendAddr::Tcp {
        host: host.to_owned(),
        port,
    }
}

fn write_temp(yaml: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut f, yaml.as_bytes()).unwrap();
    f
}

#[test]
fn defaults_match_the_documented_values() {
    let c = Config::default();
    assert_eq!(c.listen, vec!["127.0.0.1:4040".parse().unwrap()]);
    assert!(c.backends.is_empty());
    assert_eq!(c.max_connections, 10_000);
    assert_eq!(c.max_open_files, None);
    assert_eq!(c.connect_timeout, Duration::from_secs(2));
    assert_eq!(c.down_cooloff, Duration::from_secs(5));
    assert_eq!(c.handshake_timeout, Duration::from_secs(10));
    assert_eq!(c.max_packet_size, 1_073_741_824);
    assert_eq!(c.max_handshake_packet_size, 65_536);
    assert_eq!(c.log_level, "info");
    assert_eq!(c.log_format, LogFormat::Text);
}

#[test]
fn minimal_yaml_takes_defaults_for_everything_else() {
    let c = Config::from_yaml_str("backends: [\"127.0.0.1:3306\"]").unwrap();
    assert_eq!(
        c,
        Config {
            backends: vec![BackendConfig {
                name: "127.0.0.1:3306".into(),
                address: tcp("127.0.0.1", 3306),
                weight: 1,
                kind: BackendKind::Rw,
                tls: Default::default(),
                compression: false,
                proxy_protocol: None,
                pool: "default".into(),
                role: None,
            }],
            pools: vec![PoolConfig {
                name: "default".into(),
                policy: Policy::RoundRobin,
                pooling: Default::default(),
            }],
            default_pool: Some("default".into()),
            ..Config::default()
        }
    );
}

#[test]
fn full_yaml_example_parses() {
    let c = Config::from_yaml_str(
        r#"
listen: ["127.0.0.1:4040", "/run/mysql-lb/mysql-lb.sock"]
backends:
  - address: 127.0.0.1:3306
    name: db1
    weight: 3
  - 127.0.0.1:3307
max_connections: 500
max_open_files: 20064
connect_timeout: 500ms
down_cooloff: 1m
handshake_timeout: 3s
max_packet_size: 64MiB
max_handshake_packet_size: 4096
log: { level: "info,mysql_lb=debug", format: json }
"#,
    )
    .unwrap();
    assert_eq!(
        c.listen,
        vec![
            ListenAddr::Tcp("127.0.0.1:4040".parse().unwrap()),
            ListenAddr::Unix("/run/mysql-lb/mysql-lb.sock".into())
        ]
    );
    assert_eq!(c.backends[0].name, "db1");
    assert_eq!(c.backends[0].weight, 3);
    assert_eq!(c.backends[1].address, tcp("127.0.0.1", 3307));
    assert_eq!(c.max_connections, 500);
    assert_eq!(c.max_open_files, Some(20064));
    assert_eq!(c.connect_timeout, Duration::from_millis(500));
    assert_eq!(c.down_cooloff, Duration::from_secs(60));
    assert_eq!(c.handshake_timeout, Duration::from_secs(3));
    assert_eq!(c.max_packet_size, 64 << 20);
    assert_eq!(c.max_handshake_packet_size, 4096);
    assert_eq!(c.log_level, "info,mysql_lb=debug");
    assert_eq!(c.log_format, LogFormat::Json);
}

#[test]
fn shorthand_backend_string_gets_address_as_name_and_weight_one() {
    let c = Config::from_yaml_str("backends:\n  - db.example:3306\n").unwrap();
    assert_eq!(
        c.backends,
        vec![BackendConfig {
            name: "db.example:3306".into(),
            address: tcp("db.example", 3306),
            weight: 1,
            kind: BackendKind::Rw,
            tls: Default::default(),
            compression: false,
            proxy_protocol: None,
            pool: "default".into(),
            role: None,
        }]
    );
}

#[test]
fn unknown_top_level_key_names_key_and_line() {
    let e = err("backends: [\"127.0.0.1:3306\"]\nfoo: 1\n");
    assert!(e.contains("unknown field `foo`"), "{e}");
    assert!(e.contains("line 2"), "{e}");
}

#[test]
fn unknown_key_inside_backend_map_names_key_and_line() {
    let e = err("backends:\n  - address: 127.0.0.1:3306\n    wieght: 2\n");
    assert!(e.contains("unknown field `wieght`"), "{e}");
    assert!(e.contains("line 3"), "{e}");
}

#[test]
fn unknown_key_inside_log_names_key() {
    let e = err("backends: [\"h:1\"]\nlog: { level: info, colour: true }\n");
    assert!(e.contains("unknown field `colour`"), "{e}");
    assert!(e.contains("line 2"), "{e}");
}

#[test]
fn bad_duration_names_key_and_line() {
    let e = err("backends: [\"h:1\"]\nconnect_timeout: 2 parsecs\n");
    assert!(e.contains("connect_timeout"), "{e}");
    assert!(e.contains("line 2"), "{e}");
}

#[test]
fn bad_backend_address_names_backend_index() {
    let e = err("backends:\n  - address: 127.0.0.1:99999\n");
    assert!(e.contains("backends[0].address"), "{e}");
    assert!(e.contains("invalid port"), "{e}");
    assert!(e.contains("line 2"), "{e}");

    let e = err("backends:\n  - h:1\n  - nohostport\n");
    assert!(e.contains("backends[1]"), "{e}");
    assert!(e.contains("expected host:port"), "{e}");
}

#[test]
fn unquoted_bracketed_ipv6_gets_a_quoting_hint() {
    let e = err("backends:\n  - [::1]:3306\n");
    assert!(e.contains("backends[0]"), "{e}");
    assert!(e.contains("quote"), "{e}");
}

#[test]
fn sizes_accept_integers_and_binary_units() {
    assert_eq!(parse_size("65536"), Ok(65536));
    assert_eq!(parse_size("64KiB"), Ok(64 << 10));
    assert_eq!(parse_size("16 MiB"), Ok(16 << 20));
    assert_eq!(parse_size("1G"), Ok(1 << 30));
    assert!(parse_size("1MB").unwrap_err().contains("unknown unit"));
    assert!(parse_size("99999999999999GiB")
        .unwrap_err()
        .contains("too large"));
    let e = err("backends: [\"h:1\"]\nmax_packet_size: -5\n");
    assert!(e.contains("max_packet_size"), "{e}");
}

#[test]
fn ipv6_backend_is_stored_without_brackets_and_displayed_with_them() {
    let a: BackendAddr = "[::1]:3306".parse().unwrap();
    assert_eq!(a, tcp("::1", 3306));
    assert_eq!(a.to_string(), "[::1]:3306");
    let c = Config::from_yaml_str("backends: [\"[::1]:3306\"]").unwrap();
    assert_eq!(c.backends[0].name, "[::1]:3306");
    assert!("::1:3306"
        .parse::<BackendAddr>()
        .unwrap_err()
        .to_string()
        .contains("brackets"));
    assert!("[nope]:3306".parse::<BackendAddr>().is_err());
    let l: ListenAddr = "[::1]:4040".parse().unwrap();
    assert_eq!(l.to_string(), "[::1]:4040");
}

#[test]
fn backend_addresses_reject_bad_ports_and_hosts() {
    for bad in ["h:0", "h:65536", "h:", ":3306", "h", "a b:1", "h:x"] {
        assert!(bad.parse::<BackendAddr>().is_err(), "{bad}");
    }
    assert_eq!("h:65535".parse::<BackendAddr>().unwrap(), tcp("h", 65535));
}

#[test]
fn unix_paths_for_listen_and_backends() {
    assert_eq!(
        "/tmp/my.sock".parse::<BackendAddr>().unwrap(),
        BackendAddr::Unix("/tmp/my.sock".into())
    );
    assert_eq!(
        "./rel/my.sock".parse::<BackendAddr>().unwrap(),
        BackendAddr::Unix("./rel/my.sock".into())
    );
    let l: ListenAddr = "/run/x.sock".parse().unwrap();
    assert_eq!(l, ListenAddr::Unix("/run/x.sock".into()));
    assert_eq!(l.to_string(), "unix:/run/x.sock");
    // Display round-trips.
    assert_eq!(l.to_string().parse::<ListenAddr>().unwrap(), l);
    let long = format!("/{}", "x".repeat(200));
    assert!(long
        .parse::<ListenAddr>()
        .unwrap_err()
        .to_string()
        .contains("limit"));
    assert!("unix:".parse::<BackendAddr>().is_err());
}

#[test]
fn listen_accepts_port_zero_empty_host_and_localhost() {
    let l: ListenAddr = "127.0.0.1:0".parse().unwrap();
    assert_eq!(l, ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()));
    let l: ListenAddr = ":4040".parse().unwrap();
    assert_eq!(l, ListenAddr::Tcp("0.0.0.0:4040".parse().unwrap()));
    let ListenAddr::Tcp(a) = "localhost:4040".parse::<ListenAddr>().unwrap() else {
        panic!("localhost is not a unix path");
    };
    assert!(a.ip().is_loopback());
    assert_eq!(a.port(), 4040);
    assert!("127.0.0.1:70000".parse::<ListenAddr>().is_err());
}

#[test]
fn validate_rejects_missing_backends_with_a_hint() {
    let e = err("listen: [\"127.0.0.1:4040\"]\n");
    assert!(e.contains("backends"), "{e}");
    assert!(e.contains("--proxy-backend-addresses"), "{e}");
    // An empty file is the same as no keys.
    assert!(err("# nothing\n").contains("no backend configured"));
}

#[test]
fn validate_errors_name_the_key() {
    let cases = [
        (
            "listen: []\nbackends: [\"h:1\"]",
            "listen: no listen address",
        ),
        (
            "listen: [\"127.0.0.1:1\", \"127.0.0.1:1\"]\nbackends: [\"h:1\"]",
            "listen[1]: duplicate",
        ),
        (
            "backends: [\"h:1\", {address: \"h:1\"}]",
            "backends[1].name: duplicate backend name `h:1`",
        ),
        (
            "backends: [{address: \"h:1\", weight: 0}]",
            "backends[0].weight: must be > 0",
        ),
        (
            "backends: [{address: \"h:1\", name: \"\"}]",
            "backends[0].name",
        ),
        (
            "backends: [h:1]\nmax_connections: 0",
            "max_connections: must be > 0",
        ),
        (
            "backends: [h:1]\nmax_open_files: 10",
            "max_open_files: 10 is too small",
        ),
        (
            "backends: [h:1]\nconnect_timeout: 0s",
            "connect_timeout: must be > 0",
        ),
        (
            "backends: [h:1]\nhandshake_timeout: 0s",
            "handshake_timeout: must be > 0",
        ),
        (
            "backends: [h:1]\nmax_packet_size: 100",
            "max_packet_size: 100 is too small",
        ),
        (
            "backends: [h:1]\nmax_handshake_packet_size: 32MiB",
            "max_handshake_packet_size",
        ),
        (
            "backends: [h:1]\nlog: {level: debgu}",
            "log.level: `debgu` is not a level",
        ),
        (
            "backends: [h:1]\nlog: {level: \"\"}",
            "log.level: must not be empty",
        ),
    ];
    for (yaml, want) in cases {
        let e = err(yaml);
        assert!(e.contains(want), "{yaml:?}: got {e:?}, want {want:?}");
    }
    // Two port-0 listeners are fine, and so is a zero cool-off.
    Config::from_yaml_str(
        "listen: [\"127.0.0.1:0\", \"127.0.0.1:0\"]\nbackends: [h:1]\ndown_cooloff: 0s",
    )
    .unwrap();
}

#[test]
fn cli_flags_override_the_file() {
    let f = write_temp(
            "listen: [\"127.0.0.1:5000\"]\nbackends: [\"h:1\", \"h:2\"]\nmax_connections: 7\nlog: {level: warn}\n",
        );
    let cli = Cli::parse_from([
        "mysql-lb",
        "--config",
        f.path().to_str().unwrap(),
        "--proxy-address",
        "127.0.0.1:6000",
        "--proxy-backend-addresses",
        "db:3306",
        "--max-connections",
        "9",
        "--max-open-files",
        "5000",
        "--connect-timeout",
        "750ms",
        "--log-level",
        "debug",
        "--log-format",
        "json",
    ]);
    let c = Config::load(&cli).unwrap();
    assert_eq!(c.listen, vec!["127.0.0.1:6000".parse().unwrap()]);
    assert_eq!(c.backends.len(), 1);
    assert_eq!(c.backends[0].address, tcp("db", 3306));
    assert_eq!(c.max_connections, 9);
    assert_eq!(c.max_open_files, Some(5000));
    assert_eq!(c.connect_timeout, Duration::from_millis(750));
    assert_eq!(c.log_level, "debug");
    assert_eq!(c.log_format, LogFormat::Json);
    // Untouched keys keep the file's / default values.
    assert_eq!(c.handshake_timeout, Duration::from_secs(10));
}

#[test]
fn cli_lists_may_be_repeated_and_comma_separated() {
    let cli = Cli::parse_from([
        "mysql-lb",
        "--proxy-backend-addresses",
        "a:1, b:2",
        "--proxy-backend-addresses=/tmp/c.sock",
        "--proxy-address",
        "127.0.0.1:0,/tmp/lb.sock",
    ]);
    let c = Config::load(&cli).unwrap();
    let names: Vec<_> = c.backends.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["a:1", "b:2", "/tmp/c.sock"]);
    assert_eq!(
        c.listen,
        vec![
            ListenAddr::Tcp("127.0.0.1:0".parse().unwrap()),
            ListenAddr::Unix("/tmp/lb.sock".into())
        ]
    );
}

#[test]
fn cli_errors_name_the_flag() {
    let cli = Cli::parse_from(["mysql-lb", "--proxy-backend-addresses", "a:1,b:0"]);
    let e = Config::load(&cli).unwrap_err().to_string();
    assert!(
        e.starts_with("command line: --proxy-backend-addresses:"),
        "{e}"
    );
    let cli = Cli::parse_from(["mysql-lb", "--proxy-backend-addresses", "a:1,a:1"]);
    let e = Config::load(&cli).unwrap_err().to_string();
    assert!(
        e.starts_with("command line: --proxy-backend-addresses[1].name: duplicate"),
        "{e}"
    );
    let cli = Cli::parse_from(["mysql-lb"]);
    let e = Config::load(&cli).unwrap_err().to_string();
    assert!(e.contains("--proxy-backend-addresses"), "{e}");
}

#[test]
fn file_errors_name_the_file() {
    let f = write_temp("backends: [\"h:1\"]\nmax_connections: 0\n");
    let cli = Cli {
        config: Some(f.path().to_owned()),
        ..Cli::default()
    };
    let e = Config::load(&cli).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{}: max_connections", f.path().display())),
        "{e}"
    );
    let f = write_temp("backends: [\"h:1\"]\nbogus: 1\n");
    let cli = Cli {
        config: Some(f.path().to_owned()),
        ..Cli::default()
    };
    let e = Config::load(&cli).unwrap_err().to_string();
    assert!(e.starts_with(&f.path().display().to_string()), "{e}");
    assert!(
        e.contains("unknown field `bogus`") && e.contains("line 2"),
        "{e}"
    );
    let cli = Cli {
        config: Some("/nonexistent/mysql-lb.yaml".into()),
        ..Cli::default()
    };
    let e = Config::load(&cli).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/mysql-lb.yaml"), "{e}");
}

#[test]
fn balancer_keys_and_backend_type_parse() {
    let script = write_temp("function connect_server() end\n");
    let c = Config::from_yaml_str(&format!(
            "backends:\n  - h:1\n  - {{address: h:2, type: ro, weight: 3}}\nbalancer:\n  policy: least_connections\n  script: {}\n  script_budget: 25ms\n  script_allow_unsafe: true\n",
            script.path().display()
        ))
        .unwrap();
    assert_eq!(c.backends[0].kind, BackendKind::Rw);
    assert_eq!(c.backends[1].kind, BackendKind::Ro);
    assert_eq!(
        c.balancer,
        BalancerConfig {
            policy: Policy::LeastConnections,
            script: Some(script.path().to_owned()),
            script_budget: Duration::from_millis(25),
            script_allow_unsafe: true,
            ejection: EjectionConfig::default(),
        }
    );
    let d = Config::from_yaml_str("backends: [h:1]\nbalancer: {policy: random}").unwrap();
    assert_eq!(d.balancer.policy, Policy::Random);
    assert_eq!(d.balancer.script_budget, Duration::from_millis(10));
    assert!(!d.balancer.script_allow_unsafe);
    assert_eq!(Config::default().balancer.policy, Policy::RoundRobin);
}

#[test]
fn balancer_errors_name_the_key() {
    let e = err("backends: [h:1]\nbalancer:\n  polcy: random\n");
    assert!(
        e.contains("unknown field `polcy`") && e.contains("line 3"),
        "{e}"
    );
    let e = err("backends: [h:1]\nbalancer: {policy: fastest}\n");
    assert!(
        e.contains("balancer.policy") && e.contains("fastest"),
        "{e}"
    );
    let e = err("backends: [{address: h:1, type: rx}]\n");
    assert!(e.contains("backends[0].type"), "{e}");
    let e = err("backends: [h:1]\nbalancer: {script: /nonexistent/x.lua}\n");
    assert!(
        e.contains("balancer.script: cannot read /nonexistent/x.lua"),
        "{e}"
    );
    let e = err("backends: [h:1]\nbalancer: {script_budget: 0s}\n");
    assert!(e.contains("balancer.script_budget: must be > 0"), "{e}");
}

#[test]
fn mysql_proxy_flags_set_script_policy_and_read_only_backends() {
    let script = write_temp("-- empty\n");
    let f = write_temp("backends: [\"h:1\"]\n");
    let cli = Cli::parse_from([
        "mysql-lb",
        "--config",
        f.path().to_str().unwrap(),
        "--proxy-lua-script",
        script.path().to_str().unwrap(),
        "--balancer",
        "least_connections",
        "--proxy-read-only-backend-addresses",
        "r:1,r:2",
        "--proxy-read-only-backend-addresses=/tmp/r.sock",
    ]);
    let c = Config::load(&cli).unwrap();
    let kinds: Vec<_> = c
        .backends
        .iter()
        .map(|b| (b.name.as_str(), b.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("h:1", BackendKind::Rw),
            ("r:1", BackendKind::Ro),
            ("r:2", BackendKind::Ro),
            ("/tmp/r.sock", BackendKind::Ro)
        ]
    );
    assert_eq!(c.balancer.script.as_deref(), Some(script.path()));
    assert_eq!(c.balancer.policy, Policy::LeastConnections);

    // Read-only backends alone are enough.
    let cli = Cli::parse_from(["mysql-lb", "--proxy-read-only-backend-addresses", "r:1"]);
    assert_eq!(
        Config::load(&cli).unwrap().backends[0].kind,
        BackendKind::Ro
    );

    let cli = Cli::parse_from(["mysql-lb", "--proxy-read-only-backend-addresses", "r:0"]);
    let e = Config::load(&cli).unwrap_err().to_string();
    assert!(
        e.starts_with("command line: --proxy-read-only-backend-addresses:"),
        "{e}"
    );
    let cli = Cli::parse_from([
        "mysql-lb",
        "--proxy-backend-addresses",
        "h:1",
        "--proxy-lua-script",
        "/nonexistent/s.lua",
    ]);
    let e = Config::load(&cli).unwrap_err().to_string();
    assert!(
        e.starts_with("command line: --proxy-lua-script: cannot read"),
        "{e}"
    );
}

#[test]
fn shipped_example_config_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/mysql-lb.yaml");
    let cli = Cli {
        config: Some(path),
        ..Cli::default()
    };
    let c = Config::load(&cli).unwrap();
    let addrs: Vec<_> = c.backends.iter().map(|b| b.address.to_string()).collect();
    assert_eq!(addrs, ["127.0.0.1:3306", "127.0.0.1:3307"]);
    assert_eq!(c.listen, Config::default().listen);
}

/// A directory with empty files `cert.pem`, `key.pem`, `ca.pem`: config checks only that TLS
/// paths are readable files (their contents are the TLS material's to check).
fn tls_files() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    for f in ["cert.pem", "key.pem", "ca.pem"] {
        std::fs::write(dir.path().join(f), "").unwrap();
    }
    let d = dir.path().display().to_string();
    (dir, d)
}

#[test]
fn tls_keys_parse_with_their_defaults() {
    let (_dir, d) = tls_files();
    let c = Config::from_yaml_str(&format!(
        "backends: [h:1]\ntls: {{cert: {d}/cert.pem, key: {d}/key.pem}}"
    ))
    .unwrap();
    let tls = c.tls.unwrap();
    assert_eq!(tls.cert, PathBuf::from(format!("{d}/cert.pem")));
    assert_eq!(tls.key, PathBuf::from(format!("{d}/key.pem")));
    assert_eq!(tls.ca, None);
    assert!(!tls.verify_client);
    assert!(!tls.require);
    assert_eq!(tls.min_version, TlsVersion::V1_2);
    assert_eq!(tls.cipher_suites, crate::config::CIPHER_SUITES);
    assert_eq!(tls.cipher_suites[0], "TLS13_AES_128_GCM_SHA256");
    assert_eq!(c.backends[0].tls, BackendTls::default());
    assert_eq!(c.backends[0].tls.mode, BackendTlsMode::Preferred);

    let c = Config::from_yaml_str(&format!(
        "backends: [h:1]\ntls: {{cert: {d}/cert.pem, key: {d}/key.pem, ca: {d}/ca.pem, \
         verify_client: true, require: true, min_version: 1.3}}"
    ))
    .unwrap();
    let tls = c.tls.unwrap();
    assert_eq!(tls.ca, Some(PathBuf::from(format!("{d}/ca.pem"))));
    assert!(tls.verify_client && tls.require);
    assert_eq!(tls.min_version, TlsVersion::V1_3);

    // TLS 1.3 only: no TLS 1.2 suite needed.
    let c = Config::from_yaml_str(&format!(
        "backends: [h:1]\ntls: {{cert: {d}/cert.pem, key: {d}/key.pem, min_version: \"1.3\", \
         cipher_suites: [TLS13_CHACHA20_POLY1305_SHA256, TLS13_AES_256_GCM_SHA384]}}"
    ))
    .unwrap();
    let suites = c.tls.unwrap().cipher_suites;
    assert_eq!(
        suites,
        ["TLS13_CHACHA20_POLY1305_SHA256", "TLS13_AES_256_GCM_SHA384"]
    );
}

#[test]
fn a_backends_own_tls_keys_override_backend_tls_one_by_one() {
    let (_dir, d) = tls_files();
    let c = Config::from_yaml_str(&format!(
        "backend_tls: {{mode: verify_identity, ca: {d}/ca.pem, min_version: \"1.3\"}}\n\
         backends:\n\
         - h:1\n\
         - {{address: \"h:2\", tls: {{mode: verify_ca}}}}\n\
         - {{address: \"h:3\", tls: {{mode: disabled}}}}\n\
         - {{address: \"h:4\", tls: {{cert: {d}/cert.pem, key: {d}/key.pem}}}}\n"
    ))
    .unwrap();
    let ca = Some(PathBuf::from(format!("{d}/ca.pem")));
    let b = &c.backends;
    assert_eq!(b[0].tls.mode, BackendTlsMode::VerifyIdentity);
    assert_eq!(b[0].tls.ca, ca);
    assert_eq!(b[0].tls.min_version, TlsVersion::V1_3);
    assert_eq!(
        (b[1].tls.mode, &b[1].tls.ca),
        (BackendTlsMode::VerifyCa, &ca)
    );
    assert_eq!(b[1].tls.min_version, TlsVersion::V1_3);
    assert_eq!(b[2].tls.mode, BackendTlsMode::Disabled);
    assert_eq!(b[3].tls.mode, BackendTlsMode::VerifyIdentity);
    assert_eq!(b[3].tls.cert, Some(PathBuf::from(format!("{d}/cert.pem"))));
    assert_eq!(b[3].tls.key, Some(PathBuf::from(format!("{d}/key.pem"))));
    assert_eq!(b[0].tls.cert, None);
}

#[test]
fn allow_cleartext_passwords_is_off_by_default_and_a_backend_may_set_it_either_way() {
    let c = Config::from_yaml_str(
        "backend_tls: {allow_cleartext_passwords: true}\n\
         backends:\n\
         - h:1\n\
         - {address: \"h:2\", tls: {allow_cleartext_passwords: false}}\n",
    )
    .unwrap();
    assert!(c.backends[0].tls.allow_cleartext_passwords);
    assert!(!c.backends[1].tls.allow_cleartext_passwords);
    let c = Config::from_yaml_str(
        "backends:\n- h:1\n- {address: \"h:2\", tls: {allow_cleartext_passwords: true}}\n",
    )
    .unwrap();
    assert!(!c.backends[0].tls.allow_cleartext_passwords);
    assert!(c.backends[1].tls.allow_cleartext_passwords);
}

#[test]
fn every_backend_tls_mode_name_parses() {
    let names = [
        ("disabled", BackendTlsMode::Disabled),
        ("preferred", BackendTlsMode::Preferred),
        ("required", BackendTlsMode::Required),
    ];
    for (name, mode) in names {
        let c = Config::from_yaml_str(&format!("backend_tls: {{mode: {name}}}\nbackends: [h:1]"))
            .unwrap();
        assert_eq!(c.backends[0].tls.mode, mode);
        assert_eq!(mode.as_str(), name);
    }
}

#[test]
fn tls_errors_name_the_key() {
    let (_dir, d) = tls_files();
    let cases = [
        (
            "tls: {cert: /nonexistent/cert.pem, key: /nonexistent/key.pem}".to_owned(),
            "tls.cert: cannot read /nonexistent/cert.pem".to_owned(),
        ),
        (
            format!("tls: {{cert: {d}/cert.pem, key: {d}/missing.pem}}"),
            format!("tls.key: cannot read {d}/missing.pem"),
        ),
        (
            format!("tls: {{cert: {d}/cert.pem, key: {d}/key.pem, verify_client: true}}"),
            "tls.verify_client: needs `tls.ca`".to_owned(),
        ),
        (
            format!("tls: {{cert: {d}/cert.pem}}"),
            "missing field `key`".to_owned(),
        ),
        (
            format!("tls: {{cert: {d}/cert.pem, key: {d}/key.pem, min_version: \"1.1\"}}"),
            "tls.min_version: unknown variant `1.1`".to_owned(),
        ),
        (
            format!("tls: {{cert: {d}/cert.pem, key: {d}/key.pem, cipher_suites: [RC4]}}"),
            "tls.cipher_suites: unknown cipher suite `RC4` (known: TLS13_AES_128_GCM_SHA256, "
                .to_owned(),
        ),
        (
            format!(
                "tls: {{cert: {d}/cert.pem, key: {d}/key.pem, cipher_suites: \
                 [TLS13_AES_128_GCM_SHA256, TLS13_AES_128_GCM_SHA256]}}"
            ),
            "tls.cipher_suites: `TLS13_AES_128_GCM_SHA256` is listed twice".to_owned(),
        ),
        (
            format!(
                "tls: {{cert: {d}/cert.pem, key: {d}/key.pem, \
                 cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]}}"
            ),
            "tls.cipher_suites: no TLS 1.3 suite (TLS13_...) listed".to_owned(),
        ),
        (
            format!(
                "tls: {{cert: {d}/cert.pem, key: {d}/key.pem, \
                 cipher_suites: [TLS13_AES_128_GCM_SHA256]}}"
            ),
            "tls.cipher_suites: no TLS 1.2 suite (TLS_ECDHE_...) listed while tls.min_version"
                .to_owned(),
        ),
        (
            format!("tls: {{cert: {d}/cert.pem, key: {d}/key.pem, crt: x}}"),
            "tls: unknown field `crt`".to_owned(),
        ),
        (
            "backend_tls: {mode: verify_full}".to_owned(),
            "backend_tls.mode: unknown variant `verify_full`".to_owned(),
        ),
        (
            "backend_tls: {mode: verify_ca}".to_owned(),
            "backends[0].tls.ca: mode verify_ca needs `ca`".to_owned(),
        ),
        (
            format!("backend_tls: {{cert: {d}/cert.pem}}"),
            "backends[0].tls.cert: a client certificate needs both `cert` and `key`".to_owned(),
        ),
        (
            format!("backend_tls: {{ca: {d}/nope.pem}}"),
            format!("backends[0].tls.ca: cannot read {d}/nope.pem"),
        ),
    ];
    for (yaml, want) in cases {
        let yaml = format!("backends: [h:1]\n{yaml}");
        let e = err(&yaml);
        assert!(e.contains(&want), "{yaml:?}: got {e:?}, want {want:?}");
    }
    let e = err("backends: [{address: \"h:1\", tls: {mode: verify_identity}}]");
    assert!(
        e.contains("backends[0].tls.ca: mode verify_identity needs `ca`"),
        "{e}"
    );
}

// ---- pools, routes, default_pool, connect_mode ----

const POOLS_YAML: &str = r#"
listen: ["127.0.0.1:3306", "127.0.0.1:3307", "/tmp/mysql-lb-test.sock"]
backends:
  - {name: a1, address: 127.0.0.1:3310}
pools:
  reporting:
    policy: least_connections
    backends:
      - {name: r1, address: 127.0.0.1:3311, weight: 2}
      - 127.0.0.1:3312
  etl:
    backends: [{name: e1, address: "127.0.0.1:3313", type: ro}]
routes:
  - {user: reporting, pool: reporting}
  - {schema: "analytics*", pool: reporting}
  - {client: 10.1.0.0/16, pool: reporting}
  - {listener: "127.0.0.1:3307", pool: reporting}
  - {user: "etl_*", schema: staging, pool: etl}
  - {listener: /tmp/mysql-lb-test.sock, pool: etl}
"#;

fn pool(name: &str, policy: Policy) -> PoolConfig {
    PoolConfig {
        name: name.into(),
        policy,
        pooling: Default::default(),
    }
}

fn route_to(pool: &str) -> RouteConfig {
    RouteConfig {
        user: None,
        schema: None,
        client: None,
        listener: None,
        pool: pool.into(),
        read_only: false,
    }
}

/// `POOLS_YAML` with `extra` top-level keys appended.
fn pools_err(extra: &str) -> String {
    err(&format!("{POOLS_YAML}{extra}"))
}

#[test]
fn pools_and_routes_parse_into_one_flat_backend_list() {
    let c = Config::from_yaml_str(POOLS_YAML).unwrap();
    let flat: Vec<(&str, &str, u32)> = c
        .backends
        .iter()
        .map(|b| (b.name.as_str(), b.pool.as_str(), b.weight))
        .collect();
    assert_eq!(
        flat,
        [
            ("a1", "default", 1),
            ("r1", "reporting", 2),
            ("127.0.0.1:3312", "reporting", 1),
            ("e1", "etl", 1)
        ]
    );
    assert_eq!(c.backends[3].kind, BackendKind::Ro);
    assert_eq!(
        c.pools,
        [
            pool("default", Policy::RoundRobin),
            pool("reporting", Policy::LeastConnections),
            pool("etl", Policy::RoundRobin)
        ]
    );
    assert_eq!(c.default_pool.as_deref(), Some("default"));
    assert_eq!(c.connect_mode, ConnectMode::Auto);
    assert!(c.defers_connect(), "auto, with user routes");
    assert_eq!(c.routes.len(), 6);
    assert_eq!(
        c.routes[0],
        RouteConfig {
            user: Some("reporting".into()),
            ..route_to("reporting")
        }
    );
    assert_eq!(c.routes[2].client, Some("10.1.0.0/16".parse().unwrap()));
    assert_eq!(
        c.routes[4],
        RouteConfig {
            user: Some("etl_*".into()),
            schema: Some("staging".into()),
            ..route_to("etl")
        }
    );
    // A unix listener written as a path is kept as the listener displays it.
    assert_eq!(
        c.routes[5].listener.as_deref(),
        Some("unix:/tmp/mysql-lb-test.sock")
    );
}

#[test]
fn pools_inherit_the_balancer_policy_and_the_backend_defaults() {
    let c = Config::from_yaml_str(
        r#"
balancer: {policy: random}
backend_tls: {mode: required}
backend_compression: true
backends: [h:1]
pools:
  own: {policy: round_robin, backends: [h:2]}
  inherits:
    backends:
      - h:3
      - {address: "h:4", compression: false, tls: {mode: disabled}}
"#,
    )
    .unwrap();
    assert_eq!(
        c.pools,
        [
            pool("default", Policy::Random),
            pool("own", Policy::RoundRobin),
            pool("inherits", Policy::Random)
        ]
    );
    let legs: Vec<(BackendTlsMode, bool)> = c
        .backends
        .iter()
        .map(|b| (b.tls.mode, b.compression))
        .collect();
    assert_eq!(
        legs,
        [
            (BackendTlsMode::Required, true),
            (BackendTlsMode::Required, true),
            (BackendTlsMode::Required, true),
            (BackendTlsMode::Disabled, false)
        ]
    );
}

#[test]
fn pools_without_top_level_backends_have_no_default_pool() {
    let c = Config::from_yaml_str("pools:\n  r: {backends: [h:1]}\n").unwrap();
    assert_eq!(c.pools, [pool("r", Policy::RoundRobin)]);
    assert_eq!(c.backends[0].pool, "r");
    assert_eq!(c.default_pool, None, "unmatched clients are refused");
    assert_eq!(c.connect_mode, ConnectMode::Auto);
    let c = Config::from_yaml_str("pools:\n  r: {backends: [h:1]}\ndefault_pool: r\n").unwrap();
    assert_eq!(c.default_pool.as_deref(), Some("r"));
    // An explicit default_pool wins over "default".
    let c = Config::from_yaml_str(&format!("{POOLS_YAML}default_pool: etl\n")).unwrap();
    assert_eq!(c.default_pool.as_deref(), Some("etl"));
}

#[test]
fn no_pools_and_no_routes_is_the_old_configuration() {
    let c = Config::from_yaml_str("backends: [h:1, h:2]\npools: {}\nroutes: []\n").unwrap();
    assert_eq!(c.pools, [pool("default", Policy::RoundRobin)]);
    assert!(c.backends.iter().all(|b| b.pool == DEFAULT_POOL));
    assert!(c.routes.is_empty());
    assert_eq!(c.connect_mode, ConnectMode::Auto);
    assert_eq!(
        Config::from_yaml_str("backends: [h:1]\npools:\n")
            .unwrap()
            .pools
            .len(),
        1
    );
}

#[test]
fn route_to_an_unknown_pool_lists_the_pools() {
    let e = err("backends: [h:1]\npools:\n  reporting: {backends: [h:2]}\nroutes:\n  - {user: a, pool: reporting}\n  - {user: b, pool: reporting}\n  - {user: c, pool: x}\n");
    assert!(
        e.ends_with(r#"routes[2].pool: unknown pool "x" (pools: default, reporting)"#),
        "{e}"
    );
    let e = pools_err("default_pool: nope\n");
    assert!(
        e.ends_with(r#"default_pool: unknown pool "nope" (pools: default, reporting, etl)"#),
        "{e}"
    );
    // Without `backends:` there is no "default" pool to name.
    let e = err("pools:\n  r: {backends: [h:1]}\nroutes: [{user: u, pool: default}]\n");
    assert!(
        e.ends_with(r#"routes[0].pool: unknown pool "default" (pools: r)"#),
        "{e}"
    );
    let e = err("pools:\n  r: {backends: [h:1]}\ndefault_pool: default\n");
    assert!(e.contains("default_pool: unknown pool \"default\""), "{e}");
}

#[test]
fn route_without_a_condition_points_to_default_pool() {
    let e = err("backends: [h:1]\nroutes:\n  - {user: u, pool: default}\n  - {pool: default}\n");
    assert!(e.contains("routes[1]: no condition"), "{e}");
    assert!(e.contains("use default_pool"), "{e}");
    // `user:` with no value is YAML null: no condition either.
    let e = err("backends: [h:1]\nroutes:\n  - {user: , pool: default}\n");
    assert!(e.contains("routes[0]: no condition"), "{e}");
}

#[test]
fn bad_cidrs_and_patterns_name_the_key() {
    let cases = [
        ("{client: 10.1.0.0/33, pool: default}", "routes[0].client: `10.1.0.0/33`: prefix length `33` is not 0..=32"),
        ("{client: 10.1.2.3/16, pool: default}", "routes[0].client: `10.1.2.3/16`: host bits are set past the /16; did you mean 10.1.0.0/16?"),
        ("{client: db.example, pool: default}", "routes[0].client: `db.example`: `db.example` is not an IP address"),
        ("{client: [1], pool: default}", "routes[0].client: invalid type: sequence"),
        ("{user: \"\", pool: default}", "routes[0].user: empty pattern"),
        ("{schema: \"\", pool: default}", "routes[0].schema: empty pattern"),
        ("{user: \"a\\tb\", pool: default}", "routes[0].user: pattern \"a\\tb\" contains a control character"),
        ("{usr: a, pool: default}", "routes[0]: unknown field `usr`"),
        ("{user: a}", "routes[0]: missing field `pool`"),
    ];
    for (route, want) in cases {
        let e = err(&format!("backends: [h:1]\nroutes:\n  - {route}\n"));
        assert!(e.contains(want), "{route}: got {e:?}, want {want:?}");
    }
    // serde errors also carry the line.
    let e = err("backends: [h:1]\nroutes:\n  - {user: a, pool: default}\n  - {client: 300.0.0.0/8, pool: default}\n");
    assert!(
        e.contains("routes[1].client") && e.contains("line 4"),
        "{e}"
    );
}

#[test]
fn v6_networks_and_bare_addresses_parse_when_quoted() {
    let c = Config::from_yaml_str(
        "backends: [h:1]\nroutes:\n  - {client: \"fd00::/8\", pool: default}\n  - {client: 192.0.2.7, pool: default}\n",
    )
    .unwrap();
    assert_eq!(c.routes[0].client.unwrap().to_string(), "fd00::/8");
    assert_eq!(c.routes[1].client.unwrap().to_string(), "192.0.2.7/32");
}

#[test]
fn connect_mode_resolves_auto_and_refuses_immediate_with_identity_routes() {
    let client_only = "backends: [127.0.0.1:1]\nroutes: [{client: 10.0.0.0/8, pool: default}]\n";
    let c = Config::from_yaml_str(client_only).unwrap();
    assert_eq!(c.connect_mode, ConnectMode::Auto);
    assert!(!c.defers_connect(), "auto, no identity route, loopback");
    let c = Config::from_yaml_str(&format!("{client_only}connect_mode: deferred\n")).unwrap();
    assert!(c.defers_connect());
    let c = Config::from_yaml_str(&format!("{client_only}connect_mode: immediate\n")).unwrap();
    assert!(!c.defers_connect());
    let c = Config::from_yaml_str("backends: [127.0.0.1:1]\nconnect_mode: deferred\n").unwrap();
    assert!(c.defers_connect(), "deferred without routes");
    let e = pools_err("connect_mode: immediate\n");
    assert!(
        e.contains("connect_mode: immediate connects before the client names its user and schema, but routes[0] matches on them"),
        "{e}"
    );
    let e = err("backends: [h:1]\nroutes: [{client: \"::1\", pool: default}, {schema: s, pool: default}]\nconnect_mode: immediate\n");
    assert!(e.contains("routes[1] matches on them"), "{e}");
    let e = err("backends: [h:1]\nconnect_mode: later\n");
    assert!(e.contains("connect_mode: unknown variant `later`"), "{e}");
}

#[test]
fn auto_defers_the_connect_when_a_backend_can_block_the_proxy() {
    let never_blocked =
        "backends: [127.0.0.1:3306, \"[::1]:3306\", localhost:3306, 127.9.9.9:1, /tmp/db.sock]\n";
    let c = Config::from_yaml_str(never_blocked).unwrap();
    assert!(
        !c.defers_connect(),
        "loopback and unix sockets keep the immediate connect"
    );
    assert_eq!(c.connect_mode_warning(), None);
    for remote in ["10.0.0.5:3306", "db.example:3306", "\"[fd00::5]:3306\""] {
        let yaml = format!("backends: [127.0.0.1:3306]\npools:\n  r: {{backends: [{remote}]}}\n");
        let c = Config::from_yaml_str(&yaml).unwrap();
        assert!(c.defers_connect(), "{remote}: auto defers");
        assert_eq!(c.connect_mode_warning(), None, "{remote}");
        let c = Config::from_yaml_str(&format!("{yaml}connect_mode: immediate\n")).unwrap();
        assert!(!c.defers_connect(), "{remote}: immediate as asked");
        let warning = c.connect_mode_warning().expect("a warning");
        let name = remote.trim_matches('"');
        assert!(
            warning.contains(&format!("connect error on {name},")) && warning.contains("1129"),
            "{warning}"
        );
    }
}

#[test]
fn listener_route_must_name_a_listen_entry() {
    let e = err("listen: [\"127.0.0.1:4040\", /tmp/x.sock]\nbackends: [h:1]\nroutes: [{listener: \"127.0.0.1:4041\", pool: default}]\n");
    assert!(
        e.contains("routes[0].listener: `127.0.0.1:4041` is not a listen address (listen: 127.0.0.1:4040, unix:/tmp/x.sock)"),
        "{e}"
    );
    for written in ["/tmp/x.sock", "unix:/tmp/x.sock"] {
        let c = Config::from_yaml_str(&format!(
            "listen: [\"unix:/tmp/x.sock\"]\nbackends: [h:1]\nroutes: [{{listener: \"{written}\", pool: default}}]\n"
        ))
        .unwrap();
        assert_eq!(c.routes[0].listener.as_deref(), Some("unix:/tmp/x.sock"));
    }
    // ":4040" is 0.0.0.0:4040, as in `listen:`.
    let c = Config::from_yaml_str(
        "listen: [\":4040\"]\nbackends: [h:1]\nroutes: [{listener: \"0.0.0.0:4040\", pool: default}]\n",
    )
    .unwrap();
    assert_eq!(c.routes[0].listener.as_deref(), Some("0.0.0.0:4040"));
    let e = err("backends: [h:1]\nroutes: [{listener: \"127.0.0.1:x\", pool: default}]\n");
    assert!(
        e.contains("routes[0].listener: `127.0.0.1:x`: invalid port"),
        "{e}"
    );
}

#[test]
fn pool_names_and_pool_contents_are_checked() {
    let e = err("backends: [h:1]\npools:\n  r: {backends: [h:2]}\n  r: {backends: [h:3]}\n");
    assert!(e.contains("duplicate pool name `r`"), "{e}");
    let e = err("backends: [h:1]\npools:\n  default: {backends: [h:2]}\n");
    assert!(
        e.contains("pools.default: \"default\" is the pool of the top-level `backends:`"),
        "{e}"
    );
    let e = err("backends: [h:1]\npools:\n  empty: {policy: random}\n");
    assert!(
        e.contains("pools.empty.backends: no backend: a pool needs at least one"),
        "{e}"
    );
    let e = err("backends: [h:1]\npools:\n  empty: {backends: []}\n");
    assert!(e.contains("pools.empty.backends: no backend"), "{e}");
    let e = err("backends: [h:1]\npools:\n  \"\": {backends: [h:2]}\n");
    assert!(
        e.contains("pools: pool name \"\" must be non-empty printable text"),
        "{e}"
    );
    let e = err("backends: [h:1]\npools:\n  r: {policy: fastest, backends: [h:2]}\n");
    assert!(
        e.contains("pools.r.policy: unknown variant `fastest`"),
        "{e}"
    );
    let e = err("backends: [h:1]\npools:\n  r:\n    backends: [h:2]\n    wieght: 2\n");
    assert!(
        e.contains("pools.r: unknown field `wieght`") && e.contains("line 5"),
        "{e}"
    );
    let e = err("backends: [h:1]\npools:\n  r:\n    backends: [{address: h:2, wieght: 2}]\n");
    assert!(
        e.contains("pools.r.backends[0]: unknown field `wieght`"),
        "{e}"
    );
    let e = err("backends: [h:1]\npools: [r]\n");
    assert!(
        e.contains("pools: invalid type: sequence, expected a map"),
        "{e}"
    );
}

#[test]
fn backend_checks_name_the_pool_the_backend_is_in() {
    let e = err("backends: [{name: x, address: h:1}]\npools:\n  r: {backends: [h:2, {name: x, address: h:3}]}\n");
    assert!(
        e.contains("pools.r.backends[1].name: duplicate backend name `x` (same as backends[0])"),
        "{e}"
    );
    let e = err("pools:\n  r: {backends: [{name: x, address: h:1}]}\n  s: {backends: [{name: x, address: h:2}]}\n");
    assert!(
        e.contains(
            "pools.s.backends[0].name: duplicate backend name `x` (same as pools.r.backends[0])"
        ),
        "{e}"
    );
    let e = err("backends: [h:1]\npools:\n  r: {backends: [h:2, {address: h:3, weight: 0}]}\n");
    assert!(e.contains("pools.r.backends[1].weight: must be > 0"), "{e}");
    let e =
        err("backends: [h:1]\npools:\n  r: {backends: [{address: h:2, tls: {mode: verify_ca}}]}\n");
    assert!(
        e.contains("pools.r.backends[0].tls.ca: mode verify_ca needs `ca`"),
        "{e}"
    );
    let e = err("pools: {}\n");
    assert!(e.contains("backends: no backend configured"), "{e}");
}

#[test]
fn backend_flags_replace_only_the_default_pool() {
    let f = write_temp(
        "backends: [h:1, h:2]\npools:\n  r: {backends: [h:3]}\nroutes: [{user: u, pool: r}]\n",
    );
    let cli = Cli::parse_from([
        "mysql-lb",
        "--config",
        f.path().to_str().unwrap(),
        "--proxy-backend-addresses",
        "db:1",
        "--proxy-read-only-backend-addresses",
        "ro:1",
    ]);
    let c = Config::load(&cli).unwrap();
    let flat: Vec<(&str, &str)> = c
        .backends
        .iter()
        .map(|b| (b.name.as_str(), b.pool.as_str()))
        .collect();
    assert_eq!(
        flat,
        [("db:1", "default"), ("ro:1", "default"), ("h:3", "r")]
    );
    assert_eq!(c.backends[1].kind, BackendKind::Ro);
    // Read-only flags add to the default pool, before the other pools' backends.
    let cli = Cli::parse_from([
        "mysql-lb",
        "--config",
        f.path().to_str().unwrap(),
        "--proxy-read-only-backend-addresses",
        "ro:1",
    ]);
    let names: Vec<String> = Config::load(&cli)
        .unwrap()
        .backends
        .into_iter()
        .map(|b| b.name)
        .collect();
    assert_eq!(names, ["h:1", "h:2", "ro:1", "h:3"]);
}

#[test]
fn backend_flags_create_the_default_pool_when_the_file_has_none() {
    let f = write_temp("pools:\n  r: {backends: [h:3]}\nroutes: [{user: u, pool: r}]\n");
    let cli = Cli::parse_from([
        "mysql-lb",
        "--config",
        f.path().to_str().unwrap(),
        "--proxy-backend-addresses",
        "db:1",
        "--balancer",
        "random",
    ]);
    let c = Config::load(&cli).unwrap();
    assert_eq!(
        c.pools,
        [pool("default", Policy::Random), pool("r", Policy::Random)]
    );
    assert_eq!(c.default_pool.as_deref(), Some("default"));
    assert_eq!(c.backends[0].pool, "default");
    // Flags only, no file: one default pool with the flag's policy.
    let cli = Cli::parse_from(["mysql-lb", "--proxy-backend-addresses", "a:1,b:2"]);
    let c = Config::load(&cli).unwrap();
    assert_eq!(c.pools, [pool("default", Policy::RoundRobin)]);
    assert_eq!(c.default_pool.as_deref(), Some("default"));
}

#[test]
fn balancer_flag_reaches_pools_without_their_own_policy() {
    let f = write_temp("backends: [h:1]\npools:\n  own: {policy: least_connections, backends: [h:2]}\n  inherits: {backends: [h:3]}\n");
    let cli = Cli::parse_from([
        "mysql-lb",
        "--config",
        f.path().to_str().unwrap(),
        "--balancer",
        "random",
    ]);
    let c = Config::load(&cli).unwrap();
    assert_eq!(
        c.pools,
        [
            pool("default", Policy::Random),
            pool("own", Policy::LeastConnections),
            pool("inherits", Policy::Random)
        ]
    );
}

#[test]
fn validate_completes_a_config_built_in_code() {
    let backend = |name: &str, pool: &str| BackendConfig {
        pool: pool.into(),
        ..BackendConfig::new(tcp(name, 1), None, None, BackendKind::Rw)
    };
    let c = Config {
        backends: vec![backend("r", "reporting"), backend("d", DEFAULT_POOL)],
        routes: vec![RouteConfig {
            client: Some("127.0.0.0/8".parse().unwrap()),
            ..route_to("reporting")
        }],
        balancer: BalancerConfig {
            policy: Policy::LeastConnections,
            ..BalancerConfig::default()
        },
        ..Config::default()
    }
    .validate()
    .unwrap();
    assert_eq!(
        c.pools,
        [
            pool("default", Policy::LeastConnections),
            pool("reporting", Policy::LeastConnections)
        ]
    );
    let order: Vec<&str> = c.backends.iter().map(|b| b.pool.as_str()).collect();
    assert_eq!(order, ["default", "reporting"], "grouped, default first");
    assert_eq!(c.default_pool.as_deref(), Some("default"));
    // A code-built config defaults to auto, as the file does: an identity route defers, and
    // an explicit immediate is refused.
    let identity = Config {
        backends: vec![backend("d", DEFAULT_POOL)],
        routes: vec![RouteConfig {
            user: Some("u".into()),
            ..route_to(DEFAULT_POOL)
        }],
        ..Config::default()
    };
    assert!(identity.clone().validate().unwrap().defers_connect());
    let e = Config {
        connect_mode: ConnectMode::Immediate,
        ..identity
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(e.contains("connect_mode: immediate"), "{e}");
}

#[test]
fn admin_off_loopback_needs_a_token_file() {
    let base = "backends: [{address: 127.0.0.1:3306}]\n";
    let e = err(&format!("{base}admin_address: 0.0.0.0:9090\n"));
    assert!(
        e.contains("admin_address") && e.contains("admin_token_file"),
        "{e}"
    );
    let c = Config::from_yaml_str(&format!("{base}admin_address: \"[::1]:9090\"\n")).unwrap();
    assert_eq!(c.admin_token, None);

    let token = write_temp("  s3cret \n");
    let c = Config::from_yaml_str(&format!(
        "{base}admin_address: 0.0.0.0:9090\nadmin_token_file: {}\n",
        token.path().display()
    ))
    .unwrap();
    assert_eq!(
        c.admin_token.as_ref().map(|t| t.as_bytes()),
        Some(&b"s3cret"[..])
    );
    assert!(
        !format!("{c:?}").contains("s3cret"),
        "Debug hides the token"
    );

    let empty = write_temp(" \n");
    let e = err(&format!(
        "{base}admin_token_file: {}\n",
        empty.path().display()
    ));
    assert!(
        e.contains("admin_token_file") && e.contains("no token"),
        "{e}"
    );
    let e = err(&format!("{base}admin_token_file: /nonexistent/token\n"));
    assert!(
        e.contains("admin_token_file") && e.contains("cannot read"),
        "{e}"
    );
}

#[test]
fn ejection_section_parses_with_defaults_and_switches() {
    let c = Config::from_yaml_str(
        "backends: [h:1]\nbalancer:\n  ejection:\n    failures: 3\n    window: 5s\n    max_share: 0.34\n",
    )
    .unwrap();
    let e = c.balancer.ejection;
    assert_eq!(e.failures, 3);
    assert_eq!(e.window, Duration::from_secs(5));
    assert_eq!(e.backoff, EjectionConfig::default().backoff);
    assert_eq!(e.max_share, 0.34);
    for off in ["off", "false"] {
        let c = Config::from_yaml_str(&format!("backends: [h:1]\nbalancer: {{ejection: {off}}}"))
            .unwrap();
        assert!(!c.balancer.ejection.enabled(), "{off}");
    }
    let on = Config::from_yaml_str("backends: [h:1]\nbalancer: {ejection: on}").unwrap();
    assert_eq!(on.balancer.ejection, EjectionConfig::default());
    let none = Config::from_yaml_str("backends: [h:1]").unwrap();
    assert!(none.balancer.ejection.enabled(), "on by default");
}

#[test]
fn bad_ejection_values_name_their_key() {
    for (yaml, key) in [
        ("{failures: 2, window: 0s}", "balancer.ejection.window"),
        (
            "{backoff: 1m, max_backoff: 10s}",
            "balancer.ejection.max_backoff",
        ),
        ("{max_share: 1.5}", "balancer.ejection.max_share"),
        ("{max_share: -0.1}", "balancer.ejection.max_share"),
        ("{max_share: .nan}", "balancer.ejection.max_share"),
    ] {
        let e = Config::from_yaml_str(&format!("backends: [h:1]\nbalancer: {{ejection: {yaml}}}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{yaml}: {e}");
    }
    let e = Config::from_yaml_str("backends: [h:1]\nbalancer: {ejection: {failure: 2}}")
        .unwrap_err()
        .to_string();
    assert!(e.contains("ejection"), "{e}");
}

#[test]
fn kill_account_and_peer_token_file_are_read_and_checked() {
    let base = "backends: [{address: 127.0.0.1:3306}]\n";
    let c = Config::from_yaml_str(base).unwrap();
    assert_eq!(
        (c.kill.user.as_deref(), c.peer_token.is_none()),
        (None, true)
    );
    let token = write_temp(" peer-s3cret\n");
    let c = Config::from_yaml_str(&format!(
        "{base}kill: {{user: lbkill, password: pw}}\npeer_token_file: {}\n",
        token.path().display()
    ))
    .unwrap();
    assert_eq!(
        (
            c.kill.user.as_deref(),
            c.kill.password.as_ref().map(|p| p.expose())
        ),
        (Some("lbkill"), Some("pw"))
    );
    assert_eq!(
        c.peer_token.as_ref().map(|t| t.as_bytes()),
        Some(&b"peer-s3cret"[..])
    );
    let e = err(&format!("{base}kill: {{password: pw}}\n"));
    assert!(
        e.contains("kill.password") && e.contains("kill.user"),
        "{e}"
    );
    let e = err(&format!("{base}kill: {{user: lbkill, role: x}}\n"));
    assert!(e.contains("role"), "unknown keys are errors: {e}");
    let e = err(&format!("{base}peer_token_file: /nonexistent/token\n"));
    assert!(
        e.contains("peer_token_file") && e.contains("cannot read"),
        "{e}"
    );
}

#[test]
fn only_tcp_to_a_name_or_address_other_than_loopback_leaves_the_host() {
    let leaves = |s: &str| s.parse::<BackendAddr>().unwrap().leaves_host();
    for local in [
        "localhost:3306",
        "LOCALHOST:1",
        "127.0.0.1:3306",
        "127.1.2.3:1",
        "[::1]:3306",
    ] {
        assert!(!leaves(local), "{local}");
    }
    assert!(!leaves("/run/mysqld/mysqld.sock"));
    // Names are not resolved: one that points at loopback still counts as leaving.
    for remote in [
        "10.77.0.1:3306",
        "db1.example:3306",
        "[fd00::1]:3306",
        "localhost.localdomain:1",
    ] {
        assert!(leaves(remote), "{remote}");
    }
}

#[test]
fn pooling_applies_to_its_pool_and_the_top_level_one_to_default_however_its_backends_come() {
    let c = Config::from_yaml_str(
        "pooling: {mode: transaction, max_server_connections: 10, wait_timeout: 2s}\n\
         backends: [\"127.0.0.1:3306\"]\n\
         pools:\n  etl:\n    pooling: {mode: transaction, max_server_connections: 3}\n    \
         backends: [\"127.0.0.1:3307\"]\n  plain:\n    backends: [\"127.0.0.1:3308\"]\n",
    )
    .unwrap();
    let of = |name: &str| c.pools.iter().find(|p| p.name == name).unwrap().pooling;
    assert_eq!(of("default").mode, PoolingMode::Transaction);
    assert_eq!(of("default").max_server_connections, 10);
    assert_eq!(
        of("default").wait_timeout,
        std::time::Duration::from_secs(2)
    );
    assert_eq!(of("default").idle_timeout, Pooling::default().idle_timeout);
    assert_eq!(of("etl").max_server_connections, 3);
    assert_eq!(of("plain").mode, PoolingMode::Session);

    // Backends given only as flags still get the top-level pooling.
    let mut flags = super::raw::RawConfig::parse("pooling: {mode: transaction}\n")
        .unwrap()
        .into_config()
        .unwrap();
    flags.backends.push(BackendConfig {
        name: "db".into(),
        address: tcp("127.0.0.1", 3306),
        weight: 1,
        kind: BackendKind::Rw,
        tls: Default::default(),
        compression: false,
        proxy_protocol: None,
        pool: DEFAULT_POOL.into(),
        role: None,
    });
    let flags = flags.validate().unwrap();
    assert_eq!(flags.pools[0].pooling.mode, PoolingMode::Transaction);

    // A session-mode pool among them: two descriptors per client.
    assert_eq!(
        c.descriptor_budget(),
        crate::config::limits::Budget::SESSION
    );
    let all = Config::from_yaml_str(
        "pooling: {mode: transaction, max_server_connections: 10}\n\
         backends: [\"127.0.0.1:3306\", \"127.0.0.1:3309\"]\n\
         pools:\n  etl:\n    pooling: {mode: transaction, max_server_connections: 3}\n    \
         backends: [\"127.0.0.1:3307\"]\n",
    )
    .unwrap();
    let budget = all.descriptor_budget();
    assert_eq!((budget.per_connection, budget.shared), (1, 2 * 10 + 3));
    let plain = Config::from_yaml_str("backends: [\"127.0.0.1:3306\"]\n").unwrap();
    assert_eq!(
        plain.descriptor_budget(),
        crate::config::limits::Budget::SESSION
    );
}

#[test]
fn pooling_refuses_a_limit_below_two_and_zero_timeouts_naming_the_key() {
    let e = err(
        "backends: [\"127.0.0.1:3306\"]\npooling: {mode: transaction, max_server_connections: 1}\n",
    );
    assert!(e.contains("pooling.max_server_connections"), "{e}");
    let e = err("backends: [\"127.0.0.1:3306\"]\npools:\n  p:\n    pooling: {wait_timeout: 0s}\n    backends: [\"127.0.0.1:3307\"]\n");
    assert!(e.contains("pools.p.pooling.wait_timeout"), "{e}");
    let e = err("pooling: {mode: sometimes}\n");
    assert!(e.contains("mode"), "{e}");
    let e = err("backends: [\"127.0.0.1:3306\"]\npooling: {across_backends: true}\n");
    assert!(
        e.contains("pooling.across_backends") && e.contains("transaction"),
        "{e}"
    );
}

#[test]
fn pooling_across_backends_is_off_unless_said_and_per_pool() {
    let ok = |yaml: &str| Config::from_yaml_str(yaml).unwrap();
    let c = ok("backends: [\"127.0.0.1:3306\"]\npooling: {mode: transaction}\n");
    assert!(!c.pooling.across_backends);
    let c = ok("backends: [\"127.0.0.1:3306\"]\npools:\n  p:\n    pooling: {mode: transaction, across_backends: true}\n    backends: [\"127.0.0.1:3307\", \"127.0.0.1:3308\"]\n");
    let p = c.pools.iter().find(|p| p.name == "p").expect("pool p");
    assert!(p.pooling.across_backends);
    assert!(!c.pooling.across_backends, "the default pool keeps its own");
}
