//! One VM: a filter's module instantiated in its own store, its root
//! context started (`proxy_on_vm_start`) and configured
//! (`proxy_on_configure`), then serving many HTTP contexts, one per
//! request, each callback run with a fresh fuel budget.

use std::sync::Arc;

use bytes::Bytes;
use wasmtime::{Instance, InstancePre, Memory, Store, StoreLimits, StoreLimitsBuilder, TypedFunc};

use crate::head::{RequestHead, ResponseHead};
use crate::{Failure, FilterError, Limits, LocalResponse, StreamInfo};

/// What a callback sees of the request it runs for.
#[derive(Default)]
pub(crate) struct Exchange {
    pub request: Option<RequestHead>,
    pub response: Option<ResponseHead>,
    pub info: Option<Box<StreamInfo>>,
    pub local: Option<LocalResponse>,
    /// HTTP calls the callback asked for (`proxy_http_call`).
    pub calls: Vec<crate::HttpCall>,
    /// The call response `proxy_on_http_call_response` reads.
    pub call_response: Option<(ResponseHead, Bytes)>,
    /// The next token `proxy_http_call` hands out (kept by the stream).
    pub next_token: u32,
    /// The body bytes a body callback sees (and may replace).
    pub body: Option<BodyInHand>,
    /// The callback is the root context's (a tick, a queue, a call's
    /// answer): it may make HTTP calls too.
    pub root: bool,
}

/// The body bytes in hand in a body callback: all the filter has buffered
/// so far (see [`crate::Stream::on_body`]).
pub(crate) struct BodyInHand {
    /// A response body's (else a request body's).
    pub response: bool,
    pub bytes: Bytes,
}

/// The store's data: the filter's identity and configuration, its limits,
/// and the exchange of the callback running now.
pub(crate) struct Host {
    pub filter: Arc<str>,
    pub root_id: Arc<str>,
    pub metrics: Arc<crate::shared::Metrics>,
    /// hoard's clock (a test clock in tests), for the filter's time.
    pub clock: crate::SharedClock,
    /// The period the root context asked ticks at (`proxy_set_tick_period_milliseconds`).
    pub tick: Option<std::time::Duration>,
    pub config: Bytes,
    pub limits: StoreLimits,
    pub memory: Option<Memory>,
    pub alloc: Option<TypedFunc<i32, i32>>,
    pub x: Exchange,
    /// The plugin's inbox for queue notes, and this VM's slot in it.
    pub inbox: Arc<crate::queues::Inbox>,
    pub slot: usize,
}

/// What a VM is started from: its plugin's parts.
pub(crate) struct Seed<'a> {
    pub pre: &'a InstancePre<Host>,
    pub filter: &'a Arc<str>,
    pub root_id: &'a Arc<str>,
    pub metrics: &'a Arc<crate::shared::Metrics>,
    pub clock: &'a crate::SharedClock,
    pub config: &'a Bytes,
    pub limits: &'a Limits,
    pub inbox: &'a Arc<crate::queues::Inbox>,
}

type Cb3 = TypedFunc<(i32, i32, i32), i32>;

/// The callbacks hoard calls (the module's exports).
struct Callbacks {
    context_create: TypedFunc<(i32, i32), ()>,
    request_headers: Option<Cb3>,
    response_headers: Option<Cb3>,
    request_body: Option<Cb3>,
    response_body: Option<Cb3>,
    log: Option<TypedFunc<i32, ()>>,
    tick: Option<TypedFunc<i32, ()>>,
    queue_ready: Option<TypedFunc<(i32, i32), ()>>,
    call_response: Option<TypedFunc<(i32, i32, i32, i32, i32), ()>>,
    done: Option<TypedFunc<i32, i32>>,
    delete: Option<TypedFunc<i32, ()>>,
}

/// The largest HTTP-call response body a filter is handed (the rest is
/// cut, and the call counts as failed).
pub const CALL_BODY_MAX: usize = 1 << 20;

