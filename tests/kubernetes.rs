//! deploy/kubernetes/ checked without a cluster: the manifests against the Kubernetes API
//! schemas (`kubernetes-validate --strict`, installed by scripts/install-deps.sh), the PodMonitor
//! (a CRD those schemas do not have) by the fields the Prometheus Operator requires, checked
//! here, and what no schema can see: the objects agreeing with each other and with the
//! config.yaml they carry (ports, probe paths, selectors, mounts, the grace period against the
//! shutdown timing), that config.yaml passing `mysql-lb --check-config`, and the real binary
//! with it (moved to loopback) answering the probe paths as the Deployment expects.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_yaml::Value;

use common::daemon::{Daemon, BIN};
use common::mariadb::free_port;
use common::proxy::http_get;
use common::wait_until;
/// The Kubernetes versions validated against: the oldest we claim (topologySpreadConstraints'
/// `matchLabelKeys` is on by default from 1.27) and the newest the pinned validator knows.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.30.0", "1.37.0"];
const PODMONITOR: &str = "podmonitor.yaml";

fn kit_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes")
}

fn manifest(name: &str) -> Value {
    let path = kit_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{name} is not YAML: {e}"))
}

/// `path` ("spec.template.spec" or "containers.0") inside `v`; panics naming what is missing.
fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, key| {
        let next = match key.parse::<usize>() {
            Ok(i) => v.get(i),
            Err(_) => v.get(key),
        };
        next.unwrap_or_else(|| panic!("no `{key}` (of `{path}`) in {v:?}"))
    })
}

fn text<'a>(v: &'a Value, path: &str) -> &'a str {
    at(v, path)
        .as_str()
        .unwrap_or_else(|| panic!("`{path}` is not a string"))
}

fn number(v: &Value, path: &str) -> u64 {
    at(v, path)
        .as_u64()
        .unwrap_or_else(|| panic!("`{path}` is not a number"))
}

fn list<'a>(v: &'a Value, path: &str) -> &'a [Value] {
    at(v, path)
        .as_sequence()
        .unwrap_or_else(|| panic!("`{path}` is not a list"))
}

fn duration(v: &Value, key: &str) -> Duration {
    humantime::parse_duration(text(v, key))
        .unwrap_or_else(|e| panic!("config.yaml `{key}` is not a duration: {e}"))
}

/// The port of an "ip:port" address.
fn port_of(addr: &str) -> u64 {
    let (_, port) = addr
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("`{addr}` is not ip:port"));
    port.parse()
        .unwrap_or_else(|_| panic!("bad port in `{addr}`"))
}

/// The ConfigMap's config.yaml, parsed.
fn proxy_config() -> Value {
    let configmap = manifest("configmap.yaml");
    let raw = at(&configmap, "data")
        .get("config.yaml")
        .and_then(Value::as_str)
        .expect("the ConfigMap has data.config.yaml");
    serde_yaml::from_str(raw).expect("config.yaml in the ConfigMap is YAML")
}

fn pod_spec(deployment: &Value) -> &Value {
    at(deployment, "spec.template.spec")
}

/// The one container, mysql-lb.
fn container(deployment: &Value) -> &Value {
    let containers = list(pod_spec(deployment), "containers");
    assert_eq!(containers.len(), 1, "one container per pod");
    assert_eq!(text(&containers[0], "name"), "mysql-lb");
    &containers[0]
}

fn container_port(container: &Value, name: &str) -> u64 {
    list(container, "ports")
        .iter()
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
        .map(|p| number(p, "containerPort"))
        .unwrap_or_else(|| panic!("the container has no port named `{name}`"))
}

fn pod_labels(deployment: &Value) -> &Value {
    at(deployment, "spec.template.metadata.labels")
}

fn validator() -> PathBuf {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(".test-clients/venv/bin/kubernetes-validate");
    let runs = Command::new(&path)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        runs,
        "{} does not run: run scripts/install-deps.sh, which installs kubernetes-validate (pinned) \
         into .test-clients/venv",
        path.display()
    );
    path
}

fn kustomization_resources() -> Vec<String> {
    list(&manifest("kustomization.yaml"), "resources")
        .iter()
        .map(|r| r.as_str().expect("a resource is a file name").to_owned())
        .collect()
}

