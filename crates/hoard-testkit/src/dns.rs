//! A DNS server the tests control: the records of a name change when a
//! test says so, and every query is counted.
//!
//! It answers over UDP on a free loopback port: A records for the names
//! set with [`Dns::set_a`], and SRV records (each target answered with its
//! A record, 127.0.0.1) for the names set with [`Dns::set_srv`]; any other
//! name gets NXDOMAIN. A test waits for the proxy to have asked again with
//! [`Dns::wait_queries`], never with a sleep.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use parking_lot::Mutex;

#[derive(Default)]
struct Zone {
    a: HashMap<String, Vec<Ipv4Addr>>,
    srv: HashMap<String, Vec<(String, u16)>>,
}

/// The server. Stops when dropped.
pub struct Dns {
    addr: SocketAddr,
    zone: Arc<Mutex<Zone>>,
    queries: Arc<AtomicU64>,
    notify: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

fn key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl Dns {
    /// Starts a server on a free loopback port.
    pub async fn start() -> Dns {
        let sock = tokio::net::UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("bind a UDP port for the test DNS server");
        let addr = sock.local_addr().expect("local address");
        let zone: Arc<Mutex<Zone>> = Arc::default();
        let queries: Arc<AtomicU64> = Arc::default();
        let notify: Arc<tokio::sync::Notify> = Arc::default();
        let task = tokio::spawn({
            let (zone, queries, notify) = (zone.clone(), queries.clone(), notify.clone());
            async move {
                let mut buf = vec![0u8; 2048];
                loop {
                    let Ok((n, from)) = sock.recv_from(&mut buf).await else {
                        return;
                    };
                    let Ok(q) = Message::from_vec(&buf[..n]) else {
                        continue;
                    };
                    let answer = answer(&zone.lock(), &q);
                    if let Ok(bytes) = answer.to_vec() {
                        let _ = sock.send_to(&bytes, from).await;
                    }
                    queries.fetch_add(1, Ordering::SeqCst);
                    notify.notify_waiters();
                }
            }
        });
        Dns {
            addr,
            zone,
            queries,
            notify,
            task,
        }
    }

    /// Its address (`[cluster.members] resolver`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the A records of `name` (none: NXDOMAIN).
    pub fn set_a(&self, name: &str, ips: &[Ipv4Addr]) {
        self.zone.lock().a.insert(key(name), ips.to_vec());
    }

    /// Sets the SRV records of `name`: (target, port) each; targets are
    /// answered with 127.0.0.1.
    pub fn set_srv(&self, name: &str, targets: &[(&str, u16)]) {
        self.zone.lock().srv.insert(
            key(name),
            targets.iter().map(|(t, p)| (key(t), *p)).collect(),
        );
    }

    /// Queries answered so far.
    pub fn queries(&self) -> u64 {
        self.queries.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` queries were answered.
    pub async fn wait_queries(&self, n: u64) {
        loop {
            let notified = self.notify.notified();
            if self.queries() >= n {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn answer(zone: &Zone, q: &Message) -> Message {
    let mut m = Message::response(q.metadata.id, q.metadata.op_code);
    m.metadata.message_type = MessageType::Response;
    m.metadata.authoritative = true;
    m.metadata.recursion_desired = q.metadata.recursion_desired;
    m.metadata.recursion_available = true;
    m.add_queries(q.queries.clone());
    let mut found = false;
    for query in &q.queries {
        let name = key(&query.name().to_string());
        match query.query_type() {
            RecordType::A => {
                if let Some(ips) = zone.a.get(&name) {
                    found = true;
                    for ip in ips {
                        m.add_answer(Record::from_rdata(
                            query.name().clone(),
                            1,
                            RData::A(A(*ip)),
                        ));
                    }
                } else if zone.srv.values().flatten().any(|(t, _)| *t == name) {
                    found = true;
                    m.add_answer(Record::from_rdata(
                        query.name().clone(),
                        1,
                        RData::A(A(Ipv4Addr::LOCALHOST)),
                    ));
                }
            }
            RecordType::AAAA => {
                // Known names have no IPv6 address: an empty answer.
                found |= zone.a.contains_key(&name)
                    || zone.srv.values().flatten().any(|(t, _)| *t == name);
            }
            RecordType::SRV => {
                if let Some(targets) = zone.srv.get(&name) {
                    found = true;
                    for (t, port) in targets {
                        let target = Name::from_str(&format!("{t}.")).expect("a target name");
                        m.add_answer(Record::from_rdata(
                            query.name().clone(),
                            1,
                            RData::SRV(SRV::new(0, 1, *port, target)),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    if !found {
        m.metadata.response_code = ResponseCode::NXDomain;
    }
    m
}
