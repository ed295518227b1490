//! z1: where the process's memory goes, as `/status` and `/metrics` say it:
//! the resident size and its parts (the tiers, the catalogue, the disk
//! indexes, the heap held beyond them, the allocator's free pages, the
//! program), so that an operator can size a container.

use hoard_testkit::Test;

use crate::admin::{metrics, status};

// z10001: after one object is stored, `/status` gives the resident size and
// its parts, the memory tier's part is the tier's own byte count, the parts
// add up to the resident size, and `/metrics` gives the same parts.
#[tokio::test]
async fn z10001_status_and_metrics_break_the_resident_memory_down() {
    let t = Test::new("z10001");
    let origin = t
        .origin()
        .script_fresh("/m", 600, "m".repeat(10_000))
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).admin().start().await;
    t.client(&proxy).get("/m").send().await.expect_status(200);
    proxy.wait_counter("objects_stored", 1).await;
    let st = status(&t, &proxy).await;
    let memory = &st["memory"];
    let process = &memory["process"];
    let n = |k: &str| {
        process[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} in {process}"))
    };
    assert!(n("resident") > 1 << 20, "{process}");
    assert!(n("memory_tier") >= 10_000, "{process}");
    assert_eq!(n("memory_tier"), memory["bytes"].as_u64().unwrap());
    assert_eq!(n("near_tier"), 0);
    assert!(n("catalogue") > 0, "one key: {process}");
    // With hoard's allocator, the rest is split into the heap held beyond
    // the tiers, the allocator's free pages and what is not heap.
    assert!(process.get("other").is_none(), "{process}");
    assert!(n("working") > 0, "connections and tables: {process}");
    assert!(n("program") > 0, "code and stacks: {process}");
    assert_eq!(
        [
            "memory_tier",
            "near_tier",
            "catalogue",
            "disk_index",
            "working",
            "allocator_free",
            "program"
        ]
        .iter()
        .map(|k| n(k))
        .sum::<u64>(),
        n("resident"),
        "{process}"
    );
    let m = metrics(&t, &proxy).await;
    assert!(m["hoard_process_resident_bytes"] > f64::from(1 << 20));
    assert_eq!(
        m[r#"hoard_memory_bytes{part="memory_tier"}"#],
        n("memory_tier") as f64
    );
    for part in [
        "near_tier",
        "catalogue",
        "disk_index",
        "working",
        "allocator_free",
        "program",
    ] {
        assert!(
            m.contains_key(&format!(r#"hoard_memory_bytes{{part="{part}"}}"#)),
            "{part}"
        );
    }
    origin.finish().await;
}