#[test]
fn every_manifest_passes_the_kubernetes_schemas_strictly() {
    let validate = validator();
    let files: Vec<String> = kustomization_resources()
        .into_iter()
        .filter(|f| f != PODMONITOR)
        .collect();
    for version in KUBERNETES_VERSIONS {
        let out = Command::new(&validate)
            .args(["--strict", "-k", version])
            .args(&files)
            .current_dir(kit_dir())
            .output()
            .expect("run kubernetes-validate");
        let report = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "Kubernetes {version}:\n{report}");
        // A kind or apiVersion it has no schema for is only a warning: require a pass for each.
        for file in &files {
            assert!(
                report.contains(&format!("{file} passed for resource")),
                "{file} was not validated against Kubernetes {version}:\n{report}"
            );
        }
    }
}

#[test]
fn the_podmonitor_has_what_the_prometheus_operator_requires() {
    let pm = manifest(PODMONITOR);
    let deployment = manifest("deployment.yaml");
    assert_eq!(text(&pm, "apiVersion"), "monitoring.coreos.com/v1");
    assert_eq!(text(&pm, "kind"), "PodMonitor");
    assert!(!text(&pm, "metadata.name").is_empty());
    assert_eq!(
        at(&pm, "spec.selector.matchLabels"),
        pod_labels(&deployment),
        "the PodMonitor selects the Deployment's pods"
    );
    let endpoints = list(&pm, "spec.podMetricsEndpoints");
    assert!(!endpoints.is_empty(), "podMetricsEndpoints is empty");
    let known: BTreeSet<&str> = ["port", "path", "interval", "scrapeTimeout"].into();
    for e in endpoints {
        let keys: BTreeSet<&str> = e
            .as_mapping()
            .expect("an endpoint is a map")
            .keys()
            .filter_map(Value::as_str)
            .collect();
        assert!(keys.is_subset(&known), "unexpected keys in {keys:?}");
        let port = text(e, "port");
        container_port(container(&deployment), port);
        assert_eq!(port, "admin", "metrics are on the admin port");
        assert_eq!(text(e, "path"), "/metrics");
        // The operator refuses a scrape timeout longer than the interval.
        let interval = humantime::parse_duration(text(e, "interval")).expect("interval");
        let timeout = humantime::parse_duration(text(e, "scrapeTimeout")).expect("scrapeTimeout");
        assert!(timeout <= interval, "scrapeTimeout > interval");
    }
}

#[test]
fn kustomization_lists_every_manifest_and_sets_the_image() {
    let listed: BTreeSet<String> = kustomization_resources().into_iter().collect();
    let on_disk: BTreeSet<String> = std::fs::read_dir(kit_dir())
        .expect("read deploy/kubernetes")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    assert_eq!(listed, on_disk, "kustomization.yaml resources vs the files");
    let (kustomization, deployment) = (manifest("kustomization.yaml"), manifest("deployment.yaml"));
    let images = list(&kustomization, "images");
    let image = text(container(&deployment), "image");
    assert!(
        images.iter().any(|i| text(i, "name") == image),
        "kustomization.yaml has no `images:` entry for `{image}`"
    );
}

#[test]
fn grace_period_outlasts_shutdown_delay_plus_timeout() {
    let config = proxy_config();
    let delay = duration(&config, "shutdown_delay");
    let timeout = duration(&config, "shutdown_timeout");
    let grace = Duration::from_secs(number(
        pod_spec(&manifest("deployment.yaml")),
        "terminationGracePeriodSeconds",
    ));
    assert!(
        grace > delay + timeout,
        "terminationGracePeriodSeconds {grace:?} must exceed shutdown_delay {delay:?} + \
         shutdown_timeout {timeout:?}, or SIGKILL cuts the drain short"
    );
}

