//! Tests of the busy body: readers at their own pace, ending and
//! aborting, released history (pacing, cut-off), spilling to disk.

use super::*;

#[tokio::test]
async fn readers_see_all_chunks_then_end() {
    let (body, w) = BusyBody::new();
    let mut r1 = body.reader().unwrap();
    w.append(Bytes::from_static(b"a"));
    let t = tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(c) = r1.next_chunk().await {
            got.extend_from_slice(&c.unwrap());
        }
        got
    });
    w.append(Bytes::from_static(b"b"));
    let mut r2 = body.reader().unwrap();
    assert_eq!(w.finish().unwrap().len(), 2);
    assert_eq!(t.await.unwrap(), b"ab");
    assert_eq!(r2.next_chunk().await.unwrap().unwrap(), "a");
    assert_eq!(r2.next_chunk().await.unwrap().unwrap(), "b");
    assert!(r2.next_chunk().await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_readers_at_their_own_pace_see_the_same_bytes() {
    let (body, w) = BusyBody::new();
    let readers: Vec<_> = (0..8u64)
        .map(|i| {
            let mut r = body.reader().unwrap();
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(c) = r.next_chunk().await {
                    got.extend_from_slice(&c.unwrap());
                    if got.len() % (1 + i as usize * 7) == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                got
            })
        })
        .collect();
    let mut want = Vec::new();
    for n in 0..2000u32 {
        let chunk = Bytes::from(n.to_le_bytes().to_vec());
        want.extend_from_slice(&chunk);
        w.append(chunk);
        if n % 64 == 0 {
            tokio::task::yield_now().await;
        }
    }
    w.finish();
    for r in readers {
        assert_eq!(r.await.unwrap(), want);
    }
}

#[tokio::test]
async fn dropped_writer_is_an_error_not_an_end() {
    let (body, w) = BusyBody::new();
    let mut r = body.reader().unwrap();
    w.append(Bytes::from_static(b"x"));
    drop(w);
    assert_eq!(r.next_chunk().await.unwrap().unwrap(), "x");
    assert_eq!(r.next_chunk().await.unwrap(), Err(FillError::Dangling));
}

#[tokio::test]
async fn writer_waits_for_the_slowest_reader_and_stops_when_none_is_left() {
    let (body, w) = BusyBody::new();
    let mut r = body.reader().unwrap();
    w.release_history(1 << 20);
    w.append(Bytes::from(vec![0u8; 600]));
    w.append(Bytes::from(vec![0u8; 600]));
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(20), w.room(1000))
            .await
            .is_err(),
        "1200 unread bytes > window"
    );
    let room = tokio::spawn({
        let body = body.clone();
        async move {
            let w = w;
            let ok = w.room(1000).await;
            drop(body);
            (ok, w)
        }
    });
    r.next_chunk().await.unwrap().unwrap();
    let (ok, w) = room.await.unwrap();
    assert!(ok, "the reader made room");
    drop(r);
    assert!(!w.room(1000).await, "no reader left");
}

#[tokio::test]
async fn a_lagging_reader_is_cut_off_and_does_not_stall_the_others() {
    let (body, w) = BusyBody::new();
    let mut stalled = body.reader().unwrap();
    let mut fast = body.reader().unwrap();
    w.release_history(1000);
    for _ in 0..5 {
        w.append(Bytes::from(vec![7u8; 400]));
        fast.next_chunk().await.unwrap().unwrap();
        assert!(w.room(500).await, "the fastest reader paces the writer");
    }
    assert_eq!(
        stalled.next_chunk().await.unwrap(),
        Err(FillError::ReaderTooSlow)
    );
    assert!(
        body.state.lock().buffered <= 1000,
        "the cut reader holds nothing"
    );
    w.finish();
    assert!(fast.next_chunk().await.is_none());
}

#[tokio::test]
async fn spilled_chunks_are_read_back_and_memory_stays_bounded() {
    #[derive(Debug)]
    struct Mem(std::sync::Mutex<Vec<u8>>);
    impl SpillRead for Mem {
        fn read(&self, offset: u64, len: u64) -> SpillFuture {
            let b = self.0.lock().unwrap()[offset as usize..(offset + len) as usize].to_vec();
            Box::pin(async move { Ok(Bytes::from(b)) })
        }
    }
    let file = Arc::new(Mem(std::sync::Mutex::new(Vec::new())));
    let source: Arc<dyn SpillRead> = file.clone();
    let (body, w) = BusyBody::new();
    let mut early = body.reader().unwrap();
    let mut want = Vec::new();
    for i in 0..100u32 {
        let chunk: Vec<u8> = (0..10_000).map(|j| ((i * 7 + j) % 251) as u8).collect();
        want.extend_from_slice(&chunk);
        file.0.lock().unwrap().extend_from_slice(&chunk);
        w.append(Bytes::from(chunk));
        w.spill(&source, w.len(), 50_000);
        assert!(body.buffered() <= 60_000, "buffered {}", body.buffered());
    }
    // A reader joining late still starts at byte 0.
    let mut late = body.reader().unwrap();
    assert!(w.chunks().is_none(), "spilled: not all in memory");
    w.finish();
    for r in [&mut early, &mut late] {
        let mut got = Vec::new();
        while let Some(c) = r.next_chunk().await {
            got.extend_from_slice(&c.unwrap());
        }
        assert_eq!(got, want);
    }
}

#[tokio::test]
async fn released_history_drops_read_chunks() {
    let (body, w) = BusyBody::new();
    let mut r = body.reader().unwrap();
    w.release_history(1 << 20);
    w.append(Bytes::from_static(b"x"));
    w.append(Bytes::from_static(b"y"));
    assert_eq!(r.next_chunk().await.unwrap().unwrap(), "x");
    assert_eq!(body.state.lock().chunks.len(), 1);
    assert!(
        body.reader().is_none(),
        "late readers cannot start at byte 0"
    );
    assert!(w.finish().is_none());
    assert_eq!(r.next_chunk().await.unwrap().unwrap(), "y");
    assert!(r.next_chunk().await.is_none());
}
