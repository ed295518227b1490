//! Status classes shared by the freshness and storability rules (RFC 9110 §15).

/// Statuses that are heuristically cacheable (RFC 9110 §15.1).
pub fn heuristically_cacheable(status: u16) -> bool {
    matches!(
        status,
        200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}
