//! Reads of the board given up on past their budget, with a stand-in
//! reader that gets stuck where a real one would block in the kernel.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use super::*;
use crate::board::tests::fake;

/// Upper bound on any wait here; not a performance assertion.
const LIVENESS: Duration = Duration::from_secs(60);

/// The budget of the reads that get stuck: ample for a thread to start
/// and note where it is (the stand-in does nothing else before it).
const BUDGET: Duration = Duration::from_secs(2);

/// A reader that reads the chip, then gets stuck at `sys/stuck` on its
/// first read until `release` is sent; later reads finish at once. It
/// counts its reads.
fn stuck_once(reads: &Arc<AtomicUsize>) -> (Reader, mpsc::Sender<()>) {
    let (release, released) = mpsc::channel::<()>();
    let released = Mutex::new(released);
    let reads = Arc::clone(reads);
    let reader: Reader = Arc::new(move |root: &Path, progress: &Progress| {
        let first = reads.fetch_add(1, Ordering::SeqCst) == 0;
        progress.fill(|s| s.chip = Some("rk3588".into()));
        if first {
            progress.at(Some(root.join("sys/stuck")));
            let _ = released.lock().recv_timeout(LIVENESS);
            progress.at(None);
        }
        progress.fill(|s| {
            s.zones.push(super::super::Zone {
                zone: "thermal_zone0".into(),
                kind: "soc-thermal".into(),
                celsius: 40.0,
            });
            s.finished = true;
        });
    });
    (reader, release)
}

fn stuck_reason(snapshot: &Snapshot) -> Option<&str> {
    snapshot
        .missing
        .iter()
        .find(|m| m.source == "board")
        .map(|m| m.reason.as_str())
}

#[tokio::test]
async fn a_stuck_read_is_given_up_on_and_later_scrapes_start_no_other() {
    let reads = Arc::new(AtomicUsize::new(0));
    let (reader, release) = stuck_once(&reads);
    let sampler = Sampler::with_reader(PathBuf::from("/root"), BUDGET, reader);
    // The scrape that started it: what was read before it got stuck.
    let first = tokio::time::timeout(LIVENESS, sampler.sample())
        .await
        .expect("a scrape returns");
    assert!(!first.finished);
    assert_eq!(first.chip.as_deref(), Some("rk3588"));
    assert!(first.zones.is_empty());
    let why = stuck_reason(&first).expect("the reason");
    assert!(
        why.starts_with("/root/sys/stuck: no answer within"),
        "{why}"
    );
    // Later scrapes find it stuck past its budget: nothing stale, the same
    // reason, and no second read.
    for _ in 0..3 {
        let later = tokio::time::timeout(LIVENESS, sampler.sample())
            .await
            .expect("a scrape returns");
        assert!(later.chip.is_none() && !later.finished);
        assert_eq!(stuck_reason(&later), Some(why));
        assert_eq!(reads.load(Ordering::SeqCst), 1, "a second read was started");
    }
    // Once it returns, the next scrape reads afresh.
    release.send(()).unwrap();
    let deadline = tokio::time::Instant::now() + LIVENESS;
    let fresh = loop {
        let snapshot = sampler.sample().await;
        if snapshot.finished {
            break snapshot;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the read never returned"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(fresh.zones.len(), 1);
    assert!(stuck_reason(&fresh).is_none(), "{:?}", fresh.missing);
    assert_eq!(reads.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn scrapes_at_once_share_one_read() {
    let reads = Arc::new(AtomicUsize::new(0));
    let (reader, release) = stuck_once(&reads);
    let sampler = Sampler::with_reader(PathBuf::from("/root"), LIVENESS, reader);
    let (a, b, ()) = tokio::join!(sampler.sample(), sampler.sample(), async {
        // Both scrapes have begun (join! polls them first).
        release.send(()).unwrap();
    });
    assert!(a.finished && b.finished);
    assert_eq!(a, b);
    assert_eq!(reads.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_sampler_reads_the_whole_board() {
    let sampler = Sampler::new(fake("rk3588"));
    let s = sampler.sample().await;
    assert!(s.finished, "{:?}", s.missing);
    assert!(s.missing.is_empty(), "{:?}", s.missing);
    assert_eq!(s.npu_load, Some(vec![12, 0, 0]));
    // The metrics' scope: no device node opened.
    assert!(s.npu_nodes.is_empty());
}

#[test]
fn a_read_within_a_budget_gives_what_it_has_and_leaves_the_rest() {
    let (release, released) = mpsc::channel::<()>();
    let s = within(Path::new("/root"), BUDGET, move |progress| {
        progress.fill(|s| s.chip = Some("rk3588".into()));
        progress.at(Some(PathBuf::from("/root/sys/stuck")));
        let _ = released.recv_timeout(LIVENESS);
    });
    release.send(()).unwrap();
    assert!(!s.finished);
    assert_eq!(s.chip.as_deref(), Some("rk3588"));
    assert!(
        stuck_reason(&s).is_some_and(|r| r.starts_with("/root/sys/stuck")),
        "{:?}",
        s.missing
    );
}

#[test]
fn doctor_reads_the_device_nodes_and_the_cpu_features() {
    let s = read_within(&fake("rk3588"), Scope::Doctor, LIVENESS);
    assert!(s.finished, "{:?}", s.missing);
    assert_eq!(
        s.npu_nodes,
        [crate::board::NpuNode {
            path: "/dev/dri/renderD129".into(),
            opens: true,
        }]
    );
}
