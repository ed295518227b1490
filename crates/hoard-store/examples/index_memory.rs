//! Resident bytes per object of a disk zone's in-memory index.
//!
//! ```sh
//! cargo run --release -p hoard-store --example index_memory [objects]
//! ```
//!
//! Inserts `objects` (default 1,000,000) entries as the loader would and
//! prints the growth of the process's resident set divided by the count.

use hoard_store::disk::index::{Entry, Index};

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("resident pages");
    pages * 4096
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let before = resident_bytes();
    let mut ix = Index::default();
    for i in 0..n {
        let id = xxhash_rust::xxh3::xxh3_128(&i.to_le_bytes());
        ix.insert(
            id,
            Entry {
                serial: i,
                blocks: 1,
                atime: 0,
                dir: 0,
                referenced: false,
                hits: 0,
            },
        );
    }
    let after = resident_bytes();
    println!(
        "{n} objects: {} bytes resident, {:.1} bytes per object (entry: {} bytes, capacity {})",
        after - before,
        (after - before) as f64 / n as f64,
        std::mem::size_of::<Entry>(),
        ix.map.capacity()
    );
}
