//! hoard's Proxy-Wasm host: filters written against the Proxy-Wasm ABI
//! (0.2.1 and 0.2.0) run in a route's phases, sandboxed.
//!
//! ## Model
//! A [`Plugin`] is one `[filter.NAME]`: its module compiled once (by
//! Cranelift, through wasmtime) when the configuration is read, checked
//! (an ABI version exported, every import one hoard provides, the root
//! context started and configured), and a fixed set of VM *slots*. A VM is
//! the module instantiated in its own store, with its root context; it
//! serves many requests, each an HTTP context ([`Stream`]).
//!
//! ## Lifecycle
//! A request on a route with filters opens a [`Stream`] per filter: the
//! slot is the worker thread's (threads are numbered as they first open
//! one), the VM is started there on first use, and the stream keeps that
//! VM for its whole life (a context's state lives in the VM's memory), even
//! if its task moves to another thread. `on_request` runs
//! `proxy_on_request_headers`, `on_response` `proxy_on_response_headers`;
//! dropping the stream runs `proxy_on_log`, `proxy_on_done` and
//! `proxy_on_delete`. A reload builds new plugins: requests in flight keep
//! the old ones to their end.
//!
//! ## Limits and failures
//! Every callback gets a fresh fuel budget (`fuel`, about one unit per
//! WebAssembly instruction) and the VM's memory is capped (`max_memory`).
//! A trap, an exhausted budget or a refused start is a [`FilterError`]
//! naming the filter: that one request fails (hoard answers 500), and the
//! VM is dropped (its state is unknown); the slot starts a new one for the
//! next request. Streams still holding the dropped VM fail too.
//!
//! ## Locking
//! One mutex per slot, held for one callback only (bounded by fuel), never
//! across an await. Two streams of one slot on two threads (after a task
//! moved) wait for each other's callback, nothing more.

mod abi;
mod head;
mod host;
mod pairs;
mod props;
mod queues;
mod shared;
mod vm;
mod wasi;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use parking_lot::Mutex;
use wasmtime::{Engine, InstancePre, Module};

pub use abi::ABI_VERSIONS;
pub use head::{RequestHead, ResponseHead};
pub use queues::QUEUE_MAX;
pub use shared::{Metric, MetricKind, Metrics, MAX_METRICS};
pub use vm::CALL_BODY_MAX;

use vm::{Exchange, Host, Vm};

/// The clock filters read (`proxy_get_current_time_nanoseconds`, WASI's
/// clock): hoard's own, set when the plugin is put to use (see
/// [`Plugin::start`]); the system's until then.
pub type SharedClock = Arc<parking_lot::RwLock<Arc<dyn hoard_policy::clock::Clock>>>;

impl vm::Host {
    /// Now, in nanoseconds since the Unix epoch, by hoard's clock.
    pub(crate) fn unix_nanos(&self) -> u64 {
        self.clock
            .read()
            .now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    }
}

/// What hoard does for a plugin's root contexts (given at
/// [`Plugin::start`]).
pub trait Services: Send + Sync {
    /// A root context's callback ran (a tick, a queue, a call's answer).
    fn root_called(&self);
    /// Sends a root context's HTTP call; `done` gets the answer (`None`:
    /// it failed), from any thread.
    fn call(&self, call: HttpCall, done: Box<dyn FnOnce(Option<CallResponse>) + Send>);
}

/// A plugin's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Fuel per callback (about one unit per WebAssembly instruction).
    pub fuel: u64,
    /// Largest linear memory of one VM, in bytes.
    pub max_memory: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            fuel: 50_000_000,
            max_memory: 64 << 20,
        }
    }
}

/// Why a filter failed a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The module trapped (including `abort` and `proc_exit`).
    Trap,
    /// A callback used up its fuel.
    Budget,
    /// The VM would not start (instantiation, `proxy_on_vm_start`,
    /// `proxy_on_configure`), or lacks a callback hoard needs.
    Start,
    /// The VM the request's context lived in was dropped after another
    /// request's failure.
    Lost,
    /// A body callback held more than [`BODY_HOLD_MAX`] bytes.
    BodyLimit,
}

impl Failure {
    /// Every kind, in [`Failure::index`] order.
    pub const ALL: [Failure; 5] = [
        Failure::Trap,
        Failure::Budget,
        Failure::Start,
        Failure::Lost,
        Failure::BodyLimit,
    ];

