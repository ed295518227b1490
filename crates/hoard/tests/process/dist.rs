//! What ships beside the binary: every configuration in `examples/` and the
//! packaged `dist/hoard.toml` pass `hoard check`, and the systemd unit
//! passes `systemd-analyze verify` where systemd is installed.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn check(path: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_hoard"))
        .args(["check", "--config"])
        .arg(path)
        .output()
        .expect("run hoard");
    assert!(
        out.status.success(),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_example_passes_check() {
    let mut n = 0;
    for entry in std::fs::read_dir(repo().join("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            check(&path);
            n += 1;
        }
    }
    assert!(n >= 6, "examples/ holds {n} configurations");
    check(&repo().join("dist/hoard.toml"));
}

#[test]
fn systemd_unit_verifies() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: systemd-analyze is not installed (Debian package `systemd`)");
        return;
    }
    // The unit names /usr/bin/hoard; verify it against the binary just built.
    let unit = std::fs::read_to_string(repo().join("dist/hoard.service")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hoard.service");
    std::fs::write(
        &path,
        unit.replace("/usr/bin/hoard", env!("CARGO_BIN_EXE_hoard")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // verify exits 0 on unknown keys but reports them: any line about the unit fails.
    let about_unit: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("hoard.service"))
        .collect();
    assert!(
        out.status.success() && about_unit.is_empty(),
        "systemd-analyze verify: {stderr}"
    );
}

/// `dist/kubernetes/hoard.yaml`, checked without `kubectl`: the kinds,
/// names and ports fit together, and the ConfigMap's `hoard.toml` passes
/// `hoard check` (its secret file pointed at a test one).
#[test]
fn kubernetes_manifest_fits_together() {
    use yaml_rust2::{Yaml, YamlLoader};
    let text = std::fs::read_to_string(repo().join("dist/kubernetes/hoard.yaml")).unwrap();
    let docs = YamlLoader::load_from_str(&text).expect("valid YAML");
    let of = |kind: &str, name: &str| -> Yaml {
        docs.iter()
            .find(|d| {
                d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name)
            })
            .unwrap_or_else(|| panic!("no {kind} {name}"))
            .clone()
    };
    let mut kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["ConfigMap", "Service", "Service", "StatefulSet"]);
    for d in &docs {
        assert!(d["apiVersion"].as_str().is_some(), "{d:?}");
    }

    let peers = of("Service", "hoard-peers");
    assert_eq!(
        peers["spec"]["clusterIP"].as_str(),
        Some("None"),
        "headless"
    );
    let peer_port = peers["spec"]["ports"][0]["port"].as_i64().unwrap();
    let set = of("StatefulSet", "hoard");
    assert_eq!(set["spec"]["serviceName"].as_str(), Some("hoard-peers"));
    let labels = &set["spec"]["template"]["metadata"]["labels"];
    assert_eq!(set["spec"]["selector"]["matchLabels"], *labels);
    for svc in ["hoard", "hoard-peers"] {
        let sel = &of("Service", svc)["spec"]["selector"];
        assert_eq!(*sel, *labels, "{svc} selects the pods");
        assert_eq!(
            of("Service", svc)["spec"]["ports"][0]["targetPort"].as_str(),
            Some("http")
        );
    }
    let c = &set["spec"]["template"]["spec"]["containers"][0];
    let http = c["ports"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str() == Some("http"))
        .expect("an http container port");
    let container_port = http["containerPort"].as_i64().unwrap();
    assert_eq!(
        container_port, peer_port,
        "members reach each other on the peer Service's port"
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/.hoard/cluster/ping")
    );
    let mounts: Vec<&str> = c["volumeMounts"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    let volumes: Vec<&str> = set["spec"]["template"]["spec"]["volumes"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .chain(
            set["spec"]["volumeClaimTemplates"]
                .as_vec()
                .unwrap()
                .iter()
                .filter_map(|v| v["metadata"]["name"].as_str()),
        )
        .collect();
    for m in &mounts {
        assert!(volumes.contains(m), "mount {m} has no volume");
    }

    // The configuration: listens on the container port, finds members
    // through the peer Service's DNS name on that port.
    let toml = of("ConfigMap", "hoard")["data"]["hoard.toml"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        toml.contains(&format!("address = \"0.0.0.0:{container_port}\"")),
        "{toml}"
    );
    assert!(
        toml.contains(&format!(
            "dns = \"hoard-peers.hoard.svc.cluster.local:{peer_port}\""
        )),
        "{toml}"
    );
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("cluster.secret");
    std::fs::write(&secret, "a secret of at least sixteen bytes").unwrap();
    let path = dir.path().join("hoard.toml");
    std::fs::write(
        &path,
        toml.replace("/etc/hoard/secret/cluster.secret", secret.to_str().unwrap())
            .replace(
                "/var/cache/hoard",
                dir.path().join("cache").to_str().unwrap(),
            ),
    )
    .unwrap();
    check(&path);
}

// examples/cluster.toml copied for three nodes as its comment says (the
// lines marked `# per node` changed from 1 to 2 and 3): each copy passes
// `hoard check`, no two nodes bind one address, and each node's listener
// is its own entry in the member list.
#[test]
fn the_cluster_example_makes_three_nodes() {
    let text = std::fs::read_to_string(repo().join("examples/cluster.toml")).unwrap();
    let marked = text.lines().filter(|l| l.ends_with("# per node")).count();
    assert_eq!(marked, 3, "lines marked `# per node`");
    let dir = tempfile::tempdir().unwrap();
    let mut bound = std::collections::HashSet::new();
    for n in 1..=3 {
        let copy: String = text
            .lines()
            .map(|l| {
                if l.ends_with("# per node") {
                    l.replace("n1", &format!("n{n}"))
                        .replace("8081", &format!("808{n}"))
                        .replace("9081", &format!("908{n}"))
                } else {
                    l.to_string()
                }
            })
            .map(|l| l + "\n")
            .collect();
        let path = dir.path().join(format!("n{n}.toml"));
        std::fs::write(&path, copy).unwrap();
        check(&path);
        let cfg = hoard_server::Config::from_file(&path).unwrap();
        let cluster = cfg.cluster.as_ref().unwrap();
        assert_eq!(cluster.node, format!("n{n}"));
        let own = cluster
            .members
            .iter()
            .find(|m| m.name == cluster.node)
            .unwrap();
        assert_eq!(own.addr, cfg.listeners[0].address, "n{n}'s listener");
        for addr in cfg
            .listeners
            .iter()
            .map(|l| l.address)
            .chain(cfg.admin.address)
        {
            assert!(bound.insert(addr), "n{n}: {addr} bound by another node too");
        }
    }
}
