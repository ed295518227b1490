//! Routes never reached, default sites, listener names, `include`.

use super::super::{Config, ConfigError, PathMatch};

const UP: &str = "[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n";

fn error(text: &str) -> ConfigError {
    Config::from_toml("hoard.toml", text).unwrap_err()
}

/// A site of these routes (one per line: its keys).
fn routes(list: &[&str]) -> String {
    let mut t = format!("{UP}[[site]]\n");
    for r in list {
        t.push_str("[[site.route]]\n");
        t.push_str(r);
        t.push('\n');
    }
    t
}

#[test]
fn a_route_an_earlier_one_covers_is_refused_naming_both() {
    // Lines: 3 [[site]], 4 [[site.route]], 5 prefix "/", 6 [[site.route]], 7 prefix "/admin/".
    let e = error(&routes(&[
        "prefix = \"/\"",
        "prefix = \"/admin/\"\nallow = [\"10.0.0.0/8\"]",
    ]));
    assert_eq!(
        (e.file.as_str(), e.line, e.key.as_str()),
        ("hoard.toml", Some(7), "site[0].route[1]")
    );
    assert!(
        e.message
            .contains("prefix \"/admin/\" (line 7) is never reached")
            && e.message
                .contains("`site[0].route[0]` (prefix \"/\", line 5)")
            && e.message.contains("first match wins"),
        "{e}"
    );
    // A route without prefix or regex is "/" too; its line is its table's.
    let e = error(&routes(&["upstream = \"app\"", "prefix = \"/admin/\""]));
    assert_eq!((e.line, e.key.as_str()), (Some(7), "site[0].route[1]"));
    assert!(e.message.contains("(prefix \"/\", line 4"), "{e}");
    // The same prefix twice, a longer after a shorter.
    for (a, b) in [("/a/", "/a/"), ("/img", "/img/x/")] {
        let e = error(&routes(&[
            &format!("prefix = {a:?}"),
            &format!("prefix = {b:?}"),
        ]));
        assert_eq!(e.key, "site[0].route[1]", "{a} {b}");
    }
}

#[test]
fn regex_routes_refused_only_when_surely_covered() {
    for (earlier, later) in [
        // The same regex twice.
        ("regex = '\\.css$'", "regex = '\\.css$'"),
        // Regexes taking every path, or every path with a prefix.
        ("regex = '^/'", "prefix = \"/admin/\""),
        ("regex = '.*'", "prefix = \"/admin/\""),
        ("regex = ''", "regex = '\\.php$'"),
        ("regex = '^/api/.*'", "prefix = \"/api/v2/\""),
        // A regex anchored under an earlier prefix.
        ("prefix = \"/admin/\"", "regex = '^/admin/.*\\.php$'"),
    ] {
        let e = error(&routes(&[earlier, later]));
        assert_eq!(e.key, "site[0].route[1]", "{earlier} then {later}: {e}");
        assert_eq!(e.line, Some(7), "{e}");
    }
    for (earlier, later) in [
        // Nothing is guessed about a regex that is not simply a prefix.
        ("regex = '\\.css$'", "prefix = \"/a.css\""),
        ("regex = '^/a|/b'", "prefix = \"/b/\""),
        ("regex = '^/ab?'", "prefix = \"/a\""),
        ("prefix = \"/ab\"", "regex = '^/ab?'"),
        ("prefix = \"/a\"", "regex = '(^/a)'"),
        ("regex = '^/$'", "prefix = \"/x\""),
        ("prefix = \"/\"", "regex = '\\.css$'"),
        // The narrower first: both are reached.
        ("prefix = \"/admin/\"", "prefix = \"/\""),
    ] {
        let text = routes(&[earlier, later]);
        if let Err(e) = Config::from_toml("hoard.toml", &text) {
            panic!("{earlier} then {later}: {e}");
        }
    }
}

#[test]
fn shadowing_is_per_site() {
    let text = format!(
        "{UP}[[site]]\nhosts = [\"a\"]\n[[site.route]]\nprefix = \"/\"\n\
         [[site]]\nhosts = [\"b\"]\n[[site.route]]\nprefix = \"/admin/\"\n"
    );
    let c = Config::from_toml("hoard.toml", &text).unwrap();
    assert!(matches!(&c.sites[1].routes[0].path, PathMatch::Prefix(p) if p == "/admin/"));
}