#[test]
fn ports_and_probes_agree_with_the_config() {
    let config = proxy_config();
    let deployment = manifest("deployment.yaml");
    let c = container(&deployment);
    let listen = list(&config, "listen");
    assert_eq!(listen.len(), 1, "one MySQL listener");
    let listen = listen[0].as_str().expect("listen entry");
    let admin = text(&config, "admin_address");
    for addr in [listen, admin] {
        assert!(
            addr.starts_with("0.0.0.0:") || addr.starts_with("[::]:"),
            "`{addr}` must bind every address: the Service and the kubelet use the pod IP"
        );
    }
    assert_eq!(port_of(listen), container_port(c, "mysql"));
    assert_eq!(port_of(admin), container_port(c, "admin"));

    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/metrics")] {
        assert_eq!(text(c, &format!("{probe}.httpGet.path")), path, "{probe}");
        assert_eq!(
            text(c, &format!("{probe}.httpGet.port")),
            "admin",
            "{probe}"
        );
    }

    let service = manifest("service.yaml");
    assert_eq!(text(&service, "spec.type"), "ClusterIP");
    assert_eq!(text(&service, "spec.sessionAffinity"), "None");
    let ports = list(&service, "spec.ports");
    assert_eq!(ports.len(), 1, "the Service exposes the MySQL port only");
    assert_eq!(number(&ports[0], "port"), 3306);
    assert_eq!(text(&ports[0], "targetPort"), "mysql");

    let labels = pod_labels(&deployment);
    assert_eq!(at(&deployment, "spec.selector.matchLabels"), labels);
    assert_eq!(at(&service, "spec.selector"), labels, "Service selector");
    assert_eq!(
        at(
            &manifest("poddisruptionbudget.yaml"),
            "spec.selector.matchLabels"
        ),
        labels,
        "PodDisruptionBudget selector"
    );
}

/// The mount of the volume that holds `file`, and the file's name inside it.
fn mount_holding<'a>(c: &'a Value, file: &'a str) -> (&'a Value, &'a str) {
    list(c, "volumeMounts")
        .iter()
        .find_map(|m| {
            let dir = text(m, "mountPath").trim_end_matches('/');
            let rest = file.strip_prefix(dir)?.strip_prefix('/')?;
            Some((m, rest))
        })
        .unwrap_or_else(|| panic!("no volume is mounted over {file}"))
}

fn volume<'a>(deployment: &'a Value, name: &str) -> &'a Value {
    list(pod_spec(deployment), "volumes")
        .iter()
        .find(|v| text(v, "name") == name)
        .unwrap_or_else(|| panic!("no volume `{name}`"))
}

#[test]
fn config_and_token_are_mounted_where_the_config_says() {
    let config = proxy_config();
    let deployment = manifest("deployment.yaml");
    let c = container(&deployment);
    let args: Vec<&str> = list(c, "args").iter().filter_map(Value::as_str).collect();
    let config_path = match args.as_slice() {
        ["--config", path] => *path,
        other => panic!("args should be `--config FILE`, are {other:?}"),
    };
    // The image's ENTRYPOINT already names a --config; it may be given only once.
    assert_eq!(list(c, "command"), [Value::from("mysql-lb")]);

    let (mount, key) = mount_holding(c, config_path);
    let v = volume(&deployment, text(mount, "name"));
    let configmap = manifest("configmap.yaml");
    assert_eq!(text(v, "configMap.name"), text(&configmap, "metadata.name"));
    assert!(
        at(&configmap, "data").get(key).is_some(),
        "ConfigMap has no {key}"
    );
    // A subPath mount would never see the ConfigMap change, so the file watch could not reload.
    assert!(
        mount.get("subPath").is_none(),
        "the config is mounted as a directory"
    );

    let (mount, key) = mount_holding(c, text(&config, "admin_token_file"));
    let v = volume(&deployment, text(mount, "name"));
    let secret = manifest("secret.yaml");
    assert_eq!(text(v, "secret.secretName"), text(&secret, "metadata.name"));
    // `stringData` as shipped; `data` (base64) as `kubectl create secret -o yaml` writes it.
    let has_key = ["stringData", "data"]
        .iter()
        .any(|field| secret.get(field).and_then(|d| d.get(key)).is_some());
    assert!(has_key, "Secret has no {key}");
}

