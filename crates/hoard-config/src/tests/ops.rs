//! `[admin]` and `[access_log]`.

use super::*;

#[test]
fn admin_and_access_log_from_the_file() {
    const UP: &str = "[upstream.app]\nservers = [\"http://a:1\"]\n";
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "  t0ken\n").unwrap();
    let text = format!(
        "{UP}[admin]\naddress = \"0.0.0.0:8001\"\ntoken_file = {:?}\npurge_allow = [\"127.0.0.1\", \"10.0.0.0/8\"]\n\
         [access_log]\ntarget = \"/var/log/hoard/access.log\"\nformat = \"combined\"\n",
        token.display().to_string()
    );
    let c = Config::from_toml("hoard.toml", &text).unwrap();
    assert_eq!(c.admin.address, Some("0.0.0.0:8001".parse().unwrap()));
    assert_eq!(c.admin.token.as_deref(), Some("t0ken"));
    assert_eq!(c.admin.purge_allow.len(), 2);
    assert!(!c.admin.forward_tags);
    assert_eq!(
        c.access_log.target,
        LogTarget::File("/var/log/hoard/access.log".into())
    );
    assert_eq!(c.access_log.format, LogFormat::Combined);

    // Off by default.
    let c = Config::from_toml("hoard.toml", UP).unwrap();
    assert_eq!(c.admin.address, None);
    assert!(c.admin.purge_allow.is_empty());
    assert_eq!(c.access_log.target, LogTarget::Off);

    let e = error(&format!("{UP}[admin]\naddress = \"10.1.2.3:8001\"\n"));
    assert_eq!((e.line, e.key.as_str()), (Some(4), "admin.token"), "{e}");
    assert!(e.message.contains("not on loopback"), "{e}");
    let e = error(&format!(
        "{UP}[admin]\naddress = \"127.0.0.1:8001\"\npurge_allow = [\"10.0.0.0/40\"]\n"
    ));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(5), "admin.purge_allow"),
        "{e}"
    );
    // Regex purges pending at once: 64 by default, at least 1.
    assert_eq!(c.admin.max_pending_bans, 64);
    let c = Config::from_toml(
        "hoard.toml",
        &format!("{UP}[admin]\nmax_pending_bans = 3\n"),
    )
    .unwrap();
    assert_eq!(c.admin.max_pending_bans, 3);
    let e = error(&format!("{UP}[admin]\nmax_pending_bans = 0\n"));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(4), "admin.max_pending_bans"),
        "{e}"
    );
    // `group` needs `user`; an unknown user is named with its line.
    let e = error(&format!("[server]\ngroup = \"nogroup\"\n{UP}"));
    assert_eq!((e.line, e.key.as_str()), (Some(2), "server.group"), "{e}");
    let e = error(&format!("[server]\nuser = \"no-such-user-x\"\n{UP}"));
    assert_eq!((e.line, e.key.as_str()), (Some(2), "server.user"), "{e}");
    let e = error(&format!("{UP}[admin]\naddress = \"localhost\"\n"));
    assert_eq!((e.line, e.key.as_str()), (Some(4), "admin.address"), "{e}");
    let e = error(&format!(
        "{UP}[admin]\ntoken_file = \"/nonexistent/token\"\n"
    ));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(4), "admin.token_file"),
        "{e}"
    );
    let e = error(&format!("{UP}[access_log]\nformat = \"xml\"\n"));
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(4), "access_log.format"),
        "{e}"
    );
    assert!(e.message.contains("\"hoard\""), "{e}");
    let c = Config::from_toml(
        "hoard.toml",
        &format!("{UP}[access_log]\nformat = \"hoard\"\n"),
    )
    .unwrap();
    assert_eq!(c.access_log.format, LogFormat::Hoard);
    let e = error(&format!("{UP}[admin]\ntokn = \"x\"\n"));
    assert_eq!((e.line, e.key.as_str()), (Some(4), "tokn"), "{e}");
}