/// The root context's id in every VM; HTTP contexts count up from 2.
pub(crate) const ROOT: i32 = 1;

pub(crate) struct Vm {
    store: Store<Host>,
    cb: Callbacks,
    next_id: i32,
    fuel: u64,
    /// The next token the root context's HTTP calls get.
    root_token: u32,
}

fn failure(filter: &Arc<str>, e: wasmtime::Error) -> FilterError {
    let kind = match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::OutOfFuel) => Failure::Budget,
        _ => Failure::Trap,
    };
    FilterError {
        filter: filter.clone(),
        kind,
        detail: format!("{e:#}"),
    }
}

impl Vm {
    /// Instantiates the module in `slot` and starts its root context.
    pub(crate) fn start(seed: &Seed<'_>, slot: usize) -> Result<Vm, FilterError> {
        let Seed {
            pre,
            filter,
            root_id,
            metrics,
            clock,
            config,
            limits,
            inbox,
        } = *seed;
        let host = Host {
            filter: filter.clone(),
            root_id: root_id.clone(),
            metrics: metrics.clone(),
            clock: clock.clone(),
            tick: None,
            config: config.clone(),
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.max_memory)
                .instances(1)
                .build(),
            memory: None,
            alloc: None,
            x: Exchange::default(),
            inbox: inbox.clone(),
            slot,
        };
        let mut store = Store::new(pre.module().engine(), host);
        store.limiter(|h| &mut h.limits);
        let fail = |e| failure(filter, e);
        let abi = |detail: String| FilterError {
            filter: filter.clone(),
            kind: Failure::Start,
            detail,
        };
        store.set_fuel(limits.fuel).map_err(fail)?;
        let inst: Instance = pre.instantiate(&mut store).map_err(fail)?;
        let memory = inst
            .get_memory(&mut store, "memory")
            .ok_or_else(|| abi("exports no `memory`".into()))?;
        let alloc = inst
            .get_typed_func::<i32, i32>(&mut store, "proxy_on_memory_allocate")
            .or_else(|_| inst.get_typed_func::<i32, i32>(&mut store, "malloc"))
            .map_err(|_| abi("exports neither `proxy_on_memory_allocate` nor `malloc`".into()))?;
        store.data_mut().memory = Some(memory);
        store.data_mut().alloc = Some(alloc);
        // A WASI reactor's constructors, or a command's start.
        for init in ["_initialize", "_start"] {
            if let Ok(f) = inst.get_typed_func::<(), ()>(&mut store, init) {
                f.call(&mut store, ()).map_err(fail)?;
                break;
            }
        }
        let cb3 = |store: &mut Store<Host>, name| {
            inst.get_typed_func::<(i32, i32, i32), i32>(store, name)
                .ok()
        };
        let cb = Callbacks {
            context_create: inst
                .get_typed_func(&mut store, "proxy_on_context_create")
                .map_err(|_| abi("exports no `proxy_on_context_create`".into()))?,
            request_headers: cb3(&mut store, "proxy_on_request_headers"),
            response_headers: cb3(&mut store, "proxy_on_response_headers"),
            request_body: cb3(&mut store, "proxy_on_request_body"),
            response_body: cb3(&mut store, "proxy_on_response_body"),
            log: inst.get_typed_func(&mut store, "proxy_on_log").ok(),
            tick: inst.get_typed_func(&mut store, "proxy_on_tick").ok(),
            queue_ready: inst.get_typed_func(&mut store, "proxy_on_queue_ready").ok(),
            call_response: inst
                .get_typed_func(&mut store, "proxy_on_http_call_response")
                .ok(),
            done: inst.get_typed_func(&mut store, "proxy_on_done").ok(),
            delete: inst.get_typed_func(&mut store, "proxy_on_delete").ok(),
        };
        cb.context_create
            .call(&mut store, (ROOT, 0))
            .map_err(fail)?;
        if let Ok(f) = inst.get_typed_func::<(i32, i32), i32>(&mut store, "proxy_on_vm_start") {
            if f.call(&mut store, (ROOT, 0)).map_err(fail)? == 0 {
                return Err(abi("proxy_on_vm_start refused to start".into()));
            }
        }
        if let Ok(f) = inst.get_typed_func::<(i32, i32), i32>(&mut store, "proxy_on_configure") {
            if f.call(&mut store, (ROOT, config.len() as i32))
                .map_err(fail)?
                == 0
            {
                return Err(abi("proxy_on_configure refused the configuration".into()));
            }
        }
        Ok(Vm {
            store,
            cb,
            next_id: ROOT + 1,
            fuel: limits.fuel,
            root_token: 0,
        })
    }

    /// The tick period the root context asked for, if any.
    pub(crate) fn tick_period(&self) -> Option<std::time::Duration> {
        self.store.data().tick
    }

    /// Runs a root context callback (`f` calls it, with `call_response`
    /// in hand); the HTTP calls it asked for.
    fn in_root(
        &mut self,
        call_response: Option<(ResponseHead, Bytes)>,
        f: impl FnOnce(&mut Store<Host>) -> wasmtime::Result<()>,
    ) -> Result<Vec<crate::HttpCall>, FilterError> {
        self.budget()?;
        self.store.data_mut().x = Exchange {
            root: true,
            next_token: self.root_token,
            call_response,
            ..Exchange::default()
        };
        let filter = self.store.data().filter.clone();
        let r = f(&mut self.store).map_err(|e| failure(&filter, e));
        let x = std::mem::take(&mut self.store.data_mut().x);
        self.root_token = x.next_token;
        r.map(|()| x.calls)
    }

    /// `proxy_on_tick` for the root context; the HTTP calls it made.
    pub(crate) fn tick(&mut self) -> Result<Vec<crate::HttpCall>, FilterError> {
        let Some(f) = self.cb.tick.clone() else {
            return Ok(Vec::new());
        };
        self.in_root(None, |s| f.call(s, ROOT))
    }

    /// `proxy_on_queue_ready` for the root context: queue `id` has items.
    pub(crate) fn queue_ready(&mut self, id: u32) -> Result<Vec<crate::HttpCall>, FilterError> {
        let Some(f) = self.cb.queue_ready.clone() else {
            return Ok(Vec::new());
        };
        self.in_root(None, |s| f.call(s, (ROOT, id as i32)))
    }

    /// `proxy_on_http_call_response` for a root context's call `token`
    /// (`None`: it failed).
    pub(crate) fn root_call_response(
        &mut self,
        token: u32,
        response: Option<crate::CallResponse>,
    ) -> Result<Vec<crate::HttpCall>, FilterError> {
        let Some(f) = self.cb.call_response.clone() else {
            return Ok(Vec::new());
        };
        let in_hand = response.map(|r| (r.head, r.body));
        let (fields, body) = in_hand
            .as_ref()
            .map_or((0, 0), |(h, b)| (h.headers.len() + 1, b.len()));
        self.in_root(in_hand, |s| {
            f.call(s, (ROOT, token as i32, fields as i32, body as i32, 0))
        })
    }

    fn budget(&mut self) -> Result<(), FilterError> {
        let filter = self.store.data().filter.clone();
        self.store
            .set_fuel(self.fuel)
            .map_err(|e| failure(&filter, e))
    }

    /// A new HTTP context; its id.
    pub(crate) fn create(&mut self) -> Result<i32, FilterError> {
        let id = self.next_id;
        // Ids are reused only after 2^31 requests, long after theirs ended.
        self.next_id = if id == i32::MAX { ROOT + 1 } else { id + 1 };
        self.budget()?;
        let filter = self.store.data().filter.clone();
        self.cb
            .context_create
            .call(&mut self.store, (id, ROOT))
            .map_err(|e| failure(&filter, e))?;
        Ok(id)
    }

    /// Runs a headers callback over `x` (moved in and back out); the
    /// action it returned and the exchange.
    pub(crate) fn headers(
        &mut self,
        response: bool,
        id: i32,
        x: Exchange,
    ) -> (Result<i32, FilterError>, Exchange) {
        let cb = if response {
            self.cb.response_headers.clone()
        } else {
            self.cb.request_headers.clone()
        };
        let Some(cb) = cb else {
            return (Ok(crate::abi::ACTION_CONTINUE), x);
        };
        if let Err(e) = self.budget() {
            return (Err(e), x);
        }
        let count = match (&x.request, &x.response) {
            (Some(r), _) if !response => r.headers.len() + 4,
            (_, Some(r)) => r.headers.len() + 1,
            _ => 0,
        };
        self.store.data_mut().x = x;
        let filter = self.store.data().filter.clone();
        let out = cb
            .call(&mut self.store, (id, count as i32, 0))
            .map_err(|e| failure(&filter, e));
        (out, std::mem::take(&mut self.store.data_mut().x))
    }

    /// Runs a body callback over the bytes in `x.body` (`end`: the body
    /// ends with them); the action it returned and the exchange.
    pub(crate) fn body(
        &mut self,
        id: i32,
        end: bool,
        x: Exchange,
    ) -> (Result<i32, FilterError>, Exchange) {
        let Some(b) = x.body.as_ref() else {
            return (Ok(crate::abi::ACTION_CONTINUE), x);
        };
        let (cb, size) = if b.response {
            (self.cb.response_body.clone(), b.bytes.len())
        } else {
            (self.cb.request_body.clone(), b.bytes.len())
        };
        let Some(cb) = cb else {
            return (Ok(crate::abi::ACTION_CONTINUE), x);
        };
        if let Err(e) = self.budget() {
            return (Err(e), x);
        }
        self.store.data_mut().x = x;
        let filter = self.store.data().filter.clone();
        let out = cb
            .call(&mut self.store, (id, size as i32, i32::from(end)))
            .map_err(|e| failure(&filter, e));
        (out, std::mem::take(&mut self.store.data_mut().x))
    }

    /// `proxy_on_http_call_response` for `token`, with the response in `x`
    /// (`None`: the call failed, announced with no fields and no body).
    pub(crate) fn call_response(
        &mut self,
        id: i32,
        token: u32,
        x: Exchange,
    ) -> (Result<(), FilterError>, Exchange) {
        let Some(cb) = self.cb.call_response.clone() else {
            return (Ok(()), x);
        };
        if let Err(e) = self.budget() {
            return (Err(e), x);
        }
        let (fields, body) = x
            .call_response
            .as_ref()
            .map_or((0, 0), |(h, b)| (h.headers.len() + 1, b.len()));
        self.store.data_mut().x = x;
        let filter = self.store.data().filter.clone();
        let out = cb
            .call(
                &mut self.store,
                (id, token as i32, fields as i32, body as i32, 0),
            )
            .map_err(|e| failure(&filter, e));
        (out, std::mem::take(&mut self.store.data_mut().x))
    }

    /// The end of a context: `proxy_on_done`, `proxy_on_log`, `proxy_on_delete`
    /// (Envoy's order).
    pub(crate) fn end(
        &mut self,
        id: i32,
        info: Option<Box<StreamInfo>>,
    ) -> Result<(), FilterError> {
        let filter = self.store.data().filter.clone();
        let fail = |e| failure(&filter, e);
        self.store.data_mut().x.info = info;
        let r = (|| {
            if let Some(f) = self.cb.done.clone() {
                self.budget()?;
                f.call(&mut self.store, id).map_err(fail)?;
            }
            if let Some(f) = self.cb.log.clone() {
                self.budget()?;
                f.call(&mut self.store, id).map_err(fail)?;
            }
            if let Some(f) = self.cb.delete.clone() {
                self.budget()?;
                f.call(&mut self.store, id).map_err(fail)?;
            }
            Ok(())
        })();
        self.store.data_mut().x = Exchange::default();
        r
    }
}