    /// Its place in [`Failure::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Trap => "trap",
            Failure::Budget => "budget",
            Failure::Start => "start",
            Failure::Lost => "lost",
            Failure::BodyLimit => "body-limit",
        }
    }
}

/// What one plugin did since it was built (a reload builds new ones):
/// `/status` and `/metrics` show it by filter.
#[derive(Debug, Default)]
pub struct Stats {
    /// HTTP contexts opened (requests, and fetches for origin filters).
    pub contexts: AtomicU64,
    /// VMs started (one per slot, and again after a failure dropped one).
    pub vm_starts: AtomicU64,
    /// Failures, by [`Failure::index`].
    pub failures: [AtomicU64; Failure::ALL.len()],
}

/// A filter's failure: which filter, what kind, and the runtime's words.
#[derive(Debug, Clone)]
pub struct FilterError {
    /// The filter's name (`[filter.NAME]`).
    pub filter: Arc<str>,
    /// What happened.
    pub kind: Failure,
    /// The runtime's message (a trap's backtrace, say).
    pub detail: String,
}

impl std::fmt::Display for FilterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "filter {:?}: {}: {}",
            self.filter,
            self.kind.as_str(),
            self.detail
        )
    }
}

impl std::error::Error for FilterError {}

/// A response a filter gave (`proxy_send_local_response`).
#[derive(Debug, Clone)]
pub struct LocalResponse {
    /// Its status.
    pub status: http::StatusCode,
    /// Its header fields.
    pub headers: http::HeaderMap,
    /// Its body.
    pub body: Bytes,
}

/// The most body bytes one stream holds back (a body callback that
/// returns `Pause` holds the bytes it has seen until it continues or the
/// body ends); beyond it the request fails.
pub const BODY_HOLD_MAX: usize = 16 << 20;

/// What a body callback let through.
#[derive(Debug)]
pub enum BodyStep {
    /// These bytes go on (all the stream held, as the filter left them;
    /// empty when it had nothing).
    Pass(Bytes),
    /// The stream holds the bytes (`Pause`) until a later call.
    Held,
    /// Answer with this instead (a request body's callback; too late for
    /// a response's, where it is ignored).
    Respond(LocalResponse),
}

/// What a callback decided.
#[derive(Debug)]
pub enum Verdict {
    /// Go on (also after `Pause` with nothing to wait for: nothing could
    /// resume the stream).
    Continue,
    /// Answer with this instead.
    Respond(LocalResponse),
    /// Send these HTTP calls first, and hand each response to
    /// [`Stream::on_call_response`] (a request callback that called
    /// `proxy_http_call`; the request waits, no thread does).
    Wait(Vec<HttpCall>),
}

/// An HTTP call a filter asked for (`proxy_http_call`), to be sent
/// through the upstream it names.
#[derive(Debug, Clone)]
pub struct HttpCall {
    /// What `proxy_on_http_call_response` will name it by.
    pub token: u32,
    /// The `[upstream.NAME]` it goes through.
    pub upstream: String,
    /// `:method`.
    pub method: http::Method,
    /// `:path`.
    pub path: String,
    /// `:authority` (the Host sent).
    pub authority: String,
    /// The other fields.
    pub headers: http::HeaderMap,
    /// The body.
    pub body: Bytes,
    /// How long the whole call may take.
    pub timeout: std::time::Duration,
}

/// An HTTP call's response, for [`Stream::on_call_response`].
#[derive(Debug)]
pub struct CallResponse {
    /// Its status and fields.
    pub head: ResponseHead,
    /// Its body.
    pub body: Bytes,
}

/// What properties read about the request (see `props`), and what a
/// filter sets.
#[derive(Debug, Clone, Default)]
pub struct StreamInfo {
    /// The client's address.
    pub client: Option<SocketAddr>,
    /// The route's name (its path match).
    pub route: String,
    /// `HTTP/1.1`, `HTTP/2`...
    pub protocol: &'static str,
    /// The request's id, with the access log on.
    pub request_id: Option<String>,
    /// The path and query as received.
    pub path: String,
    /// The method as received.
    pub method: String,
    /// The authority as received.
    pub host: String,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// The cache outcome, on responses (`hit`, `miss`...).
    pub cache_status: Option<&'static str>,
    /// Set by a request filter (`hoard.cache_key`): added to the key.
    pub cache_key: Option<String>,
    /// The stream is an origin filter's (route `origin_filters`): it sees
    /// the fetch's request and the origin's response before it is stored.
    pub origin: bool,
    /// Set by an origin filter's response callback (`hoard.ttl`): the
    /// stored response's freshness lifetime.
    pub ttl: Option<std::time::Duration>,
    /// Set by an origin filter's response callback (`hoard.uncacheable`):
    /// the response is not stored (and its key passes for a while).
    pub uncacheable: bool,
}

