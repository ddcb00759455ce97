//! A Rust workload for lockprof's unwinding tests, built by the test with
//! `rustc -O -C force-frame-pointers=no` (no frame pointers anywhere,
//! Rust's std included): threads contend on one std Mutex from a chain of
//! functions whose names exist only here. Prints `ready PID`, runs for the
//! given seconds, then exits.
use std::sync::Mutex;
use std::time::{Duration, Instant};

static TABLE: Mutex<u64> = Mutex::new(0);

#[inline(never)]
fn unwindme_take_lock(n: u64) {
    let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    for i in 0..2000 {
        *t = t.wrapping_add(i ^ n);
    }
    std::hint::black_box(&*t);
}

#[inline(never)]
fn unwindme_worker_loop(until: Instant) {
    let mut n = 0;
    while Instant::now() < until {
        unwindme_take_lock(n);
        n += 1;
    }
    std::hint::black_box(n);
}

fn main() {
    let secs: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let until = Instant::now() + Duration::from_secs(secs);
    let threads: Vec<_> = (0..4).map(|_| std::thread::spawn(move || unwindme_worker_loop(until))).collect();
    println!("ready {}", std::process::id());
    for t in threads {
        let _ = t.join();
    }
}
