//! Whether and how a response is stored (RFC 9111 §3), and what a
//! response that may not be stored leaves behind (hit-for-pass).

use std::time::SystemTime;

use hoard_config::store_rules::StoreAction;
use hoard_policy::facts::ResponseFacts;
use hoard_policy::freshness::{LifetimeSource, StoredTimes};
use hoard_policy::reuse::StoredRules;
use hoard_policy::storable::{storability, NotStorable, RequestFacts};
use hoard_policy::vary::VaryNames;
use hoard_store::object::{ObjectBody, StoredObject};
use http::header::{self, HeaderMap};
use http::response::Parts;
use http::StatusCode;

use super::{FillEngine, FillJob};

/// What `decide` found for a storable response.
pub(super) struct Storable {
    pub(super) times: StoredTimes,
    pub(super) source: LifetimeSource,
    pub(super) rules: StoredRules,
    pub(super) vary: VaryNames,
    /// The fields to store (never-stored fields removed; `Content-Length`
    /// set when the body is complete).
    pub(super) headers: HeaderMap,
    pub(super) content_length: Option<u64>,
}

impl Storable {
    pub(super) fn object(
        &self,
        job: &FillJob,
        status: StatusCode,
        body: ObjectBody,
    ) -> StoredObject {
        StoredObject::new(
            job.key.text.clone(),
            self.vary.clone(),
            status,
            self.headers.clone(),
            self.times,
            self.source,
            self.rules,
            body,
        )
    }
}

impl FillEngine {
    /// Whether and how the response is stored (RFC 9111 §3), from the
    /// route's policy and the request's directives; `status` is the one
    /// it is judged by (see [`Self::slice_answer`]). The origin filters'
    /// `decision` and the route's store rules come last: `uncacheable` or
    /// a rule's `pass` refuses it; a `ttl` (the filter's, else the rule's)
    /// replaces the response's lifetime, and stores one that had none
    /// (the fields that forbid storing, such as `no-store`, `private` or
    /// `Set-Cookie`, still do: a filter removes them to store anyway).
    pub(super) fn decide(
        &self,
        job: &FillJob,
        status: StatusCode,
        parts: &Parts,
        (request_time, response_time): (SystemTime, SystemTime),
        decision: super::filters::FilterDecision,
    ) -> Result<Storable, NotStorable> {
        if decision.uncacheable {
            return Err(NotStorable::Filter);
        }
        let rule = hoard_config::store_rules::first_match(
            &job.route.store,
            status.as_u16(),
            &parts.headers,
        );
        let (rule_ttl, grace, stale_if_error) = match rule.map(|r| (r, r.action)) {
            Some((r, StoreAction::Pass)) => {
                tracing::debug!(key = %job.key.text, rule = %r.name, "a store rule passes the response");
                return Err(NotStorable::StoreRule);
            }
            Some((
                _,
                StoreAction::Store {
                    ttl,
                    grace,
                    stale_if_error,
                },
            )) => (ttl, grace, stale_if_error),
            None => (None, None, None),
        };
        let policy = &job.route.policy;
        let facts = ResponseFacts::read(status.as_u16(), &parts.headers, policy);
        let req_facts = RequestFacts {
            cacheable_method: true,
            cc: &job.req_cc,
            authorization: job.request_headers.contains_key(header::AUTHORIZATION),
        };
        let content_length = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        // An origin filter's TTL, else a store rule's, replaces the
        // response's own lifetime.
        let set = match (decision.ttl, rule_ttl) {
            (Some(t), _) => Some((t, LifetimeSource::Filter)),
            (None, Some(t)) => Some((t, LifetimeSource::Configured)),
            (None, None) => None,
        };
        let (lifetime, source) = match (storability(req_facts, &facts, policy, response_time), set)
        {
            (Ok(_) | Err(NotStorable::NoFreshness | NotStorable::StaleOnArrival), Some(set)) => set,
            (judged, _) => judged?,
        };
        if content_length.is_some_and(|len| len > self.store.max_object()) {
            return Err(NotStorable::TooLarge);
        }
        let mut headers = parts.headers.clone();
        hoard_policy::headers::strip_never_stored(&mut headers);
        // Every hit of a 200 of known length says so (see `range::ranged`):
        // stored once here, the field costs a hit nothing (inserting it
        // into each hit's copy of the fields grew that copy every time).
        if status == StatusCode::OK
            && content_length.is_some()
            && !headers.contains_key(header::ACCEPT_RANGES)
        {
            headers.insert(
                header::ACCEPT_RANGES,
                http::HeaderValue::from_static("bytes"),
            );
        }
        Ok(Storable {
            times: StoredTimes {
                request_time,
                response_time,
                date: facts.date.unwrap_or(response_time),
                age_value: facts.age,
                lifetime,
            },
            source,
            rules: {
                let mut rules = StoredRules::new(
                    &facts.cc,
                    policy.stale_while_revalidate,
                    policy.stale_if_error,
                );
                if let Some(g) = grace {
                    rules.stale_while_revalidate = g;
                }
                if let Some(e) = stale_if_error {
                    rules.stale_if_error = e;
                }
                rules
            },
            vary: if policy.ignore_vary {
                VaryNames::default()
            } else {
                VaryNames::from_response(&parts.headers)
            },
            headers,
            content_length,
        })
    }

    /// A response that may not be stored: a reason of the response's own
    /// marks the key hit-for-pass and drops a stored copy it replaces.
    pub(super) fn uncacheable(
        &self,
        job: &FillJob,
        reason: NotStorable,
        response_time: SystemTime,
    ) {
        self.counters.inc(&self.counters.not_storable);
        if reason.is_response_property() {
            if job.stale.is_some() {
                // Keeping the old copy would keep serving it. A reason of the
                // request's own (no-store, Authorization) leaves it alone: one
                // client cannot purge it for all.
                self.store.remove_all(job.key.digest);
            }
            if !job.route.hit_for_pass.is_zero() {
                self.hfp
                    .mark(job.key.digest, response_time + job.route.hit_for_pass);
                self.counters.inc(&self.counters.hit_for_pass_marks);
            }
        }
        tracing::debug!(key = %job.key.text, reason = reason.as_str(), "not storable");
    }
}