/// The engine every plugin compiles with: Cranelift, fuel metering.
fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut cfg = wasmtime::Config::new();
        cfg.consume_fuel(true);
        Engine::new(&cfg).expect("invariant: the engine's settings are valid on this host")
    })
}

/// A VM slot (see the module docs).
#[derive(Default)]
struct Slot {
    vm: Option<Vm>,
    /// Bumped at each VM start: a stream of an older VM is lost.
    generation: u64,
}

/// One `[filter.NAME]` (see the module docs).
pub struct Plugin {
    name: Arc<str>,
    root_id: Arc<str>,
    metrics: Arc<Metrics>,
    clock: SharedClock,
    abi: &'static str,
    config: Bytes,
    limits: Limits,
    pre: InstancePre<Host>,
    slots: Box<[Mutex<Slot>]>,
    /// The ticker thread was started (see [`Plugin::start_ticks`]).
    ticker: std::sync::atomic::AtomicBool,
    /// Queue notes and root call answers for this plugin's VMs (see `queues`).
    inbox: Arc<queues::Inbox>,
    /// hoard's services, once started.
    services: OnceLock<Arc<dyn Services>>,
    stats: Stats,
    /// The module exports `proxy_on_request_body`.
    request_body: bool,
    /// The module exports `proxy_on_response_body`.
    response_body: bool,
    /// The module exports `proxy_on_log`.
    log: bool,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("abi", &self.abi)
            .field("config", &self.config.len())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The worker's slot index (threads are numbered as they first ask).
fn slot_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed));
    SLOT.with(|s| *s)
}

impl Plugin {
    /// Compiles and checks a module (binary, or text format) and starts
    /// one VM with `config`; the error says what is wrong with it.
    /// `root_id` is what the `plugin_root_id` property answers (Envoy's
    /// `root_id`: SDKs pick their root context by it).
    pub fn compile(
        name: &str,
        root_id: &str,
        wasm: &[u8],
        config: Bytes,
        limits: Limits,
    ) -> Result<Plugin, String> {
        let engine = engine();
        let module = Module::new(engine, wasm).map_err(|e| format!("not a valid module: {e:#}"))?;
        let abi = ABI_VERSIONS
            .iter()
            .copied()
            .find(|v| module.get_export(v).is_some_and(|e| e.func().is_some()))
            .ok_or_else(|| {
                format!(
                    "exports no supported Proxy-Wasm ABI version ({})",
                    ABI_VERSIONS.join(" or ")
                )
            })?;
        let exports = |name: &str| module.get_export(name).is_some_and(|e| e.func().is_some());
        let (request_body, response_body, log) = (
            exports("proxy_on_request_body"),
            exports("proxy_on_response_body"),
            exports("proxy_on_log"),
        );
        let pre = host::linker(engine)
            .instantiate_pre(&module)
            .map_err(|e| format!("imports what hoard does not provide: {e:#}"))?;
        let name: Arc<str> = Arc::from(name);
        let root_id: Arc<str> = Arc::from(root_id);
        let metrics = Arc::new(Metrics::default());
        let clock: SharedClock = Arc::new(parking_lot::RwLock::new(Arc::new(
            hoard_policy::clock::SystemClock,
        )));
        let inbox = Arc::new(queues::Inbox::default());
        let seed = vm::Seed {
            pre: &pre,
            filter: &name,
            root_id: &root_id,
            metrics: &metrics,
            clock: &clock,
            config: &config,
            limits: &limits,
            inbox: &inbox,
        };
        let first = Vm::start(&seed, 0).map_err(|e| e.detail)?;
        let slots = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .max(1);
        let slots: Box<[Mutex<Slot>]> = (0..slots).map(|_| Mutex::new(Slot::default())).collect();
        *slots[0].lock() = Slot {
            vm: Some(first),
            generation: 1,
        };
        Ok(Plugin {
            name,
            root_id,
            metrics,
            clock,
            abi,
            config,
            limits,
            pre,
            slots,
            ticker: std::sync::atomic::AtomicBool::new(false),
            inbox,
            services: OnceLock::new(),
            stats: Stats {
                vm_starts: AtomicU64::new(1),
                ..Stats::default()
            },
            request_body,
            response_body,
            log,
        })
    }

