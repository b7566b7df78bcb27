use crate::config::{parse_instance_id, Cli, Config, ConfigError, PeerUrl};
use clap::Parser;

fn invalid(yaml: &str) -> (String, String) {
    match Config::from_yaml_str(yaml) {
        Err(ConfigError::Invalid { key, message, .. }) => (key, message),
        other => panic!("expected an invalid key, got {other:?}"),
    }
}

const BACKEND: &str = "backends: [{address: '127.0.0.1:3306'}]\n";

#[test]
fn defaults_to_a_lone_instance() {
    let c = Config::from_yaml_str(BACKEND).unwrap();
    assert!(!c.instances.reuse_port);
    assert_eq!(c.instances.instance_id, 0);
    assert!(c.instances.peers.is_empty());
}

#[test]
fn reads_reuse_port_instance_id_and_peers() {
    let c = Config::from_yaml_str(&format!(
        "{BACKEND}reuse_port: true\ninstance_id: 255\npeers:\n  - {{instance_id: 0, admin_url: 'http://127.0.0.1:4041/'}}\n  - {{instance_id: 7, admin_url: 'http://[::1]:5041'}}\n"
    ))
    .unwrap();
    assert!(c.instances.reuse_port);
    assert_eq!(c.instances.instance_id, 255);
    assert_eq!(c.instances.peers.len(), 2);
    let peers: Vec<(u8, String)> = c
        .instances
        .peers
        .iter()
        .map(|p| (p.instance_id, p.admin_url.to_string()))
        .collect();
    assert_eq!(
        peers,
        [
            (0, "http://127.0.0.1:4041".into()),
            (7, "http://[::1]:5041".into())
        ]
    );
    assert_eq!(
        c.instances.summary(),
        "instance_id 255, reuse_port on, peers: 0 at http://127.0.0.1:4041, 7 at http://[::1]:5041"
    );
}

#[test]
fn refuses_ids_out_of_range_naming_the_key() {
    let (key, message) = invalid(&format!("{BACKEND}instance_id: 256\n"));
    assert_eq!(key, "instance_id");
    assert!(message.contains("0 to 255"), "{message}");
    let (key, _) = invalid(&format!("{BACKEND}instance_id: -1\n"));
    assert_eq!(key, "instance_id");
    let (key, _) = invalid(&format!(
        "{BACKEND}peers: [{{instance_id: 300, admin_url: 'http://127.0.0.1:1'}}]\n"
    ));
    assert_eq!(key, "peers[0].instance_id");
}

#[test]
fn refuses_bad_urls_self_and_duplicate_peers() {
    for url in [
        "https://127.0.0.1:4041",
        "127.0.0.1:4041",
        "http://a/b:4041",
        "http://a b:4041",
        "http://a\r\nX: y:4041",
        "http://[fe80::1:4041",
        "http://127.0.0.1:0",
        "http://127.0.0.1",
        "http://127.0.0.1:4041/kill",
    ] {
        let (key, message) = invalid(&format!(
            "{BACKEND}peers: [{{instance_id: 1, admin_url: '{url}'}}]\n"
        ));
        assert_eq!(key, "peers[0].admin_url", "{url}");
        assert!(message.contains("http://HOST:port"), "{message}");
    }
    let (key, message) = invalid(&format!(
        "{BACKEND}instance_id: 2\npeers: [{{instance_id: 2, admin_url: 'http://127.0.0.1:1'}}]\n"
    ));
    assert_eq!(key, "peers[0].instance_id");
    assert!(message.contains("own instance_id"), "{message}");
    let (key, message) = invalid(&format!(
        "{BACKEND}peers:\n  - {{instance_id: 1, admin_url: 'http://127.0.0.1:1'}}\n  - {{instance_id: 1, admin_url: 'http://127.0.0.1:2'}}\n"
    ));
    assert_eq!(key, "peers[1].instance_id");
    assert!(message.contains("twice"), "{message}");
    let err = Config::from_yaml_str(&format!(
        "{BACKEND}peers: [{{instance_id: 1, admin_url: 'http://127.0.0.1:1', token: x}}]\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("unknown field `token`"), "{err}");
}

/// The peers a config file gives instance `id` (as `--instance-id` sets it), or the error.
fn peers_for(yaml: &str, id: &str) -> Result<(u8, Vec<(u8, String)>), String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, yaml).unwrap();
    let cli = Cli::parse_from([
        "mysql-lb",
        "--config",
        path.to_str().unwrap(),
        "--instance-id",
        id,
    ]);
    let c = Config::load(&cli).map_err(|e| e.to_string())?;
    let peers = c
        .instances
        .peers
        .iter()
        .map(|p| (p.instance_id, p.admin_url.to_string()))
        .collect();
    Ok((c.instances.instance_id, peers))
}

const TEMPLATE: &str =
    "peers_from: {admin_url: 'http://mysql-lb-{instance_id}.mysql-lb-peers:4041', instances: 3}\n";

