//! openloop: an open-loop HTTP/1.1 load generator for bench/tail.sh.
//!
//! Requests go out at a fixed rate on a fixed set of keep-alive
//! connections, whatever the server does: connection `k` of `C` sends its
//! `j`-th request at `t0 + (k + j·C) / rate`, and the latency of every
//! request is measured from that *intended* start to the last byte of its
//! response. A response that comes late delays the requests queued behind
//! it on its connection, and their wait counts (no coordinated omission,
//! as in wrk2).
//!
//! One thread per connection with blocking sockets; each sleeps to its next
//! intended start with `clock_nanosleep(TIMER_ABSTIME)` and a timer slack of
//! 1 ns, so a send leaves within tens of microseconds of its time (reported
//! as `late_*`: the generator's own share of every latency).
//!
//! ```text
//! openloop --addr 127.0.0.1:8080 --path /micro/x --rate 2000 --conns 10 \
//!          --duration 20 --warmup 2 [--log FILE] [--slow 20]
//! ```
//!
//! Prints one `RESULT key=value ...` line, then `SLOW ...` lines for the
//! slowest requests (time since the start of the measurement, latency, the
//! send's lateness, connection). With `--log`, one line per measured request:
//! `at_us lat_us late_us conn status marked` (marked: 1 when the response
//! had the `--mark HEADER:TEXT` header, e.g. `cache-status:stale`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write to.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn sleep_until(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: ts is a valid timespec; no remainder is asked for.
        let r = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        if r != libc::EINTR {
            return;
        }
    }
}

fn fine_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

#[derive(Clone)]
struct Args {
    addr: String,
    host: String,
    path: String,
    rate: f64,
    conns: usize,
    duration: f64,
    warmup: f64,
    log: Option<String>,
    slow: usize,
    timeout: f64,
    /// `NAME:TEXT`: a response whose header NAME contains TEXT is marked
    /// (the log's last column), e.g. `cache-status:stale`.
    mark: Option<(String, String)>,
}

fn usage() -> ! {
    eprintln!(
        "usage: openloop --addr HOST:PORT --path PATH --rate REQ_PER_S [--conns 10] \
         [--duration 20] [--warmup 2] [--host NAME] [--log FILE] [--slow 20] [--timeout 10] [--mark HEADER:TEXT]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        addr: String::new(),
        host: String::new(),
        path: "/".into(),
        rate: 0.0,
        conns: 10,
        duration: 20.0,
        warmup: 2.0,
        log: None,
        slow: 20,
        timeout: 10.0,
        mark: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_else(|| usage());
        let num = |v: &str| v.parse::<f64>().unwrap_or_else(|_| usage());
        match k.as_str() {
            "--addr" => a.addr = v,
            "--host" => a.host = v,
            "--path" => a.path = v,
            "--rate" => a.rate = num(&v),
            "--conns" => a.conns = num(&v) as usize,
            "--duration" => a.duration = num(&v),
            "--warmup" => a.warmup = num(&v),
            "--log" => a.log = Some(v),
            "--slow" => a.slow = num(&v) as usize,
            "--timeout" => a.timeout = num(&v),
            "--mark" => {
                let (n, t) = v.split_once(':').unwrap_or_else(|| usage());
                a.mark = Some((n.to_string(), t.to_string()));
            }
            _ => usage(),
        }
    }
    if a.addr.is_empty() || a.rate <= 0.0 || a.conns == 0 || a.duration <= 0.0 {
        usage();
    }
    if a.host.is_empty() {
        a.host = a.addr.clone();
    }
    a
}

/// One measured request.
#[derive(Clone, Copy)]
struct Sample {
    /// Intended start, ns since the start of the measurement.
    at: u64,
    /// Intended start to the last byte of the response, ns.
    lat: u64,
    /// The generator's own lateness: the actual send minus the intended
    /// start, or minus the end of the previous response on the connection
    /// when that came later (a wait for the server is not the generator's).
    late: u64,
    conn: u32,
    /// HTTP status, or 0 for a failed request.
    status: u16,
    /// The response matched `--mark`.
    marked: bool,
}

