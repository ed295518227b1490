//! Tests of the configuration, by section (`tests/*.rs`); here the file
//! every section reads and its errors as a whole.

use std::time::Duration;

use hoard_policy::key::QueryKey;

use super::*;

mod cache;
mod cluster;
mod listeners;
mod ops;
mod quick;
mod routes;
mod signed;
mod upstreams;

const GOOD: &str = r#"
[server]
debug_headers = true

[[listener]]
address = "127.0.0.1:0"

[cache]
memory_size = "64MiB"

[upstream.app]
servers = ["http://127.0.0.1:9000", "http://127.0.0.1:9001"]
read_timeout = "500ms"
down_after = 5
down_backoff_max = "10s"

[[site]]
hosts = ["example.com", "*.example.org"]

[[site.route]]
prefix = "/api/"
upstream = "app"
cache = false

[[site.route]]
regex = "\\.(css|js)$"
upstream = "app"
default_ttl = { "200" = "10m", "any" = "1s" }
ignore_headers = ["set-cookie"]
key = { query = "sorted", headers = ["x-device"] }
"#;

#[test]
fn good_file_resolves() {
    let c = Config::from_toml("hoard.toml", GOOD).unwrap();
    assert_eq!(c.upstreams[0].servers.len(), 2);
    assert_eq!(c.upstreams[0].read_timeout, Duration::from_millis(500));
    assert_eq!(
        (c.upstreams[0].down_after, c.upstreams[0].down_backoff_max),
        (5, Duration::from_secs(10))
    );
    assert_eq!(c.cache.memory_size, 64 << 20);
    let r = &c.sites[0].routes[1];
    assert_eq!(r.policy.default_ttl(200), Some(Duration::from_secs(600)));
    assert_eq!(r.policy.default_ttl(404), Some(Duration::from_secs(1)));
    assert!(r.policy.ignore_set_cookie);
    assert_eq!(r.key.query, QueryKey::Sorted);
    assert!(!c.sites[0].routes[0].cache);
    assert_eq!(
        c.sites[0].hosts[1],
        HostMatch::Suffix(".example.org".into())
    );
}

fn error(text: &str) -> ConfigError {
    Config::from_toml("hoard.toml", text).unwrap_err()
}

#[test]
fn errors_name_file_line_and_key() {
    let e = error("[upstream.app]\nservers = [\"http://a:1\"]\nbogus = 1\n");
    assert_eq!((e.line, e.key.as_str()), (Some(3), "bogus"), "{e}");
    assert!(e.message.contains("unknown field"), "{e}");
    assert!(
        e.to_string().starts_with("config error: hoard.toml:3:"),
        "{e}"
    );

    let e = error("[upstream.app]\nservers = [\"http://a:1\"]\nread_timeout = \"5 parsecs\"\n");
    assert_eq!((e.line, e.key.as_str()), (Some(3), "read_timeout"), "{e}");
    assert!(e.message.contains("invalid duration"), "{e}");

    let e = error(
        "[upstream.app]\nservers = [\"http://a:1\"]\n[[site]]\n[[site.route]]\nupstream = \"ap\"\n",
    );
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(5), "site[0].route[0].upstream"),
        "{e}"
    );
    assert!(e.message.contains("unknown upstream \"ap\""), "{e}");

    let e = error("[upstream.app]\nservers = [\"ftp://a\"]\n");
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(2), "upstream.app.servers[0]"),
        "{e}"
    );

    let e = error(
        "[cache]\nmemory_size = \"12 bananas\"\n[upstream.app]\nservers = [\"http://a:1\"]\n",
    );
    assert_eq!(e.line, Some(2), "{e}");
    assert!(e.message.contains("invalid size"), "{e}");

    let e = error("[server]\nthreads = 2\n");
    assert!(e.message.contains("upstream"), "{e}");
}
