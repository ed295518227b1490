//! The WebSocket echo benchmark's two ends (`bench/websocket.sh`), one
//! thread each:
//!
//! ```text
//! ws_echo serve 127.0.0.1:9001                 # echo every message back
//! ws_echo load ws://127.0.0.1:8080/ws 64 10 64 # 64 sockets, 10 s, 64-byte messages
//! ```
//!
//! `load` opens the WebSockets (RFC 6455 handshake), then keeps one
//! message in flight per socket (send a masked binary frame, read the
//! echo, check it, send the next) and prints `messages=N seconds=S
//! errors=E`. Both ends are as light as can be (frames built once; the
//! server echoes bytes after its handshake) so that, on a small machine,
//! the proxy between them is what limits the rate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["serve", addr] => rt.block_on(serve(addr)),
        ["load", url, conns, secs, size] => {
            let n = |s: &str, what: &str| {
                s.parse::<u64>()
                    .unwrap_or_else(|_| panic!("{what}: a whole number, not {s:?}"))
            };
            rt.block_on(load(
                url,
                n(conns, "sockets"),
                Duration::from_secs(n(secs, "seconds")),
                n(size, "message size") as usize,
            ));
        }
        _ => {
            eprintln!("usage: ws_echo serve ADDR | ws_echo load URL SOCKETS SECONDS SIZE");
            std::process::exit(2);
        }
    }
}

/// Reads an HTTP head (up to the blank line) from `s`.
async fn read_head(s: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await? == 0 || head.len() > 16 << 10 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// The WebSocket handshake (RFC 6455 §4.2), then every byte back as it
/// came: a proxy between the two ends carries the same frames either way.
async fn serve(addr: &str) {
    let listener = TcpListener::bind(addr).await.expect("bind");
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let Ok(head) = read_head(&mut stream).await else {
                return;
            };
            let Some(key) = head.lines().find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("sec-websocket-key")
                    .then(|| value.trim().to_string())
            }) else {
                return;
            };
            let answer = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
                derive_accept_key(key.as_bytes())
            );
            if stream.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
            let (mut r, mut w) = stream.split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
        });
    }
}

/// One binary frame from a client (RFC 6455 §5.2: masked), built once.
fn frame(size: usize) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut f = vec![0x82];
    match size {
        0..=125 => f.push(0x80 | size as u8),
        126..=65535 => {
            f.push(0x80 | 126);
            f.extend_from_slice(&(size as u16).to_be_bytes());
        }
        _ => {
            f.push(0x80 | 127);
            f.extend_from_slice(&(size as u64).to_be_bytes());
        }
    }
    f.extend_from_slice(&mask);
    f.extend((0..size).map(|i| (i % 251) as u8 ^ mask[i % 4]));
    f
}

async fn open(url: &str) -> std::io::Result<TcpStream> {
    let rest = url.strip_prefix("ws://").expect("a ws:// URL");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut s = TcpStream::connect(authority).await?;
    s.set_nodelay(true)?;
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {authority}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        if path.is_empty() { "/" } else { path }
    );
    s.write_all(req.as_bytes()).await?;
    let head = read_head(&mut s).await?;
    if !head.starts_with("HTTP/1.1 101") {
        return Err(std::io::Error::other(format!("no switch: {head}")));
    }
    Ok(s)
}

async fn load(url: &str, conns: u64, secs: Duration, size: usize) {
    let messages = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let mut sockets = Vec::new();
    for _ in 0..conns {
        match open(url).await {
            Ok(s) => sockets.push(s),
            Err(e) => {
                eprintln!("connect {url}: {e}");
                std::process::exit(1);
            }
        }
    }
    let frame = Arc::new(frame(size));
    let started = Instant::now();
    let deadline = started + secs;
    let mut tasks = Vec::new();
    for mut s in sockets {
        let (messages, errors, frame) = (messages.clone(), errors.clone(), frame.clone());
        tasks.push(tokio::spawn(async move {
            let mut echo = vec![0u8; frame.len()];
            while Instant::now() < deadline {
                let ok = s.write_all(&frame).await.is_ok()
                    && s.read_exact(&mut echo).await.is_ok()
                    && echo == *frame;
                if !ok {
                    errors.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                messages.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    println!(
        "messages={} seconds={:.3} errors={}",
        messages.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64(),
        errors.load(Ordering::Relaxed)
    );
}