    /// The filter's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn seed(&self) -> vm::Seed<'_> {
        vm::Seed {
            pre: &self.pre,
            filter: &self.name,
            root_id: &self.root_id,
            metrics: &self.metrics,
            clock: &self.clock,
            config: &self.config,
            limits: &self.limits,
            inbox: &self.inbox,
        }
    }

    /// What it did (see [`Stats`]).
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Counts a failure.
    fn failed(&self, e: &FilterError) {
        self.stats.failures[e.kind.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// The metrics its VMs defined (see `shared`).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The module has a request body callback (the pipeline reads a
    /// request's body through it before the origin sees it).
    pub fn has_request_body(&self) -> bool {
        self.request_body
    }

    /// The module has a response body callback (responses stream
    /// through it).
    pub fn has_response_body(&self) -> bool {
        self.response_body
    }

    /// The ABI version the module declared.
    pub fn abi(&self) -> &'static str {
        self.abi
    }

    /// Puts the plugin to use with hoard's clock (filters read their time
    /// from it) and services (root contexts' HTTP calls go through them),
    /// and starts its ticks (see [`Plugin::start_ticks`]).
    pub fn start(
        self: &Arc<Self>,
        clock: Arc<dyn hoard_policy::clock::Clock>,
        services: Arc<dyn Services>,
    ) {
        *self.clock.write() = clock;
        let _ = self.services.set(services);
        self.start_ticks();
    }

    /// After a root callback in `slot`: counted, and its HTTP calls sent
    /// (their answers come back as notes). A failure drops the VM.
    fn after_root(&self, slot: usize, s: &mut Slot, r: Result<Vec<HttpCall>, FilterError>) {
        let services = self.services.get();
        if let Some(sv) = services {
            sv.root_called();
        }
        match r {
            Ok(calls) => {
                for call in calls {
                    let token = call.token;
                    let inbox = Arc::downgrade(&self.inbox);
                    let done = Box::new(move |resp: Option<CallResponse>| {
                        if let Some(inbox) = inbox.upgrade() {
                            inbox.push(queues::Note::Call(slot, token, resp));
                        }
                    });
                    match services {
                        Some(sv) => sv.call(call, done),
                        None => done(None),
                    }
                }
            }
            Err(e) => {
                tracing::warn!(filter = %self.name, failure = e.kind.as_str(), error = %e, "a filter failed in its root context");
                self.failed(&e);
                s.vm = None;
            }
        }
    }

    /// Starts the plugin's ticker (once): a thread that calls
    /// `proxy_on_tick` in every VM whose root context asked for ticks, at
    /// its period (10 ms at the least), until the plugin is dropped (a
    /// reload). Called when the plugin is put to use.
    pub fn start_ticks(self: &Arc<Self>) {
        if self.ticker.swap(true, Ordering::Relaxed) {
            return;
        }
        let weak = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name(format!("filter-tick-{}", self.name))
            .spawn(move || {
                // Time in steps of 10 ms slept (a tick's period is a
                // whole number of steps).
                let step = std::time::Duration::from_millis(10);
                let mut now = std::time::Duration::ZERO;
                let mut due: Vec<Option<std::time::Duration>> = Vec::new();
                loop {
                    std::thread::sleep(step);
                    now += step;
                    let Some(p) = weak.upgrade() else { return };
                    for note in p.inbox.take() {
                        let (slot, run) = match note {
                            queues::Note::Queue(slot, q) => (slot, Err(q)),
                            queues::Note::Call(slot, token, resp) => (slot, Ok((token, resp))),
                        };
                        let slot = slot % p.slots.len();
                        let mut s = p.slots[slot].lock();
                        let Some(vm) = s.vm.as_mut() else { continue };
                        let r = match run {
                            Err(q) => vm.queue_ready(q),
                            Ok((token, resp)) => vm.root_call_response(token, resp),
                        };
                        p.after_root(slot, &mut s, r);
                    }
                    due.resize(p.slots.len(), None);
                    for (i, (slot, due)) in p.slots.iter().zip(due.iter_mut()).enumerate() {
                        let mut s = slot.lock();
                        let Some(vm) = s.vm.as_mut() else { continue };
                        let Some(period) = vm.tick_period() else {
                            continue;
                        };
                        let at = *due.get_or_insert(now + period);
                        if now < at {
                            continue;
                        }
                        *due = Some(now + period);
                        let r = vm.tick();
                        p.after_root(i, &mut s, r);
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(filter = %self.name, error = %e, "no ticks for this filter: no thread");
        }
    }

    /// Opens an HTTP context for one request (see the module docs).
    pub fn stream(self: &Arc<Self>, info: StreamInfo) -> Result<Stream, FilterError> {
        let slot = slot_index() % self.slots.len();
        let mut s = self.slots[slot].lock();
        if s.vm.is_none() {
            let vm = Vm::start(&self.seed(), slot).inspect_err(|e| self.failed(e))?;
            self.stats.vm_starts.fetch_add(1, Ordering::Relaxed);
            s.vm = Some(vm);
            s.generation += 1;
        }
        let generation = s.generation;
        let vm = s.vm.as_mut().expect("invariant: started above");
        let id = match vm.create() {
            Ok(id) => id,
            Err(e) => {
                self.failed(&e);
                s.vm = None;
                return Err(e);
            }
        };
        self.stats.contexts.fetch_add(1, Ordering::Relaxed);
        Ok(Stream {
            plugin: self.clone(),
            slot,
            generation,
            id,
            info: Some(Box::new(info)),
            next_token: 0,
            held: Bytes::new(),
        })
    }
}

/// One request's HTTP context in one filter (see the module docs).
pub struct Stream {
    plugin: Arc<Plugin>,
    slot: usize,
    generation: u64,
    id: i32,
    info: Option<Box<StreamInfo>>,
    /// The last call token handed out (tokens are per stream).
    next_token: u32,
    /// Body bytes a body callback holds back (`Pause`).
    held: Bytes,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("filter", &self.plugin.name)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Stream {
    /// The filter's name.
    pub fn filter(&self) -> &str {
        &self.plugin.name
    }

    /// The filter has a body callback for responses (`true`) or requests.
    pub fn wants_body(&self, response: bool) -> bool {
        if response {
            self.plugin.response_body
        } else {
            self.plugin.request_body
        }
    }

    /// The filter has `proxy_on_log`: its stream should end after the
    /// response's last byte, not at its head.
    pub fn wants_end(&self) -> bool {
        self.plugin.log
    }

    /// What properties read, and what the filter set.
    pub fn info(&self) -> &StreamInfo {
        self.info
            .as_deref()
            .expect("invariant: put back after each callback")
    }

    /// See [`Stream::info`].
    pub fn info_mut(&mut self) -> &mut StreamInfo {
        self.info
            .as_deref_mut()
            .expect("invariant: put back after each callback")
    }

    /// `proxy_on_request_headers` over `head`, edited in place (and
    /// handed back as the filter left it when it fails).
    pub fn on_request(&mut self, head: &mut RequestHead) -> Result<Verdict, FilterError> {
        let x = Exchange {
            request: Some(std::mem::take(head)),
            ..Exchange::default()
        };
        let (r, mut x) = self.run(Run::Request, x);
        *head = x.request.take().unwrap_or_default();
        r.map(|_| verdict(x))
    }

    /// `proxy_on_http_call_response` for the call `token` (`None`: it
    /// failed), while the request's `head` waits; the verdict is the
    /// request's, as [`Stream::on_request`]'s.
    pub fn on_call_response(
        &mut self,
        token: u32,
        response: Option<CallResponse>,
        head: &mut RequestHead,
    ) -> Result<Verdict, FilterError> {
        let x = Exchange {
            request: Some(std::mem::take(head)),
            call_response: response.map(|r| (r.head, r.body)),
            ..Exchange::default()
        };
        let (r, mut x) = self.run(Run::CallResponse(token), x);
        *head = x.request.take().unwrap_or_default();
        r.map(|_| verdict(x))
    }

    /// `proxy_on_response_headers` over `head`, as [`Stream::on_request`].
    pub fn on_response(&mut self, head: &mut ResponseHead) -> Result<Verdict, FilterError> {
        let x = Exchange {
            response: Some(std::mem::take(head)),
            ..Exchange::default()
        };
        let (r, mut x) = self.run(Run::Response, x);
        *head = x.response.take().unwrap_or_default();
        r.map(|_| verdict(x))
    }

    /// A body callback (`proxy_on_request_body` or
    /// `proxy_on_response_body`) over the bytes held so far and `chunk`
    /// (`end`: the body ends with it). `Continue`, or the body's end,
    /// lets them all through as the filter left them; `Pause` holds them
    /// for the next call (Envoy's buffering). A module without the
    /// callback lets every chunk through.
    pub fn on_body(
        &mut self,
        response: bool,
        chunk: Bytes,
        end: bool,
    ) -> Result<BodyStep, FilterError> {
        let bytes = if self.held.is_empty() {
            chunk
        } else {
            let mut all = Vec::with_capacity(self.held.len() + chunk.len());
            all.extend_from_slice(&self.held);
            all.extend_from_slice(&chunk);
            Bytes::from(all)
        };
        self.held = Bytes::new();
        let x = Exchange {
            body: Some(vm::BodyInHand { response, bytes }),
            ..Exchange::default()
        };
        let (r, mut x) = self.run(Run::Body(end), x);
        let action = r?;
        let bytes = x.body.take().map(|b| b.bytes).unwrap_or_default();
        if let Some(local) = x.local.take() {
            return Ok(BodyStep::Respond(local));
        }
        if action == abi::ACTION_CONTINUE || end {
            return Ok(BodyStep::Pass(bytes));
        }
        if bytes.len() > BODY_HOLD_MAX {
            let e = FilterError {
                filter: self.plugin.name.clone(),
                kind: Failure::BodyLimit,
                detail: format!("held more than {BODY_HOLD_MAX} bytes of body"),
            };
            self.plugin.failed(&e);
            return Err(e);
        }
        self.held = bytes;
        Ok(BodyStep::Held)
    }

    /// Runs a headers callback in this stream's VM; a failure drops the
    /// VM. The exchange always comes back, and the stream's info with it.
    fn run(&mut self, what: Run, mut x: Exchange) -> (Result<i32, FilterError>, Exchange) {
        x.info = self.info.take();
        x.next_token = self.next_token;
        let mut s = self.plugin.slots[self.slot].lock();
        let current = s.generation == self.generation;
        let (r, mut x) = match s.vm.as_mut() {
            Some(vm) if current => match what {
                Run::Request | Run::Response => {
                    vm.headers(matches!(what, Run::Response), self.id, x)
                }
                Run::Body(end) => vm.body(self.id, end, x),
                Run::CallResponse(token) => {
                    let (r, x) = vm.call_response(self.id, token, x);
                    (r.map(|()| abi::ACTION_CONTINUE), x)
                }
            },
            _ => {
                let lost = FilterError {
                    filter: self.plugin.name.clone(),
                    kind: Failure::Lost,
                    detail: "its VM was dropped after another request's failure".into(),
                };
                (Err(lost), x)
            }
        };
        if let Err(e) = &r {
            self.plugin.failed(e);
            if current {
                s.vm = None;
            }
        }
        self.info = x.info.take();
        self.next_token = x.next_token;
        (r, x)
    }
}

/// Which callback [`Stream::run`] runs.
#[derive(Clone, Copy)]
enum Run {
    Request,
    Response,
    /// A body callback; the body ends with this call.
    Body(bool),
    CallResponse(u32),
}

fn verdict(mut x: Exchange) -> Verdict {
    match x.local.take() {
        Some(local) => Verdict::Respond(local),
        None if !x.calls.is_empty() => Verdict::Wait(std::mem::take(&mut x.calls)),
        None => Verdict::Continue,
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let mut s = self.plugin.slots[self.slot].lock();
        if s.generation != self.generation {
            return;
        }
        let Some(vm) = s.vm.as_mut() else {
            return;
        };
        if let Err(e) = vm.end(self.id, self.info.take()) {
            tracing::warn!(filter = %self.plugin.name, error = %e, "a filter failed at the end of a request");
            self.plugin.failed(&e);
            s.vm = None;
        }
    }
}

#[cfg(test)]
mod tests;
