//! The recent purges, for `GET /purges` (Varnish's `ban.list`): the last
//! [`PURGE_LOG_MAX`] purges of every kind, newest first, with who asked,
//! what they selected and how many objects went (for a regex purge, once
//! its sweep is done). One short lock per purge.

use std::collections::VecDeque;
use std::time::SystemTime;

use parking_lot::Mutex;

/// Purges remembered.
pub const PURGE_LOG_MAX: usize = 256;

/// One purge.
#[derive(Debug, Clone)]
pub struct PurgeEntry {
    /// Its number, from 1.
    pub id: u64,
    /// When it was applied (or its ban added).
    pub at: SystemTime,
    /// `url`, `prefix`, `host`, `tag`, `regex`, `key`.
    pub kind: &'static str,
    /// What it selected, as written.
    pub pattern: String,
    /// Made stale instead of removed.
    pub soft: bool,
    /// Who asked (`admin 10.0.0.1:5000`, `PURGE 10.0.0.2`, a member...).
    pub source: String,
    /// Objects removed or made stale; `None` while a ban's sweep runs.
    pub purged: Option<usize>,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct PurgeLog {
    entries: Mutex<(u64, VecDeque<PurgeEntry>)>,
}

impl PurgeLog {
    /// Notes a purge; its id.
    pub(crate) fn note(
        &self,
        at: SystemTime,
        kind: &'static str,
        pattern: String,
        soft: bool,
        source: &str,
        purged: Option<usize>,
    ) -> u64 {
        let mut g = self.entries.lock();
        g.0 += 1;
        let id = g.0;
        if g.1.len() == PURGE_LOG_MAX {
            g.1.pop_back();
        }
        g.1.push_front(PurgeEntry {
            id,
            at,
            kind,
            pattern,
            soft,
            source: source.to_owned(),
            purged,
        });
        id
    }

    /// Sets how many objects purge `id` took (a ban's sweep is done).
    pub(crate) fn done(&self, id: u64, purged: usize) {
        if let Some(e) = self.entries.lock().1.iter_mut().find(|e| e.id == id) {
            e.purged = Some(purged);
        }
    }

    /// The entries, newest first.
    pub fn entries(&self) -> Vec<PurgeEntry> {
        self.entries.lock().1.iter().cloned().collect()
    }
}
