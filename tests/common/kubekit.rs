//! deploy/kubernetes/ read as data: its manifests and the config.yaml its ConfigMap carries, with
//! accessors that panic naming what is missing, for the tests that check the kit.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_yaml::Value;

/// The pods' controller: a StatefulSet, so each pod has an ordinal (its instance id) and a DNS
/// name (its peers' way to it).
pub const WORKLOAD: &str = "statefulset.yaml";

pub fn kit_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes")
}

pub fn manifest(name: &str) -> Value {
    let path = kit_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{name} is not YAML: {e}"))
}

/// `path` ("spec.template.spec" or "containers.0") inside `v`; panics naming what is missing.
pub fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, key| {
        let next = match key.parse::<usize>() {
            Ok(i) => v.get(i),
            Err(_) => v.get(key),
        };
        next.unwrap_or_else(|| panic!("no `{key}` (of `{path}`) in {v:?}"))
    })
}

pub fn text<'a>(v: &'a Value, path: &str) -> &'a str {
    at(v, path)
        .as_str()
        .unwrap_or_else(|| panic!("`{path}` is not a string"))
}

pub fn number(v: &Value, path: &str) -> u64 {
    at(v, path)
        .as_u64()
        .unwrap_or_else(|| panic!("`{path}` is not a number"))
}

pub fn list<'a>(v: &'a Value, path: &str) -> &'a [Value] {
    at(v, path)
        .as_sequence()
        .unwrap_or_else(|| panic!("`{path}` is not a list"))
}

pub fn duration(v: &Value, key: &str) -> Duration {
    humantime::parse_duration(text(v, key))
        .unwrap_or_else(|e| panic!("config.yaml `{key}` is not a duration: {e}"))
}

/// The port of an "ip:port" address.
pub fn port_of(addr: &str) -> u64 {
    let (_, port) = addr
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("`{addr}` is not ip:port"));
    port.parse()
        .unwrap_or_else(|_| panic!("bad port in `{addr}`"))
}

/// The ConfigMap's config.yaml, parsed.
pub fn proxy_config() -> Value {
    let configmap = manifest("configmap.yaml");
    let raw = at(&configmap, "data")
        .get("config.yaml")
        .and_then(Value::as_str)
        .expect("the ConfigMap has data.config.yaml");
    serde_yaml::from_str(raw).expect("config.yaml in the ConfigMap is YAML")
}

pub fn pod_spec(workload: &Value) -> &Value {
    at(workload, "spec.template.spec")
}

/// The one container, mysql-lb.
pub fn container(workload: &Value) -> &Value {
    let containers = list(pod_spec(workload), "containers");
    assert_eq!(containers.len(), 1, "one container per pod");
    assert_eq!(text(&containers[0], "name"), "mysql-lb");
    &containers[0]
}

pub fn container_port(container: &Value, name: &str) -> u64 {
    list(container, "ports")
        .iter()
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
        .map(|p| number(p, "containerPort"))
        .unwrap_or_else(|| panic!("the container has no port named `{name}`"))
}

pub fn pod_labels(workload: &Value) -> &Value {
    at(workload, "spec.template.metadata.labels")
}

/// Points `admin_token_file` at a token file in `dir`: the Secret's mount does not exist here.
pub fn use_test_token(dir: &Path, config: &mut Value) {
    let token = dir.join("token");
    std::fs::write(&token, "test-token\n").expect("write the token");
    config["admin_token_file"] = Value::from(token.to_string_lossy().into_owned());
}

/// Writes `config` to `dir/config.yaml`; its path.
pub fn write_config(dir: &Path, config: &Value) -> PathBuf {
    let path = dir.join("config.yaml");
    std::fs::write(&path, serde_yaml::to_string(config).expect("serialize")).expect("write");
    path
}
