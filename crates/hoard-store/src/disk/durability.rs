//! What a committed object survives: a process crash, or a power loss.
//!
//! ## Model
//!
//! An object file is committed by renaming `<name>.tmp` to `<name>`; the
//! index learns of it only after that. What the rename promises depends on
//! what reaches the device before it:
//!
//! | durability | before the object is published | survives |
//! |---|---|---|
//! | [`Durability::Process`] | write, rename | a crash or kill of the process: the kernel keeps the written pages and the rename |
//! | [`Durability::Power`] | write, `fsync` of the file, rename, `fsync` of its directory | a power loss or kernel crash as well: the data and the name are on the device |
//!
//! Under `power` the same holds for what else must outlive a restart: a new
//! fan-out directory is made durable in its parent, a rewritten head (a
//! 304, a soft purge) is synced before it counts, and a tombstone (a file
//! that could not be unlinked, see `zone/tombstone.rs`) is synced before a
//! purge answers. Under `process`, a power loss may lose recent objects or
//! bring back a torn file; the loader's checks (`format`) then remove it,
//! so nothing wrong is served either way, only less is kept.
//!
//! `docs/disk.md` has the cost measured by `bench/disk.sh`.

use std::fs::File;
use std::io;
use std::path::Path;

/// What a committed object survives. See the module docs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// A crash of the process (no `fsync`).
    #[default]
    Process,
    /// A power loss (`fsync` of the file and of its directory).
    Power,
}

impl Durability {
    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Process => "process",
            Durability::Power => "power",
        }
    }

    /// The durability named `name` in the configuration.
    pub fn parse(name: &str) -> Option<Durability> {
        match name {
            "process" => Some(Durability::Process),
            "power" => Some(Durability::Power),
            _ => None,
        }
    }

    /// True when commits are synced to the device.
    pub fn syncs(self) -> bool {
        self == Durability::Power
    }
}

/// Syncs a directory's entries (a rename or a creation in it) to the device.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in [Durability::Process, Durability::Power] {
            assert_eq!(Durability::parse(d.as_str()), Some(d));
        }
        assert_eq!(Durability::parse("Power"), None);
        assert_eq!(Durability::default(), Durability::Process);
    }
}