#[test]
fn default_site_and_listener_names() {
    let text = format!(
        "[[listener]]\nname = \"public\"\naddress = \"127.0.0.1:0\"\n\
         [[listener]]\nname = \"internal\"\naddress = \"127.0.0.1:0\"\n{UP}\
         [[site]]\nhosts = [\"a\"]\n[[site]]\nhosts = [\"b\"]\ndefault = true\nlisteners = [\"internal\"]\n"
    );
    let c = Config::from_toml("hoard.toml", &text).unwrap();
    assert_eq!(c.listeners[1].name.as_deref(), Some("internal"));
    assert!(!c.sites[0].bind.default && c.sites[0].bind.listeners.is_empty());
    assert!(c.sites[1].bind.default);
    assert_eq!(c.sites[1].bind.listeners, vec![1]);
    assert!(c.sites[1].bind.on(Some(1)) && !c.sites[1].bind.on(Some(0)));
}

#[test]
fn two_defaults_on_one_listener_are_refused_naming_both() {
    let two = format!(
        "{UP}[[site]]\nhosts = [\"a\"]\ndefault = true\n[[site]]\nhosts = [\"b\"]\ndefault = true\n"
    );
    let e = error(&two);
    assert_eq!((e.line, e.key.as_str()), (Some(8), "site[1].default"));
    assert!(e.message.contains("`site[0]` (hoard.toml:5)"), "{e}");
    // Each the default of its own listener, or of its own scheme: fine.
    let apart = format!(
        "[[listener]]\nname = \"a\"\naddress = \"127.0.0.1:0\"\n\
         [[listener]]\nname = \"b\"\naddress = \"127.0.0.1:0\"\n{UP}\
         [[site]]\ndefault = true\nlisteners = [\"a\"]\n\
         [[site]]\ndefault = true\nlisteners = [\"b\"]\n\
         [[site]]\ndefault = true\nscheme = \"https\"\nlisteners = [\"a\"]\n"
    );
    let e = error(&apart);
    assert_eq!(e.key, "site[2].default", "{e}");
    let apart = apart.replace(
        "scheme = \"https\"\nlisteners = [\"a\"]",
        "scheme = \"https\"\nlisteners = [\"b\"]",
    );
    assert_eq!(error(&apart).key, "site[2].default");
    let fine = apart.replace("[[site]]\ndefault = true\nlisteners = [\"b\"]\n", "");
    Config::from_toml("hoard.toml", &fine).unwrap();
}

#[test]
fn bad_listener_names_are_refused() {
    let l = "[[listener]]\nname = \"public\"\naddress = \"127.0.0.1:0\"\n";
    for (text, line, key, part) in [
        (
            format!("{l}{UP}[[site]]\nlisteners = [\"pubic\"]\n"),
            7,
            "site[0].listeners",
            "unknown listener \"pubic\" (named: public)",
        ),
        (
            format!("{UP}[[site]]\nlisteners = [\"x\"]\n"),
            4,
            "site[0].listeners",
            "no [[listener]] has a `name`",
        ),
        (
            format!("{l}{UP}[[site]]\nlisteners = []\n"),
            7,
            "site[0].listeners",
            "names no listener",
        ),
        (
            format!("{l}{l}{UP}"),
            5,
            "listener[1].name",
            "names `listener[0]` (hoard.toml:2) already",
        ),
    ] {
        let e = error(&text);
        assert_eq!((e.line, e.key.as_str()), (Some(line), key), "{e}");
        assert!(e.message.contains(part), "{e}");
    }
}

/// A directory with these files.
fn dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let p = d.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    d
}

#[test]
fn include_merges_sites_upstreams_and_listeners_in_name_order() {
    let d = dir(&[
        (
            "hoard.toml",
            "include = [\"sites/*.toml\", \"listeners.toml\"]\n[[site]]\nhosts = [\"main\"]\n[[site.route]]\nupstream = \"app\"\n",
        ),
        ("sites/b.toml", "[[site]]\nhosts = [\"b\"]\n[[site.route]]\nupstream = \"other\"\n"),
        (
            "sites/a.toml",
            "[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n[upstream.other]\nservers = [\"http://127.0.0.1:9001\"]\n[[site]]\nhosts = [\"a\"]\n[[site.route]]\nupstream = \"app\"\n",
        ),
        ("sites/.hidden.toml", "not toml at all"),
        ("sites/notes.txt", "not toml at all"),
        ("listeners.toml", "[[listener]]\nname = \"public\"\naddress = \"127.0.0.1:0\"\n"),
    ]);
    let c = Config::from_file(&d.path().join("hoard.toml")).unwrap();
    let hosts: Vec<String> = c
        .sites
        .iter()
        .map(|s| format!("{:?}", s.hosts[0]))
        .collect();
    assert_eq!(hosts, ["Exact(\"main\")", "Exact(\"a\")", "Exact(\"b\")"]);
    assert_eq!(c.sites[2].routes[0].upstream, 1);
    assert_eq!(c.listeners[0].name.as_deref(), Some("public"));
}

