//! deploy/kubernetes/ checked without a cluster: the manifests against the Kubernetes API
//! schemas (`kubernetes-validate --strict`, installed by scripts/install-deps.sh), the PodMonitor
//! (a CRD those schemas do not have) by the fields the Prometheus Operator requires, checked
//! here, and what no schema can see: the objects agreeing with each other and with the
//! config.yaml they carry (ports, probe paths, selectors, mounts, the grace period against the
//! shutdown timing, the headless Service and `peers_from` naming the pods), that config.yaml
//! passing `mysql-lb --check-config` as each pod runs it (its own `--instance-id` and peers), and
//! the real binary with it (moved to loopback) answering the probe paths as the pods expect.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_yaml::Value;

use common::daemon::{Daemon, BIN};
use common::kubekit::*;
use common::mariadb::{closed_port, ClosedPort};
use common::proxy::http_get;
use common::wait_until;
/// The Kubernetes versions validated against: the oldest we claim (topologySpreadConstraints'
/// `matchLabelKeys` is on by default from 1.27) and the newest the pinned validator knows.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.30.0", "1.37.0"];
const PODMONITOR: &str = "podmonitor.yaml";

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
    let workload = manifest(WORKLOAD);
    assert_eq!(text(&pm, "apiVersion"), "monitoring.coreos.com/v1");
    assert_eq!(text(&pm, "kind"), "PodMonitor");
    assert!(!text(&pm, "metadata.name").is_empty());
    assert_eq!(
        at(&pm, "spec.selector.matchLabels"),
        pod_labels(&workload),
        "the PodMonitor selects the StatefulSet's pods"
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
        container_port(container(&workload), port);
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
    let (kustomization, workload) = (manifest("kustomization.yaml"), manifest(WORKLOAD));
    let images = list(&kustomization, "images");
    let image = text(container(&workload), "image");
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
        pod_spec(&manifest(WORKLOAD)),
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
    let workload = manifest(WORKLOAD);
    let c = container(&workload);
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

    let labels = pod_labels(&workload);
    assert_eq!(at(&workload, "spec.selector.matchLabels"), labels);
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

fn volume<'a>(workload: &'a Value, name: &str) -> &'a Value {
    list(pod_spec(workload), "volumes")
        .iter()
        .find(|v| text(v, "name") == name)
        .unwrap_or_else(|| panic!("no volume `{name}`"))
}

#[test]
fn config_and_token_are_mounted_where_the_config_says() {
    let config = proxy_config();
    let workload = manifest(WORKLOAD);
    let c = container(&workload);
    let args: Vec<&str> = list(c, "args").iter().filter_map(Value::as_str).collect();
    let config_path = match args.as_slice() {
        ["--config", path, "--instance-id", _] => *path,
        other => panic!("args should be `--config FILE --instance-id POD`, are {other:?}"),
    };
    // The image's ENTRYPOINT already names a --config; it may be given only once.
    assert_eq!(list(c, "command"), [Value::from("mysql-lb")]);

    let (mount, key) = mount_holding(c, config_path);
    let v = volume(&workload, text(mount, "name"));
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
    let v = volume(&workload, text(mount, "name"));
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
    let workload = manifest(WORKLOAD);
    let pod = pod_spec(&workload);
    let c = container(&workload);
    assert!(number(&workload, "spec.replicas") >= 2, "2+ replicas");
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
                && at(s, "labelSelector.matchLabels") == pod_labels(&workload)
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

/// The kit's config on loopback: MySQL and admin on port 0 (learnt from the daemon), and every
/// backend's address `closed` (names kept), so all of them are down.
fn on_loopback(mut config: Value, closed: &ClosedPort) -> Value {
    config["listen"] = Value::Sequence(vec![Value::from("127.0.0.1:0")]);
    config["admin_address"] = Value::from("127.0.0.1:0");
    for b in config["backends"].as_sequence_mut().expect("backends") {
        b["address"] = Value::from(closed.address());
    }
    config
}

#[test]
fn probes_answer_as_the_pods_expect_while_every_backend_is_down() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = accepted_config(dir.path());
    let closed = closed_port();
    let path = write_config(dir.path(), &on_loopback(config, &closed));
    let mut daemon = Daemon::start(&["--config".to_owned(), path.display().to_string()], None);
    let admin = daemon.admin_addr();
    let status = |path: &str| http_get(admin, path).map(|(code, _)| code);
    wait_until("the admin endpoint", || status("/metrics").is_ok());
    // Why liveness is not /healthz: with no backend up it fails, and the kubelet would restart
    // a proxy that is fine.
    wait_until("/healthz to report no backend up", || {
        status("/healthz") == Ok(503)
    });
    let workload = manifest(WORKLOAD);
    let c = container(&workload);
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
