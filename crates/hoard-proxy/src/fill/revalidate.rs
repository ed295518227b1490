//! A 304 answered a revalidation: the stored response is refreshed (RFC
//! 9111 §4.3.4) without touching its body, unless a purge of its key came
//! after the revalidation's request left (the fill's purge epoch): then the
//! purge wins and nothing is refreshed (a soft purge's object stays stale,
//! a hard purge's stays gone), so the next request revalidates or fetches
//! again. The clients of this revalidation still get the 304's answer.

use std::sync::Arc;
use std::time::SystemTime;

use hoard_policy::conditional::merge_304;
use hoard_policy::facts::ResponseFacts;
use hoard_policy::freshness::{freshness_lifetime, StoredTimes};
use hoard_policy::reuse::StoredRules;
use hoard_store::object::StoredObject;
use http::header::{self, HeaderMap, HeaderValue};

use super::{FillEngine, FillJob};

impl FillEngine {
    /// Merges the 304's fields into the stored response and stores the
    /// refreshed copy (memory: swapped in; disk: the head rewritten) unless
    /// a purge since `purge_epoch` selects it. An origin filter's `ttl`,
    /// else a store rule's, replaces the refreshed lifetime.
    pub(super) async fn refresh_from_304(
        &self,
        job: &FillJob,
        stale: &Arc<StoredObject>,
        not_modified: &HeaderMap,
        (request_time, response_time): (SystemTime, SystemTime),
        filter_ttl: Option<std::time::Duration>,
        purge_epoch: u64,
    ) -> Arc<StoredObject> {
        self.counters.inc(&self.counters.cache_revalidated_304);
        let mut headers = stale.headers.clone();
        let mut update = not_modified.clone();
        hoard_policy::headers::strip_hop_by_hop(&mut update);
        update.remove(header::VIA);
        hoard_policy::headers::strip_never_stored(&mut update);
        // The 304 is the new response: its Date (or its arrival) and its Age
        // (or none) replace the old ones, or the old age would count twice.
        if !update.contains_key(header::DATE) {
            if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(response_time)) {
                update.insert(header::DATE, v);
            }
        }
        if !update.contains_key(header::AGE) {
            headers.remove(header::AGE);
        }
        merge_304(&mut headers, &update);
        let policy = &job.route.policy;
        let facts = ResponseFacts::read(stale.status.as_u16(), &headers, policy);
        let rule_ttl = match hoard_config::store_rules::first_match(
            &job.route.store,
            stale.status.as_u16(),
            &headers,
        )
        .map(|r| r.action)
        {
            Some(hoard_config::store_rules::StoreAction::Store { ttl, .. }) => ttl,
            _ => None,
        };
        let (lifetime, source) = match filter_ttl.or(rule_ttl) {
            Some(ttl) => (ttl, hoard_policy::freshness::LifetimeSource::Filter),
            None => freshness_lifetime(&facts, policy, response_time)
                .unwrap_or((std::time::Duration::ZERO, stale.lifetime_source)),
        };
        let times = StoredTimes {
            request_time,
            response_time,
            date: facts.date.unwrap_or(response_time),
            age_value: facts.age,
            lifetime,
        };
        let rules = StoredRules::new(
            &facts.cc,
            policy.stale_while_revalidate,
            policy.stale_if_error,
        );
        let fresh = Arc::new(stale.with_headers(headers, times, source, rules));
        if facts.cc.no_store || facts.cc.private {
            self.store.remove_all(job.key.digest);
        } else {
            let update = self.store.refresh(
                job.key.digest,
                &job.request_headers,
                stale,
                fresh.clone(),
                purge_epoch,
            );
            // A stalled disk must not hold the 304's answer: past the
            // origin's read timeout the head rewrite is left to finish alone.
            match tokio::time::timeout(job.upstream.cfg.read_timeout, update).await {
                Ok(true) => {}
                Ok(false) => {
                    self.counters.inc(&self.counters.revalidations_purged);
                    tracing::info!(key = %job.key.text, "a purge came after the revalidation left: not refreshed");
                }
                Err(_) => tracing::warn!(key = %job.key.text, "disk head rewrite stalled"),
            }
        }
        fresh
    }
}
