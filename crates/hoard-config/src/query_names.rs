//! The parameter names of a key's `query_params` and `query_exclude`: a
//! name as sent, or a prefix and a final `*` (`utm_*`: every parameter
//! whose name begins `utm_`; matched by
//! [`hoard_policy::key::query_name_matches`]). A `*` anywhere else is
//! refused rather than taken literally.

use toml::Spanned;

use super::{ConfigError, Resolver};

impl Resolver<'_> {
    /// The names of `at` (`site[0].route[1].key.query_exclude`), checked.
    pub(super) fn query_names(
        &self,
        at: &str,
        names: Vec<Spanned<String>>,
    ) -> Result<Vec<String>, ConfigError> {
        names
            .into_iter()
            .map(|n| {
                let span = n.span();
                let name = n.into_inner();
                match name.find('*') {
                    Some(i) if i + 1 != name.len() => Err(self.err(
                        Some(span),
                        at.to_string(),
                        format!(
                            "{name:?}: `*` only ends a name, as a prefix (\"utm_*\" is every \
                             parameter whose name begins \"utm_\")"
                        ),
                    )),
                    _ => Ok(name),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;
    use hoard_policy::key::QueryKey;

    const UP: &str = "[upstream.app]\nservers = [\"http://a:1\"]\n";

    #[test]
    fn a_star_only_ends_a_name() {
        let c = Config::from_toml(
            "hoard.toml",
            &format!("{UP}[[site]]\n[[site.route]]\nprefix = \"/\"\nkey = {{ query_exclude = [\"utm_*\", \"fbclid\"] }}\n"),
        )
        .unwrap();
        assert_eq!(
            c.sites[0].routes[0].key.query,
            QueryKey::Except(vec!["utm_*".into(), "fbclid".into()])
        );
        for (k, v) in [("query_exclude", "*_id"), ("query_params", "a*b")] {
            let e = Config::from_toml(
                "hoard.toml",
                &format!("{UP}[[site]]\n[[site.route]]\nprefix = \"/\"\nkey = {{ {k} = [\"x\", \"{v}\"] }}\n"),
            )
            .unwrap_err();
            assert_eq!(
                (e.line, e.key.as_str()),
                (Some(6), format!("site[0].route[0].key.{k}").as_str()),
                "{e}"
            );
            assert!(e.message.contains("only ends a name"), "{e}");
        }
    }
}