struct Conn {
    stream: Option<TcpStream>,
    buf: Vec<u8>,
}

impl Conn {
    fn open(args: &Args) -> std::io::Result<TcpStream> {
        let s = TcpStream::connect(&args.addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs_f64(args.timeout)))?;
        Ok(s)
    }

    /// Sends `req` and reads one whole response; the status, or an error
    /// (the connection is then closed and opened again for the next one).
    fn exchange(&mut self, args: &Args, req: &[u8]) -> Result<(u16, bool), String> {
        if self.stream.is_none() {
            self.stream = Some(Self::open(args).map_err(|e| format!("connect: {e}"))?);
        }
        let r = self.exchange_on(req, args.mark.as_ref());
        if matches!(r, Err(_) | Ok((_, true, _))) {
            self.stream = None;
        }
        r.map(|(s, _, m)| (s, m))
    }

    fn exchange_on(
        &mut self,
        req: &[u8],
        mark: Option<&(String, String)>,
    ) -> Result<(u16, bool, bool), String> {
        let s = self.stream.as_mut().expect("connected");
        s.write_all(req).map_err(|e| format!("write: {e}"))?;
        self.buf.clear();
        let mut chunk = [0u8; 65536];
        let (status, head_len, body, close, marked) = loop {
            let n = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("closed before the response".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&self.buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let mut body = Body::Until;
                    let mut close = false;
                    let mut marked = false;
                    for h in resp.headers.iter() {
                        let v = std::str::from_utf8(h.value).unwrap_or("").trim();
                        if let Some((n, t)) = mark {
                            marked |= h.name.eq_ignore_ascii_case(n) && v.contains(t.as_str());
                        }
                        if h.name.eq_ignore_ascii_case("content-length") {
                            body = Body::Length(v.parse().map_err(|_| "bad content-length")?);
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding")
                            && v.eq_ignore_ascii_case("chunked")
                        {
                            body = Body::Chunked;
                        } else if h.name.eq_ignore_ascii_case("connection")
                            && v.eq_ignore_ascii_case("close")
                        {
                            close = true;
                        }
                    }
                    break (resp.code.unwrap_or(0), len, body, close, marked);
                }
                Ok(httparse::Status::Partial) => continue,
                Err(e) => return Err(format!("bad response head: {e}")),
            }
        };
        loop {
            let done = match body {
                Body::Length(n) => self.buf.len() >= head_len + n,
                // Enough for responses without trailers.
                Body::Chunked => self.buf[head_len..].ends_with(b"0\r\n\r\n"),
                Body::Until => return Err("response without a length".into()),
            };
            if done {
                return Ok((status, close, marked));
            }
            let n = s.read(&mut chunk).map_err(|e| format!("read body: {e}"))?;
            if n == 0 {
                return Err("closed in the body".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

#[derive(Clone, Copy)]
enum Body {
    Length(usize),
    Chunked,
    Until,
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

fn main() {
    let args = parse_args();
    fine_timer_slack();
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: openloop\r\nAccept: */*\r\n\r\n",
        args.path, args.host
    )
    .into_bytes();
    // Every connection is opened before the clock starts.
    let mut streams = Vec::new();
    for _ in 0..args.conns {
        match Conn::open(&args) {
            Ok(s) => streams.push(s),
            Err(e) => {
                eprintln!("openloop: connect to {}: {e}", args.addr);
                std::process::exit(1);
            }
        }
    }
    let gap = 1e9 / args.rate; // ns between two sends (all connections)
    let t0 = now_ns() + 100_000_000;
    let t0_unix_ns = clock_ns(libc::CLOCK_REALTIME) + 100_000_000;
    let measure_from = t0 + (args.warmup * 1e9) as u64;
    let end = measure_from + (args.duration * 1e9) as u64;
    let mut threads = Vec::new();
    for (k, stream) in streams.into_iter().enumerate() {
        let args = args.clone();
        let req = req.clone();
        threads.push(std::thread::spawn(move || {
            fine_timer_slack();
            let mut conn = Conn {
                stream: Some(stream),
                buf: Vec::with_capacity(65536),
            };
            let mut out = Vec::new();
            let mut errors: Vec<String> = Vec::new();
            let mut j: u64 = 0;
            let mut prev_done: u64 = 0;
            loop {
                let intended = t0 + ((k as u64 + j * args.conns as u64) as f64 * gap) as u64;
                j += 1;
                if intended >= end {
                    break;
                }
                if now_ns() < intended {
                    sleep_until(intended);
                }
                let sent = now_ns();
                let (status, marked) = match conn.exchange(&args, &req) {
                    Ok(s) => s,
                    Err(e) => {
                        if errors.len() < 3 {
                            errors.push(e);
                        }
                        (0, false)
                    }
                };
                let done = now_ns();
                let ready = intended.max(prev_done);
                prev_done = done;
                if intended >= measure_from {
                    out.push(Sample {
                        at: intended - measure_from,
                        lat: done - intended,
                        late: sent.saturating_sub(ready),
                        conn: k as u32,
                        status,
                        marked,
                    });
                }
            }
            (out, errors)
        }));
    }
    let mut all: Vec<Sample> = Vec::new();
    let mut first_errors: Vec<String> = Vec::new();
    for t in threads {
        let (s, e) = t.join().expect("a connection thread panicked");
        all.extend(s);
        first_errors.extend(e);
    }
    all.sort_by_key(|s| s.at);
    let finished = now_ns();
    let errors = all.iter().filter(|s| s.status != 200).count();
    let mut lat: Vec<u64> = all.iter().map(|s| s.lat).collect();
    let mut late: Vec<u64> = all.iter().map(|s| s.late).collect();
    lat.sort_unstable();
    late.sort_unstable();
    let us = |ns: u64| ns as f64 / 1000.0;
    let over_ms = |ms: u64| lat.iter().filter(|&&l| l > ms * 1_000_000).count();
    println!(
        "RESULT requests={} errors={} rate={} achieved={:.0} p50_us={:.1} p90_us={:.1} p99_us={:.1} \
         p999_us={:.1} p9999_us={:.1} max_us={:.1} over1ms={} over10ms={} late_p50_us={:.1} \
         late_p99_us={:.1} late_max_us={:.1} t0_unix_ms={} overrun_ms={:.1}",
        all.len(),
        errors,
        args.rate,
        all.len() as f64 / args.duration,
        us(pct(&lat, 50.0)),
        us(pct(&lat, 90.0)),
        us(pct(&lat, 99.0)),
        us(pct(&lat, 99.9)),
        us(pct(&lat, 99.99)),
        us(lat.last().copied().unwrap_or(0)),
        over_ms(1),
        over_ms(10),
        us(pct(&late, 50.0)),
        us(pct(&late, 99.0)),
        us(late.last().copied().unwrap_or(0)),
        (t0_unix_ns + (args.warmup * 1e9) as u64) / 1_000_000,
        finished.saturating_sub(end) as f64 / 1e6,
    );
    for e in &first_errors {
        println!("ERROR {e}");
    }
    let mut slow: Vec<Sample> = all.clone();
    slow.sort_by_key(|s| std::cmp::Reverse(s.lat));
    slow.truncate(args.slow);
    slow.sort_by_key(|s| s.at);
    for s in &slow {
        println!(
            "SLOW at_ms={:.3} lat_ms={:.3} late_ms={:.3} conn={} status={}",
            s.at as f64 / 1e6,
            s.lat as f64 / 1e6,
            s.late as f64 / 1e6,
            s.conn,
            s.status
        );
    }
    if let Some(path) = &args.log {
        let mut w = std::io::BufWriter::new(std::fs::File::create(path).unwrap_or_else(|e| {
            eprintln!("openloop: {path}: {e}");
            std::process::exit(1)
        }));
        for s in &all {
            let _ = writeln!(
                w,
                "{} {} {} {} {} {}",
                s.at / 1000,
                s.lat / 1000,
                s.late / 1000,
                s.conn,
                s.status,
                u8::from(s.marked)
            );
        }
    }
}
