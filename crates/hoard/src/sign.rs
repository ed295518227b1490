//! `hoard sign`: a signed link (docs/signed-urls.md), for the route of a
//! configuration file that the URL goes to (or `--route`), or for a
//! secret and scheme given here.
//!
//! ```text
//! hoard sign --config hoard.toml --url https://example.com/v/a.mp4 [--expires 1h | --expires-at UNIX] [--route /v/]
//! hoard sign --secret-file key --scheme hmac-sha256 --url https://example.com/v/a.mp4 --expires 10m
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use hoard_config::units::parse_duration;
use hoard_config::PathMatch;
use hoard_edge::signed::{Scheme, SignedUrls, DEFAULT_EXPIRES_PARAM};
use hoard_policy::clock::Clock;
use hoard_server::{Config, SystemClock};

/// `hoard sign`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("key").required(true).args(["config", "secret", "secret_file"])))]
#[command(group(clap::ArgGroup::new("until").args(["expires", "expires_at"])))]
pub struct SignArgs {
    /// The link to sign: http(s)://HOST/PATH?QUERY, or /PATH?QUERY.
    #[arg(long)]
    pub url: String,
    /// The configuration whose route (the one the URL goes to, or --route)
    /// has `signed_urls`: its first secret signs.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// With --config: the route whose `prefix` or `regex` is this, instead
    /// of the one the URL goes to.
    #[arg(long, requires = "config")]
    pub route: Option<String>,
    /// The secret, instead of a configuration (seen by other users in the
    /// process list: --secret-file is safer).
    #[arg(long, conflicts_with = "config")]
    pub secret: Option<String>,
    /// A file holding the secret (one line), instead of a configuration.
    #[arg(long, conflicts_with_all = ["config", "secret"])]
    pub secret_file: Option<PathBuf>,
    /// With --secret or --secret-file: nginx-md5 (default) or hmac-sha256.
    #[arg(long, conflicts_with = "config", value_parser = Scheme::NAMES)]
    pub scheme: Option<String>,
    /// With --secret or --secret-file: the expiry's parameter (default expires).
    #[arg(long, conflicts_with = "config")]
    pub expires_param: Option<String>,
    /// With --secret or --secret-file: the signature's parameter (default
    /// md5 for nginx-md5, signature for hmac-sha256).
    #[arg(long, conflicts_with = "config")]
    pub signature_param: Option<String>,
    /// Valid for this long from now, e.g. 10m, 1h, 7d (default 1h).
    #[arg(long, value_parser = parse_duration)]
    pub expires: Option<Duration>,
    /// Valid until this UNIX time (seconds).
    #[arg(long)]
    pub expires_at: Option<u64>,
}

/// Prints the signed link: 0, or 2 with the reason.
pub fn run(a: &SignArgs) -> ExitCode {
    match sign(a) {
        Ok(url) => {
            println!("{url}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hoard: sign: {e}");
            ExitCode::from(2)
        }
    }
}

/// A URL cut at its parts.
struct Link<'a> {
    /// `http://host:port`, or empty for a path.
    origin: &'a str,
    /// The host and port in normal form (empty for a path).
    authority: String,
    tls: bool,
    path: String,
    query: Option<&'a str>,
}

fn split(url: &str) -> Result<Link<'_>, String> {
    let url = url.split('#').next().unwrap_or(url);
    let (origin, rest, tls) = if url.starts_with('/') {
        ("", url, false)
    } else {
        let (scheme, after) = url
            .split_once("://")
            .ok_or_else(|| format!("{url:?}: expected http(s)://HOST/PATH or /PATH"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "http" => false,
            "https" => true,
            _ => return Err(format!("{url:?}: expected http:// or https://")),
        };
        let at = after.find(['/', '?']).unwrap_or(after.len());
        (&url[..url.len() - after.len() + at], &after[at..], tls)
    };
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    let authority = origin
        .split_once("://")
        .map_or(String::new(), |(_, a)| a.to_ascii_lowercase());
    let path = if path.is_empty() { "/" } else { path };
    Ok(Link {
        origin,
        authority,
        tls,
        path: encode_path(path),
        query,
    })
}

