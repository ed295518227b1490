//! Where the process's memory goes, for `/status` and `/metrics`: its
//! resident size as the kernel counts it, the parts hoard accounts for
//! (the memory tier, the near tier, the purge catalogue, the disk zones'
//! indexes), and the rest (connections' buffers, fills in flight, tables,
//! the allocator's free pages), so that an operator can size a container:
//! the tiers' limits plus the rest seen under load.

use crate::pipeline::Pipeline;

/// Bytes of one disk index entry in memory (the entry and its map slot).
const DISK_ENTRY_BYTES: u64 = 64;

/// One reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessMemory {
    /// Resident set size (`/proc/self/status`), 0 where it cannot be read.
    pub resident: u64,
    /// The memory tier's objects (their weights).
    pub memory_tier: u64,
    /// The near tier's copies, in a cluster.
    pub near_tier: u64,
    /// The purge catalogue: entries and their key texts, estimated.
    pub catalogue: u64,
    /// The disk zones' indexes, estimated.
    pub disk_index: u64,
}

impl ProcessMemory {
    /// Reads it now.
    pub fn read(p: &Pipeline) -> ProcessMemory {
        let store = &p.store;
        let catalogue = store.catalog();
        ProcessMemory {
            resident: resident_bytes().unwrap_or(0),
            memory_tier: store.memory().map_or(0, |m| m.weight()),
            near_tier: store.near().map_or(0, |n| n.weight()),
            catalogue: catalogue.len() as u64 * (hoard_store::catalog::ENTRY_OVERHEAD as u64 + 64),
            disk_index: store
                .zones()
                .iter()
                .map(|z| z.objects() * DISK_ENTRY_BYTES)
                .sum(),
        }
    }

    /// What the parts above do not account for.
    pub fn other(&self) -> u64 {
        self.resident
            .saturating_sub(self.memory_tier + self.near_tier + self.catalogue + self.disk_index)
    }

    /// `(part, bytes)` for `/metrics` and `/status`.
    pub fn parts(&self) -> [(&'static str, u64); 5] {
        [
            ("memory_tier", self.memory_tier),
            ("near_tier", self.near_tier),
            ("catalogue", self.catalogue),
            ("disk_index", self.disk_index),
            ("other", self.other()),
        ]
    }
}

/// The resident set size of this process, from `/proc/self/status`'s
/// `VmRSS` (Linux).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_is_what_the_parts_leave() {
        let m = ProcessMemory {
            resident: 100,
            memory_tier: 30,
            near_tier: 20,
            catalogue: 5,
            disk_index: 5,
        };
        assert_eq!(m.other(), 40);
        assert_eq!(m.parts().iter().map(|(_, b)| b).sum::<u64>(), 100);
        let over = ProcessMemory { resident: 10, ..m };
        assert_eq!(over.other(), 0);
        assert!(
            resident_bytes().is_some_and(|b| b > 1 << 20),
            "this test's own process"
        );
    }
}