#[test]
fn pods_run_unprivileged_bounded_and_spread() {
    let deployment = manifest("deployment.yaml");
    let pod = pod_spec(&deployment);
    let c = container(&deployment);
    assert!(number(&deployment, "spec.replicas") >= 2, "2+ replicas");
    assert_eq!(at(pod, "securityContext.runAsNonRoot"), &Value::Bool(true));
    assert!(number(pod, "securityContext.runAsUser") > 0);
    assert_eq!(
        text(pod, "securityContext.seccompProfile.type"),
        "RuntimeDefault"
    );
    let sc = at(c, "securityContext");
    assert_eq!(at(sc, "allowPrivilegeEscalation"), &Value::Bool(false));
    assert_eq!(at(sc, "readOnlyRootFilesystem"), &Value::Bool(true));
    assert_eq!(list(sc, "capabilities.drop"), [Value::from("ALL")]);
    assert!(sc.get("capabilities").and_then(|c| c.get("add")).is_none());
    for kind in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            at(c, &format!("resources.{kind}.{resource}"));
        }
    }
    let spread = list(pod, "topologySpreadConstraints");
    assert!(
        spread.iter().any(|s| {
            text(s, "topologyKey") == "kubernetes.io/hostname"
                && at(s, "labelSelector.matchLabels") == pod_labels(&deployment)
        }),
        "the pods are spread over nodes"
    );
    let pdb = manifest("poddisruptionbudget.yaml");
    let spec = at(&pdb, "spec");
    let allowed = spec.get("maxUnavailable").and_then(Value::as_u64) == Some(1)
        || spec.get("minAvailable").and_then(Value::as_u64) == Some(1);
    assert!(
        allowed,
        "PodDisruptionBudget: maxUnavailable 1 or minAvailable 1"
    );
}

/// Points `admin_token_file` at a token file in `dir`: the Secret's mount does not exist here.
fn use_test_token(dir: &Path, config: &mut Value) {
    let token = dir.join("token");
    std::fs::write(&token, "test-token\n").expect("write the token");
    config["admin_token_file"] = Value::from(token.to_string_lossy().into_owned());
}

/// Writes `config` to `dir/config.yaml`; its path.
fn write_config(dir: &Path, config: &Value) -> PathBuf {
    let path = dir.join("config.yaml");
    std::fs::write(&path, serde_yaml::to_string(config).expect("serialize")).expect("write");
    path
}

/// `--check-config` on `config`: (success, stderr).
fn check_config(dir: &Path, config: &Value) -> (bool, String) {
    let out = Command::new(BIN)
        .arg("--config")
        .arg(write_config(dir, config))
        .arg("--check-config")
        .output()
        .expect("run mysql-lb --check-config");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The ConfigMap's config (with a test token), after `--check-config` accepted it; panics with
/// what it said otherwise.
fn accepted_config(dir: &Path) -> Value {
    let mut config = proxy_config();
    use_test_token(dir, &mut config);
    let (ok, stderr) = check_config(dir, &config);
    assert!(
        ok,
        "--check-config refused the ConfigMap's config.yaml: {stderr}"
    );
    config
}

#[test]
fn check_config_accepts_the_configmaps_config() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = accepted_config(dir.path());
    assert!(
        config.get("shutdown_delay").is_some(),
        "the kit sets shutdown_delay"
    );
}

/// The kit's config on loopback: MySQL on a free port, admin on `admin`, and every backend's
/// address a closed loopback port (names kept), so all of them are down.
fn on_loopback(mut config: Value, admin: SocketAddr) -> Value {
    config["listen"] = Value::Sequence(vec![Value::from("127.0.0.1:0")]);
    config["admin_address"] = Value::from(admin.to_string());
    let closed = format!("127.0.0.1:{}", free_port());
    for b in config["backends"].as_sequence_mut().expect("backends") {
        b["address"] = Value::from(closed.clone());
    }
    config
}

#[test]
fn probes_answer_as_the_deployment_expects_while_every_backend_is_down() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = accepted_config(dir.path());
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let path = write_config(dir.path(), &on_loopback(config, admin));
    let _daemon = Daemon::start(&["--config".to_owned(), path.display().to_string()], None);
    let status = |path: &str| http_get(admin, path).map(|(code, _)| code);
    wait_until("the admin endpoint", || status("/metrics").is_ok());
    // Why liveness is not /healthz: with no backend up it fails, and the kubelet would restart
    // a proxy that is fine.
    wait_until("/healthz to report no backend up", || {
        status("/healthz") == Ok(503)
    });
    let deployment = manifest("deployment.yaml");
    let c = container(&deployment);
    let liveness = text(c, "livenessProbe.httpGet.path");
    assert_eq!(
        status(liveness),
        Ok(200),
        "liveness {liveness} with every backend down"
    );
    let readiness = text(c, "readinessProbe.httpGet.path");
    match status(readiness) {
        Ok(200) => {}
        other => panic!("readiness {readiness} while serving: {other:?}, expected 200"),
    }
}