/// The path with the bytes a request target cannot hold as they are
/// percent-encoded (a space as `%20`); `%` escapes are kept.
fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_graphic()
            && !matches!(
                b,
                b'"' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}'
            )
        {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn sign(a: &SignArgs) -> Result<String, String> {
    let link = split(&a.url)?;
    let rule = match &a.config {
        Some(file) => from_config(file, a.route.as_deref(), &link)?,
        None => given(a)?,
    };
    let expires = match (a.expires_at, a.expires) {
        (Some(at), _) => at,
        (None, d) => {
            let now = SystemClock
                .now()
                .duration_since(UNIX_EPOCH)
                .map_err(|e| format!("the system clock: {e}"))?;
            let d = d.unwrap_or(Duration::from_secs(3600));
            (now + d).as_secs() + u64::from((now + d).subsec_nanos() > 0)
        }
    };
    if expires == 0 || expires > i64::MAX as u64 {
        return Err(format!("--expires-at {expires}: a UNIX time above 0"));
    }
    // The path as hoard routes it (dot segments removed), which is what
    // it checks.
    let (path, _) = hoard_policy::target::normalise_path_and_query(&link.path, None)
        .map_err(|e| format!("{:?}: {e}", a.url))?;
    let query = rule.signed_query(&path, link.query, expires);
    Ok(format!("{}{}?{query}", link.origin, link.path))
}

fn given(a: &SignArgs) -> Result<Arc<SignedUrls>, String> {
    let secret = match (&a.secret, &a.secret_file) {
        (Some(s), _) => s.clone(),
        (None, Some(f)) => {
            let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
            text.lines().next().unwrap_or("").to_string()
        }
        (None, None) => return Err("--config, --secret or --secret-file".into()),
    };
    let scheme = a
        .scheme
        .as_deref()
        .map_or(Some(Scheme::NginxMd5), Scheme::parse)
        .ok_or("--scheme: nginx-md5 or hmac-sha256")?;
    SignedUrls::new(
        scheme,
        &[secret.as_str()],
        a.expires_param.as_deref().unwrap_or(DEFAULT_EXPIRES_PARAM),
        a.signature_param
            .as_deref()
            .unwrap_or(scheme.default_signature_param()),
        Duration::ZERO,
    )
    .map(Arc::new)
}

/// The `signed_urls` of the route `route` names (its prefix or regex), or
/// of the route the link goes to.
fn from_config(
    file: &std::path::Path,
    route: Option<&str>,
    link: &Link<'_>,
) -> Result<Arc<SignedUrls>, String> {
    let cfg = Config::from_file(file).map_err(|e| e.to_string())?;
    let signed = |r: &hoard_config::RouteConfig| r.edge.as_ref().and_then(|e| e.signed.clone());
    if let Some(want) = route {
        let found = cfg
            .sites
            .iter()
            .flat_map(|s| s.routes.iter())
            .find(|r| match &r.path {
                PathMatch::Prefix(p) => p == want,
                PathMatch::Regex(re) => re.as_str() == want,
            });
        let r = found.ok_or_else(|| {
            format!(
                "{}: no route whose prefix or regex is {want:?}",
                file.display()
            )
        })?;
        return signed(r)
            .ok_or_else(|| format!("{}: the route {want:?} has no signed_urls", file.display()));
    }
    let site = hoard_proxy::pipeline::select_site(&cfg, &link.authority, link.tls, None)
        .map(|i| &cfg.sites[i])
        .ok_or_else(|| format!("{}: no site for {:?}", file.display(), link.authority))?;
    let r = site
        .route_for(&link.path)
        .map(|i| &site.routes[i])
        .ok_or_else(|| format!("{}: no route for {:?}", file.display(), link.path))?;
    signed(r).ok_or_else(|| {
        format!(
            "{}: the route for {:?} ({}) has no signed_urls (--route names another)",
            file.display(),
            link.path,
            match &r.path {
                PathMatch::Prefix(p) => format!("prefix {p:?}"),
                PathMatch::Regex(re) => format!("regex {:?}", re.as_str()),
            }
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_split_and_their_paths_encoded() {
        let l = split("https://Example.com:8443/a b.txt?x=1#frag").unwrap();
        assert_eq!(
            (
                l.origin,
                l.authority.as_str(),
                l.tls,
                l.path.as_str(),
                l.query
            ),
            (
                "https://Example.com:8443",
                "example.com:8443",
                true,
                "/a%20b.txt",
                Some("x=1")
            )
        );
        let l = split("/v/a.bin").unwrap();
        assert_eq!((l.origin, l.path.as_str(), l.query), ("", "/v/a.bin", None));
        let l = split("http://h?q").unwrap();
        assert_eq!(
            (l.origin, l.path.as_str(), l.query),
            ("http://h", "/", Some("q"))
        );
        assert!(split("ftp://h/x").is_err());
        assert!(split("h/x").is_err());
    }
}
