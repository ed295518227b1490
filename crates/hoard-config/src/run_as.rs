//! `[server] user` and `group`: looked up when the file is read, so that
//! `hoard check` names an unknown user or group with its line.

use toml::Spanned;

use super::{ConfigError, Resolver};
use crate::privileges::{self, RunAs};

impl Resolver<'_> {
    pub(super) fn run_as(
        &self,
        user: Option<&Spanned<String>>,
        group: Option<&Spanned<String>>,
    ) -> Result<Option<RunAs>, ConfigError> {
        match (user, group) {
            (None, None) => Ok(None),
            (None, Some(g)) => Err(self.err(
                Some(g.span()),
                "server.group".into(),
                "needs `user` (the user to serve as)".into(),
            )),
            (Some(u), g) => privileges::resolve(u.get_ref(), g.map(|g| g.get_ref().as_str()))
                .map(Some)
                .map_err(|(key, m)| {
                    let span = match key {
                        "server.group" => g.map(|g| g.span()),
                        _ => Some(u.span()),
                    };
                    self.err(span, key.into(), m)
                }),
        }
    }
}
