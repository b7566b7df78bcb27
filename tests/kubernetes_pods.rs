//! deploy/kubernetes/ gives each pod its own identity: the StatefulSet passes the pod's name as
//! `--instance-id` (its ordinal is the id), the ConfigMap's `peers_from` names every other pod
//! through the headless Service, and the two agree (replicas, Service name, admin port). The
//! kubelet's part is simulated: `$(VAR)` in the args expanded from the pod's own fields, then
//! the real binary run with `--check-config` as each pod would run it.

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use serde_yaml::Value;

use common::daemon::BIN;
use common::kubekit::*;

/// The container's args with each `$(NAME)` replaced as the kubelet does for pod `pod_name`:
/// env vars from `metadata.name` (the only field source the kit uses; anything else fails).
fn args_of_pod(workload: &Value, pod_name: &str) -> Vec<String> {
    let c = container(workload);
    let mut vars = BTreeMap::new();
    for e in list(c, "env") {
        let field = text(e, "valueFrom.fieldRef.fieldPath");
        assert_eq!(
            field,
            "metadata.name",
            "env {} comes from {field}",
            text(e, "name")
        );
        vars.insert(text(e, "name").to_owned(), pod_name.to_owned());
    }
    list(c, "args")
        .iter()
        .map(|a| {
            let mut a = a.as_str().expect("an arg is a string").to_owned();
            for (name, value) in &vars {
                a = a.replace(&format!("$({name})"), value);
            }
            assert!(
                !a.contains("$("),
                "`{a}` names a variable the pod does not set"
            );
            a
        })
        .collect()
}

/// What `mysql-lb --check-config` says, run as pod `ordinal` runs it (the ConfigMap's config at
/// a temp path, with a test token): (success, the instance line or stderr).
fn check_as_pod(ordinal: u64) -> (bool, String) {
    let workload = manifest(WORKLOAD);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = proxy_config();
    use_test_token(dir.path(), &mut config);
    let path = write_config(dir.path(), &config);
    let pod = format!("{}-{ordinal}", text(&workload, "metadata.name"));
    let mut args = args_of_pod(&workload, &pod);
    let at_config = args
        .iter()
        .position(|a| a == "--config")
        .expect("--config in args");
    args[at_config + 1] = path.display().to_string();
    let out = Command::new(BIN)
        .args(&args)
        .arg("--check-config")
        .output()
        .expect("run mysql-lb --check-config");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said = match stdout.lines().find(|l| l.starts_with("instance_id ")) {
        Some(line) => line.to_owned(),
        None => String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    (out.status.success(), said)
}

/// The URL of pod `ordinal`'s admin endpoint through the headless Service, as a pod names it.
fn admin_url_of(ordinal: u64) -> String {
    let workload = manifest(WORKLOAD);
    format!(
        "http://{}-{ordinal}.{}:{}",
        text(&workload, "metadata.name"),
        text(&workload, "spec.serviceName"),
        container_port(container(&workload), "admin")
    )
}

#[test]
fn each_pod_runs_with_its_ordinal_as_instance_id_and_every_other_pod_as_peer() {
    let replicas = number(&manifest(WORKLOAD), "spec.replicas");
    assert!(replicas >= 2);
    for ordinal in 0..replicas {
        let (ok, said) = check_as_pod(ordinal);
        assert!(ok, "pod {ordinal}: {said}");
        let peers: Vec<String> = (0..replicas)
            .filter(|&o| o != ordinal)
            .map(|o| format!("{o} at {}", admin_url_of(o)))
            .collect();
        assert_eq!(
            said,
            format!(
                "instance_id {ordinal}, reuse_port off, peers: {}",
                peers.join(", ")
            ),
            "pod {ordinal}"
        );
    }
}

#[test]
fn a_pod_past_peers_from_instances_refuses_to_start_naming_the_flag() {
    // `kubectl scale` without raising peers_from.instances: the new pod says why.
    let replicas = number(&manifest(WORKLOAD), "spec.replicas");
    let (ok, said) = check_as_pod(replicas);
    assert!(!ok, "pod {replicas} was accepted: {said}");
    assert!(
        said.contains("--instance-id") && said.contains("peers_from.instances"),
        "{said}"
    );
}

#[test]
fn the_headless_service_gives_the_pods_the_names_peers_from_uses() {
    let workload = manifest(WORKLOAD);
    assert_eq!(text(&workload, "kind"), "StatefulSet");
    let headless = manifest("peers-service.yaml");
    assert_eq!(
        text(&workload, "spec.serviceName"),
        text(&headless, "metadata.name")
    );
    assert_eq!(text(&headless, "spec.clusterIP"), "None", "headless");
    // A draining pod is not ready but still owns sessions whose KILLs must be resolved.
    assert_eq!(
        at(&headless, "spec.publishNotReadyAddresses"),
        &Value::Bool(true)
    );
    assert_eq!(at(&headless, "spec.selector"), pod_labels(&workload));
    let ports = list(&headless, "spec.ports");
    assert_eq!(ports.len(), 1, "the admin port only");
    assert_eq!(text(&ports[0], "targetPort"), "admin");
    let admin_port = container_port(container(&workload), "admin");
    assert_eq!(number(&ports[0], "port"), admin_port);

    let config = proxy_config();
    assert!(config.get("instance_id").is_none(), "per pod, not shared");
    assert!(config.get("peers").is_none(), "peers_from, not peers");
    assert_eq!(
        number(&config, "peers_from.instances"),
        number(&workload, "spec.replicas"),
        "peers_from.instances and the StatefulSet's replicas change together"
    );
    // Every pod binds the same admin port on its own IP; that is the port its peers ask.
    assert_eq!(port_of(text(&config, "admin_address")), admin_port);
    assert_eq!(
        text(&config, "peers_from.admin_url").replace("{instance_id}", "1"),
        admin_url_of(1)
    );
}
