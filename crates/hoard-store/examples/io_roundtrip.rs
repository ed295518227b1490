//! What moving a disk read off the serving thread costs: a 64 KiB read of
//! a page-cached file done inline (`pread` on the calling thread) against
//! the same read through a zone's I/O pool (`spawn_blocking` behind a
//! semaphore).
//!
//! ```sh
//! cargo run --release -p hoard-store --example io_roundtrip
//! ```

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use tokio::time::Instant;

use hoard_store::disk::io::{IoKind, IoPool};

const READS: u32 = 20_000;
const BLOCK: usize = 64 * 1024;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("blob");
    std::fs::write(&path, vec![7u8; BLOCK * 16]).expect("write");
    let file = Arc::new(std::fs::File::open(&path).expect("open"));
    let t = Instant::now();
    for i in 0..READS {
        // A fresh buffer per read, as the pool's reads (and hoard's) have.
        let mut buf = vec![0u8; BLOCK];
        file.read_exact_at(&mut buf, (i as u64 % 16) * BLOCK as u64)
            .expect("read");
        std::hint::black_box(&buf);
    }
    let inline = t.elapsed() / READS;
    let pool = IoPool::new(32);
    let t = Instant::now();
    for i in 0..READS {
        let f = file.clone();
        pool.run(IoKind::Read, move || {
            let mut b = vec![0u8; BLOCK];
            f.read_exact_at(&mut b, (i as u64 % 16) * BLOCK as u64)?;
            Ok(b)
        })
        .await
        .expect("pool read");
    }
    let pooled = t.elapsed() / READS;
    println!(
        "64 KiB page-cached read: inline {:.1} us, through the I/O pool {:.1} us (+{:.1} us per read)",
        inline.as_secs_f64() * 1e6,
        pooled.as_secs_f64() * 1e6,
        (pooled.as_secs_f64() - inline.as_secs_f64()) * 1e6
    );
}
