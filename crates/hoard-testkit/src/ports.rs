//! Ports for listeners that other processes bind.

/// A free loopback port (bound and released) for a listener another
/// process binds (redis-server, pebble, or hoard's ACME ports that pebble dials). Not
/// from the kernel's ephemeral range, where a connection made meanwhile by
/// any test could take it before it is bound again: a block of 16 below
/// it (27000-31800, clear of the cluster cases' 21000-26600), chosen by
/// this process's id (cargo-nextest runs each case in a process of its
/// own), each port checked free.
pub fn free_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let block = (std::process::id() % 300) * 16;
    for _ in 0..4_800 {
        // Past its own block (many cases in one process) it goes on to the
        // next ones.
        let i = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = 27_000 + ((block + i) % 4_800) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 27000-31800");
}
