//! `[cluster]` and `--cluster-*`.

use super::*;

#[test]
fn a_cluster_is_read_and_checked() {
    let ok = Config::from_toml(
        "hoard.toml",
        r#"
[upstream.app]
servers = ["http://127.0.0.1:9000"]
[cluster]
node = "n2"
peers = ["n1=127.0.0.1:8081", "n2=127.0.0.1:8082", "n3=127.0.0.1:8083*2"]
owner_connect_timeout = "150ms"
"#,
    )
    .unwrap();
    let c = ok.cluster.as_ref().unwrap();
    assert_eq!(c.node, "n2");
    assert_eq!(c.members.len(), 3);
    assert_eq!(c.members[2].weight, 2.0);
    assert_eq!(c.owner_connect_timeout, Duration::from_millis(150));
    // The default name in Via and Cache-Status tells the nodes apart.
    assert_eq!(ok.server.via, "hoard-n2");

    let e = error(
        r#"[upstream.app]
servers = ["http://127.0.0.1:9000"]
[cluster]
node = "n1"
peers = ["n1=10.0.0.1:80", "n2=10.0.0.2:80"]
"#,
    );
    assert_eq!(e.key, "cluster");
    assert!(e.message.contains("secret"), "{e}");
    assert_eq!(e.line, Some(4));
    let e = error(
        "[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n[cluster]\nnode = \"n1\"\npeers = [\"n1=127.0.0.1\"]\n",
    );
    assert_eq!(e.key, "cluster.peers");
    assert_eq!(e.line, Some(5));
    // The near tier: defaults, sizes, a bad count named with its line.
    assert_eq!(c.near_cache_size, 64 << 20);
    assert_eq!(c.near_admit_after, 2);
    let near = Config::from_toml(
        "hoard.toml",
        "[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n[cluster]\nnode = \"n1\"\npeers = [\"n1=127.0.0.1:1\"]\nnear_cache_size = \"1MiB\"\nnear_admit_after = 1\n",
    )
    .unwrap();
    let nc = near.cluster.as_ref().unwrap();
    assert_eq!((nc.near_cache_size, nc.near_admit_after), (1 << 20, 1));
    let e = error(
        "[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n[cluster]\nnode = \"n1\"\npeers = [\"n1=127.0.0.1:1\"]\nnear_admit_after = 0\n",
    );
    assert_eq!(e.key, "cluster.near_admit_after");
    assert_eq!(e.line, Some(6));
    let e = Config::quick(&QuickStart {
        upstream: "http://127.0.0.1:9000".into(),
        cluster_near_size: Some(1 << 20),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e.key, "--cluster-near-size");
    let q = Config::quick(&QuickStart {
        upstream: "http://127.0.0.1:9000".into(),
        cluster_node: Some("n1".into()),
        cluster_peers: Some("n1=127.0.0.1:1".into()),
        cluster_near_size: Some(0),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(q.cluster.unwrap().near_cache_size, 0);
    // A route's routing key: the same table as `key`, checked the same way.
    let site = "[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\nupstream = \"app\"\n";
    let c = Config::from_toml(
        "hoard.toml",
        &format!("{site}cluster_key = {{ query = \"none\" }}\n"),
    )
    .unwrap();
    let k = c.sites[0].routes[0].cluster_key.as_ref().unwrap();
    assert_eq!(k.query, QueryKey::None);
    assert!(
        Config::from_toml("hoard.toml", site).unwrap().sites[0].routes[0]
            .cluster_key
            .is_none()
    );
    let e = error(&format!("{site}cluster_key = {{ query = \"odd\" }}\n"));
    assert_eq!(e.key, "site[0].route[0].cluster_key.query");
    assert_eq!(e.line, Some(7));
}

#[test]
fn cluster_members_tiers_and_rampup() {
    use crate::cluster::Discovery;
    let up = "[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n";
    let ok = Config::from_toml(
        "hoard.toml",
        &format!(
            "{up}[cluster]\nnode = \"n1\"\n[cluster.members]\nsource = \"dns\"\ndns = \"hoard-peers.default.svc:8080\"\nresolver = \"127.0.0.1:5353\"\nrefresh = \"2s\"\n[[cluster.tier]]\nname = \"shield\"\npeers = [\"p1=127.0.0.1:9001\"]\n"
        ),
    )
    .unwrap();
    let c = ok.cluster.unwrap();
    assert_eq!(
        c.discovery,
        Discovery::Dns {
            name: "hoard-peers.default.svc".into(),
            port: 8080,
            resolver: Some("127.0.0.1:5353".parse().unwrap()),
            refresh: Duration::from_secs(2),
        }
    );
    assert_eq!(
        c.rampup,
        Duration::from_secs(60),
        "the default with discovery"
    );
    assert_eq!(c.tiers[0].name, "shield");
    assert_eq!(c.tiers[0].members[0].name, "p1");
    // A static list ramps up only when told to.
    let st = Config::from_toml(
        "hoard.toml",
        &format!("{up}[cluster]\nnode = \"n1\"\npeers = [\"n1=127.0.0.1:1\"]\n"),
    )
    .unwrap();
    assert_eq!(st.cluster.unwrap().rampup, Duration::ZERO);
    // SRV names need no port.
    let srv = Config::quick(&QuickStart {
        upstream: "http://127.0.0.1:9000".into(),
        cluster_node: Some("n1".into()),
        cluster_dns: Some("_http._tcp.hoard.service.consul".into()),
        ..Default::default()
    })
    .unwrap();
    assert!(matches!(
        srv.cluster.unwrap().discovery,
        Discovery::Dns { port: 0, .. }
    ));
    // Errors name the key and the line.
    let e = error(&format!(
        "{up}[cluster]\nnode = \"n1\"\n[cluster.members]\nsource = \"dns\"\ndns = \"hoard-peers\"\n"
    ));
    assert_eq!(
        (e.key.as_str(), e.line),
        ("cluster.members.dns", Some(7)),
        "{e}"
    );
    let e = error(&format!(
        "{up}[cluster]\nnode = \"n1\"\n[cluster.members]\nsource = \"gossip\"\n"
    ));
    assert_eq!(
        (e.key.as_str(), e.line),
        ("cluster.members.source", Some(6)),
        "{e}"
    );
    let e = error(&format!(
        "{up}[cluster]\nnode = \"n1\"\n[cluster.members]\nsource = \"redis\"\nadvertise = \"127.0.0.1:1\"\n"
    ));
    assert_eq!(e.key, "cluster.members.source");
    assert!(e.message.contains("[cluster.bus]"), "{e}");
    let e = error(&format!(
        "{up}[cluster]\nnode = \"n1\"\npeers = [\"n1=127.0.0.1:1\"]\n[cluster.members]\nsource = \"dns\"\ndns = \"h:1\"\n"
    ));
    assert_eq!(e.key, "cluster.peers");
    let e = error(&format!(
        "{up}[cluster]\nnode = \"n1\"\npeers = [\"n1=127.0.0.1:1\"]\n[[cluster.tier]]\npeers = [\"p1=10.0.0.1:80\"]\n"
    ));
    assert_eq!(
        (e.key.as_str(), e.line),
        ("cluster.tier.peers", Some(7)),
        "{e}"
    );
    let e = Config::quick(&QuickStart {
        upstream: "http://127.0.0.1:9000".into(),
        cluster_node: Some("n1".into()),
        cluster_peers: Some("n1=127.0.0.1:1".into()),
        cluster_dns: Some("h:1".into()),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e.key, "--cluster-peers");
    // Kubernetes: the Service is required, the API URL is checked.
    let k = Config::from_toml(
        "hoard.toml",
        &format!(
            "{up}[cluster]\nnode = \"n1\"\n[cluster.members]\nsource = \"kubernetes\"\nservice = \"hoard-peers\"\nnamespace = \"edge\"\napi = \"https://10.96.0.1:443\"\nport = \"http\"\n"
        ),
    )
    .unwrap();
    match k.cluster.unwrap().discovery {
        Discovery::Kubernetes(s) => {
            assert_eq!(
                (s.service.as_str(), s.namespace.as_str()),
                ("hoard-peers", "edge")
            );
            assert!(s.token_file.ends_with("serviceaccount/token"));
        }
        other => panic!("{other:?}"),
    }
    let e = error(&format!(
        "{up}[cluster]\nnode = \"n1\"\n[cluster.members]\nsource = \"kubernetes\"\nnamespace = \"edge\"\n"
    ));
    assert_eq!(
        (e.key.as_str(), e.line),
        ("cluster.members.service", Some(6)),
        "{e}"
    );
    let e = error(&format!(
        "{up}[cluster]\nnode = \"n1\"\n[cluster.members]\nsource = \"kubernetes\"\nservice = \"s\"\nnamespace = \"edge\"\napi = \"10.96.0.1\"\n"
    ));
    assert_eq!(
        (e.key.as_str(), e.line),
        ("cluster.members.api", Some(9)),
        "{e}"
    );
    let e = Config::quick(&QuickStart {
        upstream: "http://127.0.0.1:9000".into(),
        cluster_node: Some("n1".into()),
        cluster_advertise: Some("127.0.0.1:1".parse().unwrap()),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(e.key, "--cluster-advertise");
}
