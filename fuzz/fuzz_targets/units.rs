//! Configuration durations and sizes (`"500ms"`, `"256MiB"`):
//! `hoard_config::units::{parse_duration, parse_size}`.
//!
//! Built only with `--features config` (hoard-config is a larger build).
//! Beyond not panicking, checks that an accepted duration is at most 1e10 s
//! and that its whole milliseconds, printed as `"{n}ms"`, parse back to within
//! f64 precision; and that an accepted size, printed as a bare number of
//! bytes, parses back the same when it is exact in an `f64`.
#![no_main]

use std::time::Duration;

use hoard_config::units::{parse_duration, parse_size};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(d) = parse_duration(s) {
        assert!(d <= Duration::from_secs(10_000_000_000), "{s:?} -> {d:?}");
        let ms = d.as_millis();
        let again = parse_duration(&format!("{ms}ms")).expect("a printed duration parses");
        let want = Duration::from_millis(ms as u64);
        let diff = if again > want {
            again - want
        } else {
            want - again
        };
        // f64 seconds: exact to the nanosecond for small values, to a few
        // parts in 1e16 for large ones.
        let slack = 1e-6 + want.as_secs_f64() * 1e-15;
        assert!(diff.as_secs_f64() <= slack, "{s:?}: {again:?} vs {want:?}");
    }
    if let Ok(n) = parse_size(s) {
        if n <= 1 << 53 {
            assert_eq!(parse_size(&n.to_string()), Ok(n), "{s:?}");
        }
    }
});
