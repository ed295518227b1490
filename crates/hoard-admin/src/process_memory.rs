//! Where the process's memory goes, for `/status` and `/metrics`: its
//! resident size as the kernel counts it, the parts hoard accounts for
//! (the memory tier, the near tier, the purge catalogue, the disk zones'
//! indexes), and the rest: with hoard's allocator (`hoard-heap`), split
//! into the heap hoard holds beyond those parts (connections' buffers,
//! fills in flight, tables), the allocator's free pages and what is not heap
//! at all (code, stacks). An operator sizes a container as the tiers'
//! limits plus the rest seen under load.

use hoard_proxy::pipeline::Pipeline;

/// Bytes of one disk index entry in memory (the entry and its map slot).
const DISK_ENTRY_BYTES: u64 = 64;

/// One reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessMemory {
    /// Resident set size (`/proc/self/status`), 0 where it cannot be read.
    pub resident: u64,
    /// Of it, anonymous pages (`RssAnon`: the heap, thread stacks); the
    /// rest is file pages (the program's code) and shared memory.
    pub anonymous: u64,
    /// The memory tier's objects (their weights).
    pub memory_tier: u64,
    /// The near tier's copies, in a cluster.
    pub near_tier: u64,
    /// The purge catalogue: entries and their key texts, estimated.
    pub catalogue: u64,
    /// The disk zones' indexes, estimated.
    pub disk_index: u64,
    /// The allocator's count, when hoard's allocator is the global one.
    pub heap: Option<hoard_heap::HeapReading>,
}

impl ProcessMemory {
    /// Reads it now.
    pub fn read(p: &Pipeline) -> ProcessMemory {
        let store = &p.store;
        let catalogue = store.catalog();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        ProcessMemory {
            resident: status_kib(&status, "VmRSS").unwrap_or(0),
            anonymous: status_kib(&status, "RssAnon").unwrap_or(0),
            memory_tier: store.memory().map_or(0, |m| m.weight()),
            near_tier: store.near().map_or(0, |n| n.weight()),
            catalogue: catalogue.len() as u64 * (hoard_store::catalog::ENTRY_OVERHEAD as u64 + 64),
            disk_index: store
                .zones()
                .iter()
                .map(|z| z.objects() * DISK_ENTRY_BYTES)
                .sum(),
            heap: hoard_heap::reading(),
        }
    }

    fn accounted(&self) -> u64 {
        self.memory_tier + self.near_tier + self.catalogue + self.disk_index
    }

    /// What the parts above do not account for.
    pub fn other(&self) -> u64 {
        self.resident.saturating_sub(self.accounted())
    }

    /// `(part, bytes)` for `/metrics` and `/status`; they add up to the
    /// resident size. With the allocator's count, the rest is split three
    /// ways: `working` (the heap hoard holds beyond the parts above:
    /// connections' buffers, fills and responses in flight, tables),
    /// `allocator_free` (the anonymous pages beyond the heap held: pages the
    /// allocator keeps for reuse, and thread stacks) and `program` (file
    /// pages: code). Without it, one `other`.
    pub fn parts(&self) -> Vec<(&'static str, u64)> {
        let mut parts = vec![
            ("memory_tier", self.memory_tier),
            ("near_tier", self.near_tier),
            ("catalogue", self.catalogue),
            ("disk_index", self.disk_index),
        ];
        let rest = self.other();
        match self.heap {
            Some(h) => {
                let working = h.live.saturating_sub(self.accounted()).min(rest);
                let free = self.anonymous.saturating_sub(h.live).min(rest - working);
                parts.push(("working", working));
                parts.push(("allocator_free", free));
                parts.push(("program", rest - working - free));
            }
            None => parts.push(("other", rest)),
        }
        parts
    }
}

/// A size in the text of `/proc/self/status` (Linux), in bytes.
fn status_kib(status: &str, field: &str) -> Option<u64> {
    let line = status
        .lines()
        .find(|l| l.split(':').next() == Some(field))?;
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
            anonymous: 85,
            memory_tier: 30,
            near_tier: 20,
            catalogue: 5,
            disk_index: 5,
            heap: None,
        };
        assert_eq!(m.other(), 40);
        assert_eq!(m.parts().iter().map(|(_, b)| b).sum::<u64>(), 100);
        let over = ProcessMemory { resident: 10, ..m };
        assert_eq!(over.other(), 0);
        let split = ProcessMemory {
            heap: Some(hoard_heap::HeapReading { live: 70 }),
            ..m
        };
        assert_eq!(
            split.parts()[4..],
            [("working", 10), ("allocator_free", 15), ("program", 15)]
        );
        // A count taken while other threads allocate may run past the
        // resident size: the parts still add up to it.
        let ahead = ProcessMemory {
            heap: Some(hoard_heap::HeapReading { live: 95 }),
            ..m
        };
        assert_eq!(
            ahead.parts()[4..],
            [("working", 35), ("allocator_free", 0), ("program", 5)]
        );
        assert!(
            {
                let status = std::fs::read_to_string("/proc/self/status").unwrap();
                status_kib(&status, "VmRSS").is_some_and(|b| b > 1 << 20)
                    && status_kib(&status, "RssAnon").is_some_and(|b| b > 0)
            },
            "this test's own process"
        );
    }
}