#[test]
fn instance_id_flag_takes_a_number_or_a_pod_names_ordinal() {
    assert_eq!(parse_instance_id("0"), Ok(0));
    assert_eq!(parse_instance_id("255"), Ok(255));
    assert_eq!(parse_instance_id("mysql-lb-2"), Ok(2));
    assert_eq!(parse_instance_id("my-proxy-pod-017"), Ok(17));
    for bad in ["256", "mysql-lb-256", "99999999999999999999999"] {
        let e = parse_instance_id(bad).unwrap_err();
        assert!(
            e.contains("out of range") && e.contains("0 to 255"),
            "{bad}: {e}"
        );
    }
    for bad in ["", "-1", "mysql-lb", "mysql-lb-", "mysql-lb-2a", "+3", " 1"] {
        let e = parse_instance_id(bad).unwrap_err();
        assert!(e.contains("pod name ending in its ordinal"), "{bad:?}: {e}");
    }
}

#[test]
fn instance_id_flag_overrides_the_file_and_errors_name_the_flag() {
    let (id, _) = peers_for(&format!("{BACKEND}instance_id: 7\n"), "mysql-lb-1").unwrap();
    assert_eq!(id, 1);
    let e = peers_for(BACKEND, "mysql-lb").unwrap_err();
    assert!(e.starts_with("command line: --instance-id:"), "{e}");
    let e = peers_for(BACKEND, "300").unwrap_err();
    assert!(
        e.starts_with("command line: --instance-id:") && e.contains("out of range"),
        "{e}"
    );
}

#[test]
fn peers_from_expands_to_every_other_instance() {
    let yaml = format!("{BACKEND}{TEMPLATE}");
    let url = |n: u8| format!("http://mysql-lb-{n}.mysql-lb-peers:4041");
    assert_eq!(
        peers_for(&yaml, "mysql-lb-0").unwrap(),
        (0, vec![(1, url(1)), (2, url(2))])
    );
    assert_eq!(
        peers_for(&yaml, "mysql-lb-2").unwrap(),
        (2, vec![(0, url(0)), (1, url(1))])
    );
    let c = Config::from_yaml_str(&format!("{yaml}instance_id: 1\n")).unwrap();
    assert_eq!(
        c.instances.summary(),
        format!(
            "instance_id 1, reuse_port off, peers: 0 at {}, 2 at {}",
            url(0),
            url(2)
        )
    );
    // Validated once more (as a config built in code may be), it stays the same.
    assert_eq!(c.clone().validate().unwrap(), c);
    let lone = Config::from_yaml_str(&format!(
        "{BACKEND}peers_from: {{admin_url: 'http://p-{{instance_id}}:1', instances: 1}}\n"
    ))
    .unwrap();
    assert!(lone.instances.peers.is_empty());
}

#[test]
fn peers_from_refuses_what_cannot_be_right() {
    // The pod's ordinal past the template's count: scaled up without raising `instances`.
    let e = peers_for(&format!("{BACKEND}{TEMPLATE}"), "mysql-lb-3").unwrap_err();
    assert!(
        e.starts_with("command line: --instance-id:") && e.contains("ids 0 to 2"),
        "{e}"
    );
    let (key, message) = invalid(&format!("{BACKEND}{TEMPLATE}instance_id: 3\n"));
    assert_eq!(key, "instance_id");
    assert!(message.contains("peers_from.instances"), "{message}");
    let (key, message) = invalid(&format!(
        "{BACKEND}{TEMPLATE}peers: [{{instance_id: 1, admin_url: 'http://127.0.0.1:1'}}]\n"
    ));
    assert_eq!(key, "peers_from");
    assert!(message.contains("not both"), "{message}");
    let (key, message) = invalid(&format!(
        "{BACKEND}peers_from: {{admin_url: 'http://mysql-lb-0.peers:4041', instances: 2}}\n"
    ));
    assert_eq!(key, "peers_from.admin_url");
    assert!(message.contains("{instance_id}"), "{message}");
    let (key, message) = invalid(&format!(
        "{BACKEND}peers_from: {{admin_url: 'https://p-{{instance_id}}:4041', instances: 2}}\n"
    ));
    assert_eq!(key, "peers_from.admin_url");
    assert!(message.contains("http://HOST:port"), "{message}");
    for n in [0, 257, -1] {
        let (key, message) = invalid(&format!(
            "{BACKEND}peers_from: {{admin_url: 'http://p-{{instance_id}}:1', instances: {n}}}\n"
        ));
        assert_eq!(key, "peers_from.instances");
        assert!(message.contains("1 to 256"), "{message}");
    }
}

#[test]
fn peer_urls_take_names_and_addresses_for_the_host_header() {
    let name =
        PeerUrl::parse("http://mysql-lb-1.mysql-lb-peers.db.svc.cluster.local:4041/").unwrap();
    assert_eq!(
        name.host_port(),
        ("mysql-lb-1.mysql-lb-peers.db.svc.cluster.local", 4041)
    );
    let v6 = PeerUrl::parse("http://[fd00::5]:4041").unwrap();
    assert_eq!(v6.host_port(), ("fd00::5", 4041));
    assert_eq!(v6.authority(), "[fd00::5]:4041");
    assert_eq!(v6.to_string(), "http://[fd00::5]:4041");
    let from_addr = PeerUrl::from("[::1]:5".parse::<std::net::SocketAddr>().unwrap());
    assert_eq!(from_addr, PeerUrl::parse("http://[::1]:5").unwrap());
}