#[test]
fn errors_in_an_included_file_name_that_file_and_line() {
    let main =
        "include = [\"sites/*.toml\"]\n[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n";
    // A parse error, a resolving error, a shadowed route: each in a.toml.
    for (text, line, key) in [
        ("[[site]]\nhosts = [\"a\"]\nhots = 1\n", 3, "hots"),
        ("[[site]]\n[[site.route]]\nupstream = \"nope\"\n", 3, "site[0].route[0].upstream"),
        (
            "# a comment\n[[site]]\n[[site.route]]\nprefix = \"/\"\n[[site.route]]\nprefix = \"/admin/\"\n",
            6,
            "site[0].route[1]",
        ),
        ("[server]\nthreads = 2\n", 1, "[server]"),
        ("include = [\"more.toml\"]\n", 1, "include"),
        ("[upstream.app]\nservers = [\"http://127.0.0.1:1\"]\n", 2, "upstream.app"),
    ] {
        let d = dir(&[("hoard.toml", main), ("sites/a.toml", text)]);
        let e = Config::from_file(&d.path().join("hoard.toml")).unwrap_err();
        let file = d.path().join("sites/a.toml").display().to_string();
        assert_eq!(
            (e.file.as_str(), e.line, e.key.as_str()),
            (file.as_str(), Some(line), key),
            "{text}: {e}"
        );
    }
    // The shadowed route's message gives the lines in that file.
    let d = dir(&[
        ("hoard.toml", main),
        (
            "sites/a.toml",
            "[[site]]\n[[site.route]]\nprefix = \"/\"\n[[site.route]]\nprefix = \"/admin/\"\n",
        ),
    ]);
    let e = Config::from_file(&d.path().join("hoard.toml")).unwrap_err();
    assert!(
        e.message.contains("(line 5)") && e.message.contains("line 3)"),
        "{e}"
    );
}

#[test]
fn missing_includes_are_errors_saying_which() {
    let up = "\n[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n";
    for (include, part) in [
        ("\"sites/*.toml\"", "\"sites/*.toml\" matches no file"),
        ("\"gone.toml\"", "gone.toml: no such file"),
        (
            "\"*/a.toml\"",
            "wildcards are allowed in the file name only",
        ),
        ("\"nodir/*.toml\"", "nodir"),
    ] {
        let d = dir(&[("sites/a.txt", "")]);
        std::fs::write(
            d.path().join("hoard.toml"),
            format!("# main\ninclude = [\"x.toml\", {include}]{up}"),
        )
        .unwrap();
        std::fs::write(d.path().join("x.toml"), "").unwrap();
        let e = Config::from_file(&d.path().join("hoard.toml")).unwrap_err();
        assert_eq!(
            (e.line, e.key.as_str()),
            (Some(2), "include"),
            "{include}: {e}"
        );
        assert!(e.file.ends_with("hoard.toml"), "{e}");
        assert!(e.message.contains(part), "{include}: {e}");
    }
    // The same file twice; the main file itself.
    for (include, part) in [
        ("\"a.toml\", \"a.*\"", "a.toml is included twice"),
        (
            "\"*.toml\"",
            "hoard.toml is the main file: it cannot include itself",
        ),
    ] {
        let d = dir(&[
            ("a.toml", ""),
            ("hoard.toml", &format!("include = [{include}]{up}")),
        ]);
        let e = Config::from_file(&d.path().join("hoard.toml")).unwrap_err();
        assert!(e.message.contains(part), "{e}");
    }
}

#[test]
fn a_second_default_in_an_included_file_names_both_files() {
    let d = dir(&[
        (
            "hoard.toml",
            "include = [\"b.toml\"]\n[upstream.app]\nservers = [\"http://127.0.0.1:9000\"]\n[[site]]\ndefault = true\n",
        ),
        ("b.toml", "[[site]]\nhosts = [\"b\"]\ndefault = true\n"),
    ]);
    let e = Config::from_file(&d.path().join("hoard.toml")).unwrap_err();
    let main = d.path().join("hoard.toml").display().to_string();
    let b = d.path().join("b.toml").display().to_string();
    assert_eq!(
        (e.file.as_str(), e.line, e.key.as_str()),
        (b.as_str(), Some(3), "site[1].default")
    );
    assert!(e.message.contains(&format!("`site[0]` ({main}:5)")), "{e}");
}
